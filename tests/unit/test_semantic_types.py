"""The semantic type map's schema side: which annotations a reader schema gives each row column, and that the
documented map (docs/types.md) is the one in the code. The values are tested through Spark in
tests/integration/test_semantic_types.py."""

from __future__ import annotations

import re

from cdc.semantic_types import CONVERSIONS, field_semantics
from simulators.formats import DebeziumEnvelope, DebeziumUnwrapped, DmsAvro
from simulators.tables import ORDERS
from tests.conftest import REPO

DOCUMENTED = {"io.debezium.time.Date", "org.apache.kafka.connect.data.Date", "io.debezium.time.Timestamp",
              "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp",
              "org.apache.kafka.connect.data.Timestamp", "io.debezium.time.ZonedTimestamp", "io.debezium.time.Time",
              "io.debezium.time.MicroTime", "io.debezium.time.NanoTime", "io.debezium.time.ZonedTime",
              "org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal",
              "io.debezium.data.Json", "io.debezium.data.Xml", "io.debezium.data.Uuid", "io.debezium.data.Enum",
              "io.debezium.data.EnumSet"}


def test_every_row_of_the_documented_map_has_a_conversion_and_nothing_else_does() -> None:
    assert set(CONVERSIONS) == DOCUMENTED
    table = (REPO / "docs" / "types.md").read_text().split("## The map", 1)[1].split("\n\n", 2)[1]
    named = set()
    for cell in re.findall(r"^\| ([^|]+) \|", table, re.MULTILINE):
        full = re.findall(r"`((?:io\.debezium|org\.apache)[\w.]+)`", cell)
        prefix = full[0].rsplit(".", 1)[0] if full else ""
        named |= set(full) | {f"{prefix}.{short}" for short in re.findall(r"`([A-Z]\w+)`", cell)}
    assert DOCUMENTED <= named


def test_each_format_names_the_row_columns_annotations() -> None:
    envelope = field_semantics(DebeziumEnvelope().value_schema(ORDERS, 2), "debezium")
    assert envelope["updated_at"].name == "io.debezium.time.MicroTimestamp"
    assert envelope["amount"].attributes["connect.parameters"]["connect.decimal.precision"] == "12"
    assert envelope["order_id"].name is None and envelope["notes"].name is None and "coupon" in envelope
    unwrapped = field_semantics(DebeziumUnwrapped().value_schema(ORDERS, 1), "debezium-unwrapped")
    assert unwrapped["ship_date"].name == "io.debezium.time.Date" and unwrapped["__op"].name is None
    assert field_semantics(DmsAvro().value_schema(ORDERS, 1), "dms")["tags"].name == "io.debezium.data.Json"


def test_a_named_type_used_again_is_found_by_its_full_name() -> None:
    decimal = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
               "connect.name": "io.debezium.data.VariableScaleDecimal",
               "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]}
    schema = {"type": "record", "name": "Value", "namespace": "shop.public.t", "fields": [
        {"name": "a", "type": ["null", decimal], "default": None},
        {"name": "b", "type": ["null", "io.debezium.data.VariableScaleDecimal"], "default": None},
        {"name": "c", "type": {"type": "int", "connect.name": "io.debezium.time.Date"}},
    ]}
    found = field_semantics(schema, "debezium-unwrapped")
    assert [found[n].name for n in "abc"] == ["io.debezium.data.VariableScaleDecimal"] * 2 + ["io.debezium.time.Date"]
