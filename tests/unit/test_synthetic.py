"""`--tables synthetic:N`: the generated database's shapes, its determinism and skew, and that the simulator's
formats, registration and ground truth take it as they take the hand-written tables."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from cdc.semantic_types import CONVERSIONS
from registry.serde import AvroSerde
from registry.wire import WireFormat
from simulators import synthetic
from simulators.dms_types import arrow_type, converters, dms_row
from simulators.semantic import lake_value
from simulators.simulation import Simulation, SimulationError, SimulationOptions
from simulators.source import SourceDatabase
from simulators.tables import Column, Table, table_set
from simulators.truth import TruthStore
from tests.unit.test_simulator import _ListTransport, _MemoryRegistry


def _shape(table: Table) -> tuple:
    return (table.name, table.keys, table.weight, [(c.name, json.dumps(c.avro_type), c.toasted) for c in table.columns])


@pytest.fixture(scope="module")
def tables() -> tuple[Table, ...]:
    return synthetic.database(200, seed=7)


def test_the_same_seed_gives_the_same_database_and_another_seed_another(tables: tuple[Table, ...]) -> None:
    assert [_shape(t) for t in synthetic.database(200, seed=7)] == [_shape(t) for t in tables]
    assert [_shape(t) for t in synthetic.database(200, seed=8)] != [_shape(t) for t in tables]
    assert [_shape(t) for t in table_set("synthetic:200", 7)] == [_shape(t) for t in tables]


def test_shapes_span_narrow_to_wide_tables_with_unique_names() -> None:
    widths = [len(table.columns) for table in synthetic.database(1000, seed=3)]
    assert min(widths) >= 3 and max(widths) <= 120
    assert min(widths) <= 5 and max(widths) >= 100  # both ends are drawn
    names = [table.name for table in synthetic.database(1000, seed=3)]
    assert len(set(names)) == len(names)


def test_every_mapped_semantic_type_and_plain_type_is_present(tables: tuple[Table, ...]) -> None:
    types = [col.avro_type for table in tables for col in table.columns]
    semantic = {t.get("connect.name") for t in types if isinstance(t, dict)}
    assert set(CONVERSIONS) <= semantic
    assert {"int", "long", "string", "double", "float", "boolean", "bytes"} <= {t for t in types if isinstance(t, str)}
    assert any(col.toasted for table in tables for col in table.columns)


def test_composite_keys_and_keyless_tables_are_present_and_keys_are_unique_per_row(tables: tuple[Table, ...]) -> None:
    assert Counter(len(table.keys) > 1 for table in tables)[True] >= 20
    assert 1 <= sum(not table.keys for table in tables) <= 10
    composite = next(table for table in tables if len(table.keys) == 3)
    rows = [composite.key_row(key) for key in range(1, 500)]
    assert len({tuple(row[c] for c in composite.keys) for row in rows}) == len(rows)
    assert all(set(row) == set(composite.keys) for row in rows)


def test_non_key_columns_are_nullable_and_hold_nulls(tables: tuple[Table, ...]) -> None:
    db = SourceDatabase(tables[:20], seed=1, rows_per_table=30)
    rows = [change.after for change in db.snapshot()]
    assert any(None in row.values() for row in rows)
    assert all(row["id"] is not None for row in rows)


def test_a_few_hot_tables_carry_most_changes_and_every_table_has_a_row(tables: tuple[Table, ...]) -> None:
    db = SourceDatabase(tables, seed=5, rows_per_table=2)
    snapshot = Counter(change.table.name for change in db.snapshot())
    assert set(snapshot) == {table.name for table in tables}
    changes = Counter(c.table.name for c in itertools.islice(itertools.chain.from_iterable(db.transactions()), 20_000))
    top = sum(count for _, count in changes.most_common(len(tables) // 10))
    assert top > 0.5 * sum(changes.values())
    quiet = sorted(changes[table.name] for table in tables)[:len(tables) // 2]
    assert sum(quiet) < 0.15 * sum(changes.values())  # a long quiet tail


def test_the_option_is_validated() -> None:
    assert SimulationOptions(tables="synthetic:1000").tables == "synthetic:1000"
    for bad in ("synthetic:0", "synthetic:1001", "synthetic:x"):
        with pytest.raises(SimulationError, match="N must be a whole number from 1 to 1000"):
            SimulationOptions(tables=bad)


def test_a_run_registers_each_table_once_records_its_definition_and_keys_messages_by_its_key(tmp_path: Path) -> None:
    registry = _MemoryRegistry()
    transport = _ListTransport()
    truth = TruthStore(tmp_path / "t.db")
    options = SimulationOptions(format="debezium", tables="synthetic:60", events=1500, snapshot_rows=3, seed=2,
                                evolve_at=700)
    serde = AvroSerde(registry, WireFormat.CONFLUENT)
    Simulation(options, transport, truth, serde).run(progress=False)
    tables = table_set(options.tables, options.seed)
    assert len(registry._ids) <= 3 * len(tables)  # a key and two value versions a table, however many events
    for table in tables:
        assert truth.key_columns(table.qualified) == list(table.keys)
        assert set(truth.column_types(table.qualified)) == {c.name for c in (*table.columns, table.evolution)}
    keyless = {f"synth.public.{t.name}" for t in tables if not t.keys}
    by_table = {m.topic: m for m in transport.messages}
    assert keyless and all(by_table[topic].key is None for topic in keyless)
    composite = next(t for t in tables if len(t.keys) > 1)
    key = serde.deserialize(by_table[f"synth.public.{composite.name}"].key)
    assert list(key) == [c.name for c in composite.columns if c.name in composite.keys]


def test_dms_writes_semantic_values_as_dms_types(tables: tuple[Table, ...]) -> None:
    column_types = {col.avro_type.get("connect.name") if isinstance(col.avro_type, dict) else col.avro_type: col
                    for table in tables for col in table.columns}
    day, micros = column_types["io.debezium.time.Date"], column_types["io.debezium.time.MicroTimestamp"]
    table = Table("d", "public", "t", "id", (Column("id", "long"), day, micros),
                  partition_column=day.name, evolution=Column("note", "string"))
    row = dms_row({"id": 1, day.name: 1, micros.name: 1_500_000}, converters(table))
    assert row == {"id": 1, day.name: date(1970, 1, 2), micros.name: datetime(1970, 1, 1, 0, 0, 1, 500_000)}
    assert str(arrow_type(day.avro_type)) == "date32[day]" and str(arrow_type(micros.avro_type)) == "timestamp[us]"
    assert str(arrow_type(column_types["org.apache.kafka.connect.data.Decimal"].avro_type)).startswith("decimal128")


def test_the_truth_reads_every_semantic_value_as_its_lake_type() -> None:
    nanos = {"connect.name": "io.debezium.time.NanoTimestamp"}
    assert lake_value(nanos, "timestamp_ntz")(1_700_000_000_123_456_789) == datetime(2023, 11, 14, 22, 13, 20, 123456)
    scale = {"connect.name": "io.debezium.data.VariableScaleDecimal"}
    assert lake_value(scale, "decimal(38,18)")({"scale": 2, "value": (-12345).to_bytes(8, "big", signed=True).hex()}
                                               ) == Decimal("-123.45")
    assert lake_value({"connect.name": "io.debezium.time.ZonedTime"}, "string")("01:02:03.000004Z") == "01:02:03.000004"
    assert lake_value("bytes", "binary")("00ff") == b"\x00\xff"


@pytest.mark.parametrize("fmt", ["dms-json", "dms-csv", "dms-parquet"])
def test_every_synthetic_table_is_written_in_the_dms_formats(fmt: str, tmp_path: Path) -> None:
    """DMS JSON parses, with DMS's text for dates; each table's DMS file encodes, Parquet typed by DMS's map."""
    import io

    import pyarrow.parquet as pq

    from pipeline.config.settings import AwsSettings, DmsFileSettings
    from simulators.s3_files import S3FileTransport

    transport = _ListTransport()
    options = SimulationOptions(format=fmt, tables="synthetic:40", events=800, snapshot_rows=2, evolve_at=400)
    Simulation(options, transport, TruthStore(tmp_path / "t.db"), None).run(progress=False)
    tables = {f"synth.public.{t.name}": t for t in table_set(options.tables, options.seed)}
    if fmt == "dms-json":
        records = [json.loads(message.value) for message in transport.messages]
        day = next(c.name for t in tables.values() for c in t.columns
                   if isinstance(c.avro_type, dict) and c.avro_type["connect.name"] == "io.debezium.time.Date")
        assert any(isinstance(r["data"].get(day), str) and len(r["data"][day]) == 10 for r in records)
        return
    files = S3FileTransport(AwsSettings(), DmsFileSettings(), fmt)
    rows: dict[str, list] = {}
    for message in transport.messages:
        rows.setdefault(message.topic, []).append(message.value)
    for topic, table_rows in rows.items():
        body = files._encode(tables[topic], table_rows)
        if fmt == "dms-parquet":
            schema = pq.read_schema(io.BytesIO(body))
            for col in tables[topic].columns:
                assert schema.field(col.name).type == arrow_type(col.avro_type), (topic, col.name)
        else:
            assert body.splitlines()[0].decode().split(",")[2] == '"id"'
