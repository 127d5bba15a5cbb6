"""Every row of the semantic type map (docs/types.md), through Spark's `from_avro` and `normalize`, with TOAST
placeholders, truncates and the rows that must be dead-lettered (Spark, no services)."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from decimal import Decimal
from io import BytesIO

import fastavro
import pytest
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from cdc.normalize import normalize, rejections
from cdc.semantic_types import PLACEHOLDER
from pipeline.config.settings import load_config
from tables.views import latest_change_view

pytestmark = pytest.mark.integration


def _annotated(avro: str, name: str, **extra) -> list:
    return ["null", {"type": avro, "connect.version": 1, "connect.name": name, **extra}]


def _bytes(unscaled: int) -> bytes:
    return unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)


DECIMAL = {"scale": 2, "precision": 12, "connect.parameters": {"scale": "2", "connect.decimal.precision": "12"}}
VSD = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data", "connect.version": 1,
       "connect.name": "io.debezium.data.VariableScaleDecimal",
       "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]}
FIELDS = [
    ("id", "int", 7),
    ("d", _annotated("int", "io.debezium.time.Date"), 20454),
    ("cd", _annotated("int", "org.apache.kafka.connect.data.Date", logicalType="date"), 20455),
    ("ts", _annotated("long", "io.debezium.time.Timestamp"), 1_767_268_800_123),
    ("mts", _annotated("long", "io.debezium.time.MicroTimestamp"), 1_767_268_800_123_456),
    ("nts", _annotated("long", "io.debezium.time.NanoTimestamp"), 1_767_268_800_123_456_789),
    ("cts", _annotated("long", "org.apache.kafka.connect.data.Timestamp", logicalType="timestamp-millis"),
     1_767_268_800_123),
    ("zts", _annotated("string", "io.debezium.time.ZonedTimestamp"), "2026-01-01T14:00:00.123456+02:00"),
    ("t", _annotated("int", "io.debezium.time.Time"), 36_930_500),
    ("mt", _annotated("long", "io.debezium.time.MicroTime"), 36_930_123_456),
    ("nt", _annotated("long", "io.debezium.time.NanoTime"), 36_930_123_456_789),
    ("zt", _annotated("string", "io.debezium.time.ZonedTime"), "10:15:30.5Z"),
    ("dec", _annotated("bytes", "org.apache.kafka.connect.data.Decimal", logicalType="decimal", **DECIMAL),
     Decimal("-1234.56")),
    ("raw_dec", _annotated("bytes", "org.apache.kafka.connect.data.Decimal",
                           **{"connect.parameters": DECIMAL["connect.parameters"]}), _bytes(-123456)),
    ("vsd", ["null", VSD], {"scale": 3, "value": _bytes(-98765432109876543)}),
    ("big", ["null", "io.debezium.data.VariableScaleDecimal"], {"scale": 0, "value": _bytes(10 ** 25)}),
    ("js", _annotated("string", "io.debezium.data.Json"), '{"a": [1, 2]}'),
    ("xml", _annotated("string", "io.debezium.data.Xml"), "<a/>"),
    ("uid", _annotated("string", "io.debezium.data.Uuid"), "5e1b2c0a-8b1f-4b8e-9a55-0c5c0f6f2f7a"),
    ("en", _annotated("string", "io.debezium.data.Enum", **{"connect.parameters": {"allowed": "a,b"}}), "b"),
    ("es", _annotated("string", "io.debezium.data.EnumSet"), "a,b"),
    ("bits", _annotated("bytes", "io.debezium.data.Bits"), b"\x05"),
    ("body", ["null", "string"], "text"),
    ("blob", ["null", "bytes"], b"\x00\x01"),
    ("tags", ["null", {"type": "array", "items": "string"}], ["x", "y"]),
]
EXPECTED = {
    "id": 7, "d": date(2026, 1, 1), "cd": date(2026, 1, 2),
    "ts": datetime(2026, 1, 1, 12, 0, 0, 123000), "mts": datetime(2026, 1, 1, 12, 0, 0, 123456),
    "nts": datetime(2026, 1, 1, 12, 0, 0, 123456), "cts": datetime(2026, 1, 1, 12, 0, 0, 123000),
    "zts": datetime(2026, 1, 1, 12, 0, 0, 123456),  # the instant, shown in the session's zone (UTC)
    "t": "10:15:30.500000", "mt": "10:15:30.123456", "nt": "10:15:30.123456", "zt": "10:15:30.500000",
    "dec": Decimal("-1234.56"), "raw_dec": Decimal("-1234.56"), "vsd": Decimal("-98765432109876.543000000000000000"),
    "big": None,  # a null stays null; one too large is a dead letter (below)
    "js": '{"a": [1, 2]}', "xml": "<a/>", "uid": "5e1b2c0a-8b1f-4b8e-9a55-0c5c0f6f2f7a", "en": "b", "es": "a,b",
    "bits": b"\x05", "body": "text", "blob": b"\x00\x01", "tags": ["x", "y"],
}
TYPES = {"d": "date", "cd": "date", "ts": "timestamp_ntz", "mts": "timestamp_ntz", "nts": "timestamp_ntz",
         "cts": "timestamp_ntz", "zts": "timestamp", "t": "string", "mt": "string", "nt": "string", "zt": "string",
         "dec": "decimal(12,2)", "raw_dec": "decimal(12,2)", "vsd": "decimal(38,18)", "big": "decimal(38,18)",
         "js": "string", "uid": "string", "bits": "binary", "tags": "array<string>"}
UNWRAP = [("__op", "string"), ("__db", "string"), ("__table", "string"), ("__schema", "string"),
          ("__lsn", "long"), ("__source_ts_ms", "long"), ("__deleted", "string")]


def _schema() -> dict:
    fields = [{"name": name, "type": kind, **({"default": None} if isinstance(kind, list) else {})}
              for name, kind, _ in FIELDS]
    return {"type": "record", "name": "Value", "namespace": "shop.public.t",
            "fields": fields + [{"name": n, "type": ["null", k], "default": None} for n, k in UNWRAP]}


def _decoded(spark, rows: list[dict]):
    """Unwrapped records as a changelog batch: Avro bodies read by Spark's `from_avro` into `v`."""
    schema = _schema()
    parsed = fastavro.parse_schema(schema)
    bodies = []
    for offset, row in enumerate(rows):
        out = BytesIO()
        fastavro.schemaless_writer(out, parsed, {**row, "__db": "shop", "__table": "t", "__schema": "public",
                                                 "__lsn": 100 + offset, "__source_ts_ms": 1_767_268_800_000,
                                                 "__deleted": "true" if row["__op"] == "d" else "false"})
        bodies.append((out.getvalue(), "shop.public.t", 0, offset, datetime(2026, 1, 1), "1"))
    raw = spark.createDataFrame(bodies, "value binary, topic string, partition int, offset long, "
                                        "timestamp timestamp, schema_id string")
    return raw.withColumn("v", from_avro(F.col("value"), json.dumps(schema))), json.dumps(schema)


def _values(**changes) -> dict:
    return {**{name: value for name, _, value in FIELDS if name != "big"}, "big": None, "__op": "u", **changes}


def test_every_semantic_type_lands_as_its_lake_type(spark) -> None:
    decoded, reader = _decoded(spark, [_values()])
    changes = normalize(decoded, "debezium-unwrapped", "shop", reader)
    types = dict(changes.dtypes)
    assert {name: types[name] for name in TYPES} == TYPES
    row = changes.first().asDict()
    assert {name: row[name] for name in EXPECTED} == EXPECTED
    assert row["_unchanged"] == []


def test_an_unknown_debezium_type_lands_raw_with_one_warning(spark, capsys) -> None:
    import structlog

    decoded, reader = _decoded(spark, [_values()])
    with structlog.testing.capture_logs() as logs:
        normalize(decoded, "debezium-unwrapped", "shop", reader)
        normalize(decoded, "debezium-unwrapped", "shop", reader)
    warned = [e for e in logs if e["event"] == "normalize.unknown_semantic_type"]
    assert [(e["column"], e["semantic_type"]) for e in warned] in ([("bits", "io.debezium.data.Bits")], [])
    # (empty when an earlier test of this process warned already: once per column and type per process)


def test_toast_placeholders_become_null_and_are_named(spark) -> None:
    decoded, reader = _decoded(spark, [_values(body=PLACEHOLDER, blob=PLACEHOLDER.encode(), tags=[PLACEHOLDER],
                                               js=PLACEHOLDER)])
    row = normalize(decoded, "debezium-unwrapped", "shop", reader).first()
    assert sorted(row["_unchanged"]) == ["blob", "body", "js", "tags"]
    assert (row["body"], row["blob"], row["tags"], row["js"]) == (None, None, None, None)
    assert row["xml"] == "<a/>"  # the rest as sent


def test_rows_that_cannot_land_are_named_with_their_reason(spark) -> None:
    rows = [_values(), _values(id=8, big={"scale": 0, "value": _bytes(10 ** 25)}),
            _values(id=9, body=PLACEHOLDER)]
    decoded, reader = _decoded(spark, rows)
    found = rejections(decoded, "debezium-unwrapped", reader, keys=["id", "body"])
    rejected = [(error_class, message.split("column ")[1].split()[0],
                 [r[0] for r in decoded.where(condition).select("v.id").collect()])
                for condition, error_class, message in found]
    assert sorted(rejected) == [("DecimalOverflow", "big", [8]), ("DecimalOverflow", "vsd", []),
                                ("ToastPlaceholderInKey", "body", [9])]


def test_a_truncate_is_a_deleting_row_without_values(spark) -> None:
    from simulators.formats import DebeziumEnvelope  # the envelope's source block, as the simulator writes it

    schema = DebeziumEnvelope().value_schema(_Table, 1)
    parsed = fastavro.parse_schema(schema)
    out = BytesIO()
    fastavro.schemaless_writer(out, parsed, {"before": None, "after": None, "op": "t", "ts_ms": 1,
                                             "transaction": None, "source": {
                                                 "version": "2.7.3.Final", "connector": "postgresql", "name": "shop",
                                                 "ts_ms": 1_767_268_800_000, "snapshot": "false", "db": "shop",
                                                 "sequence": '["90","95"]', "schema": "public", "table": "t",
                                                 "txId": 3, "lsn": 95, "xmin": None}})
    raw = spark.createDataFrame([(out.getvalue(), "shop.public.t", 0, 4, datetime(2026, 1, 1), "1")],
                                "value binary, topic string, partition int, offset long, timestamp timestamp, "
                                "schema_id string")
    reader = json.dumps(schema)
    row = normalize(raw.withColumn("v", from_avro(F.col("value"), reader)), "debezium", "shop", reader).first()
    assert (row["_op"], row["_is_deleted"], row["id"], tuple(row["_seq"])[:2]) == ("t", True, None, (90, 95))


class _Table:
    """A one-column table for the envelope's schema."""

    qualified = "shop.public.t"
    key = "id"
    keys = ("id",)  # the primary key's columns, as `simulators.tables.Table.keys` gives them

    @staticmethod
    def columns_at(version: int):
        from simulators.tables import Column

        return (Column("id", "int"),)


def test_the_stage_dead_letters_what_cannot_land_with_its_reason(cfg, stack, spark, tmp_path) -> None:
    """Through Kafka and the registry: a placeholder in a key column and a decimal too large go to the
    dead-letter table with their reasons; the good record lands typed."""
    import uuid

    from confluent_kafka import Producer

    from pipeline.config import kafka
    from pipeline.stages.changelog import ChangelogStage
    from registry.avro import avro_schema
    from registry.factory import serde_from_settings

    prefix = f"ty{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}.public.t"
    schema = _schema()
    serialize = serde_from_settings(cfg.registry, cfg.aws).serializer(topic, avro_schema(schema))
    unwrap = {"__db": prefix, "__table": "t", "__schema": "public", "__source_ts_ms": 1_767_268_800_000,
              "__deleted": "false"}
    producer = Producer(kafka.client_conf(cfg.kafka))
    for lsn, row in enumerate([_values(), _values(id=8, big={"scale": 0, "value": _bytes(10 ** 25)}),
                               _values(id=9, body=PLACEHOLDER)], start=1):
        producer.produce(topic, serialize({**row, **unwrap, "__lsn": lsn}), key=str(row["id"]).encode())
    assert producer.flush(30) == 0
    settings = cfg.changelog.model_copy(update={"topics": [topic], "checkpoint": tmp_path / "cp"})
    mirror = cfg.mirror.model_copy(update={"keys": {f"{prefix}_t": "id,body"}})
    ChangelogStage(cfg.model_copy(update={"changelog": settings, "mirror": mirror}), spark).run(until_caught_up=True)
    landed = spark.table(f"{cfg.catalog.name}.changelog.{prefix}_t")
    assert [(r["id"], r["mts"]) for r in landed.collect()] == [(7, EXPECTED["mts"])]
    dead = spark.table(f"{cfg.catalog.name}.changelog.{cfg.changelog.dead_letter_table}").where(f"topic = '{topic}'")
    assert sorted((r["error_class"], r["error_message"].split("column ")[1].split()[0])
                  for r in dead.collect()) == [("DecimalOverflow", "big"), ("ToastPlaceholderInKey", "body")]


def _changes_around_a_truncate(spark):
    """Changes of keys 1 and 2 with TOAST placeholders, a delete of key 6, a truncate, an insert of key 7, a second
    truncate, then an insert of key 3."""
    rows = [  # (id, body, tags, _unchanged, _op, major)
        (1, "first", "a", [], "c", 10), (1, None, "b", ["body"], "u", 20),
        (1, None, None, ["body", "tags"], "u", 30),
        (2, None, "x", ["body"], "u", 40), (6, "gone", "g", [], "d", 45), (None, None, None, [], "t", 50),
        (7, "between", "b", [], "c", 52), (None, None, None, [], "t", 55), (3, "new", "n", [], "c", 60),
    ]
    return spark.createDataFrame(
        [(i, body, tags, unchanged, op, op in ("t", "d"), datetime(2026, 1, 1) + timedelta(seconds=major), (major, major, 0, n))
         for n, (i, body, tags, unchanged, op, major) in enumerate(rows)],
        "id int, body string, tags string, _unchanged array<string>, _op string, _is_deleted boolean, "
        "_source_ts timestamp, _seq struct<source_major:long,source_minor:long,transport_partition:int,"
        "transport_offset:long>")


def test_several_changes_of_a_key_in_one_run_keep_the_last_real_value_and_a_truncate_deletes_older_rows(
        spark) -> None:
    """The mirror's reduce (Spark, no table): placeholders take the newest earlier real value; the first truncate
    after a live key's change, in the run or the mirror, turns it into a delete at that truncate's position; a key
    deleted before keeps its own delete."""
    from cdc.merge import latest_per_key, truncated, truncates

    changes = _changes_around_a_truncate(spark)
    reduced = latest_per_key(changes, ["id"])
    mirror = spark.createDataFrame([(4, "kept", "k", "r", False, (5, 5, 0, 0)),
                                    (5, "later", "l", "c", False, (70, 70, 0, 9))],
                                   "id int, body string, tags string, _op string, _is_deleted boolean, "
                                   "_seq struct<source_major:long,source_minor:long,transport_partition:int,"
                                   "transport_offset:long>")
    before = {r["id"]: r for r in reduced.where("id IS NOT NULL").collect()}
    assert (before[1]["body"], before[1]["tags"], before[1]["_unchanged"]) == ("first", "b", [])
    assert before[2]["_unchanged"] == ["body"]  # no real value in the run: the mirror keeps its own
    after = {r["id"]: r for r in truncated(reduced, ["id"], mirror, truncates(changes, ["id"])).collect()}
    assert {i: (r["_op"], r["_is_deleted"], r["_seq"]["source_major"]) for i, r in after.items()} == {
        1: ("t", True, 50), 2: ("t", True, 50), 3: ("c", False, 60), 4: ("t", True, 50), 5: ("c", False, 70),
        6: ("d", True, 45), 7: ("t", True, 55)}
    assert after[4]["body"] == "kept"  # a soft delete keeps the last known values


def test_the_latest_change_view_applies_the_truncates_like_the_mirror(spark, tmp_path) -> None:
    """`changelog.<t>_latest` over the same changes: a key live before a truncate shows as deleted by the first
    truncate after its change, at its position; the truncates, which name no key, are no rows of the view."""
    changes = _changes_around_a_truncate(spark)
    changes.createOrReplaceTempView("changes_around_a_truncate")
    cfg = load_config(overrides=[f"home={tmp_path}"], environ={})
    view = latest_change_view(cfg, "changes_around_a_truncate", ["id"], changes.columns)
    rows = {r["id"]: r for r in spark.sql(view.select("changes_around_a_truncate")).collect()}
    assert {i: (r["_op"], r["_is_deleted"], r["_seq"]["source_major"]) for i, r in rows.items()} == {
        1: ("t", True, 50), 2: ("t", True, 50), 3: ("c", False, 60), 6: ("d", True, 45), 7: ("t", True, 55)}
    assert rows[1]["_source_ts"] == datetime(2026, 1, 1) + timedelta(seconds=50)
