"""The pipeline's own envelope decoder (`cdc/native.py`, jvm/cdc) gives the rows the column path gives
(`cdc/decode.py` + `cdc/normalize.py`, the reference), case by case: every operation, two writer versions with a
promoted type and an added column, TOAST placeholders, null sequences, bodies that do not decode; every semantic
type `cdc/semantic_types.py` maps, with its edge values; and a synthetic database as the simulator sends it
(`--tables synthetic:N`), table by table. The quiet topics' one job (jvm/cdc `QuietTopics`), the decoder's other
caller, lands what the function's path lands."""

from __future__ import annotations

import functools
import json
import struct
import uuid
from datetime import date, datetime
from decimal import Decimal
from io import BytesIO

import fastavro
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc import decode, native
from cdc.framing import Framing
from cdc.normalize import normalize, read_schema, rejections
from cdc.semantic_types import CONVERSIONS, PLACEHOLDER, field_semantics
from registry.factory import serde_from_settings
from simulators import synthetic
from simulators.semantic import DECIMAL_12_2, semantic
from simulators.simulation import Simulation, SimulationOptions
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore
from simulators.tables import table_set
from tables.lake import session_conf
from tests.conftest import code_generation

pytestmark = pytest.mark.integration

KAFKA_ROWS = "value binary, topic string, partition int, offset long, timestamp timestamp, schema_id string"
NULLABLE = {"name": "note", "type": ["null", {"type": "string", "avro.java.string": "String"}], "default": None}


def _envelope(version: int) -> dict:
    """A Debezium envelope of a table of plain types; version 2 widens `score` to long and adds `note`."""
    fields = [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
              {"name": "age", "type": ["null", "int"], "default": None},
              {"name": "score", "type": ["null", "int" if version == 1 else "long"], "default": None},
              {"name": "ratio", "type": ["null", "float"], "default": None},
              {"name": "weight", "type": ["null", "double"], "default": None},
              {"name": "active", "type": ["null", "boolean"], "default": None}]
    row = {"type": "record", "name": "Value", "namespace": "shop.public.t",
           "fields": fields + ([NULLABLE] if version == 2 else [])}
    source = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql", "fields": [
        {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
        {"name": "ts_ms", "type": "long"}, {"name": "db", "type": "string"},
        {"name": "sequence", "type": ["null", "string"], "default": None}, {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"}, {"name": "txId", "type": ["null", "long"], "default": None},
        {"name": "lsn", "type": ["null", "long"], "default": None}]}
    return {"type": "record", "name": "Envelope", "namespace": "shop.public.t", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "shop.public.t.Value"], "default": None},
        {"name": "source", "type": source}, {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", {"type": "record", "name": "Block", "fields": [
            {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"}]}], "default": None}]}


def _image(version: int, key: int, **values) -> dict:
    row = {"id": key, "name": f"n{key}", "age": 30 + key, "score": key * 10, "ratio": 0.5, "weight": 1.25 * key,
           "active": key % 2 == 0, **({"note": f"note {key}"} if version == 2 else {})}
    return {**row, **values}


def _source(lsn: int | None, sequence: str | None = None, ts_ms: int = 1_767_268_800_123) -> dict:
    return {"version": "2.7.3.Final", "connector": "postgresql", "ts_ms": ts_ms, "db": "shop",
            "sequence": sequence, "schema": "public", "table": "t", "txId": 700 + (lsn or 0), "lsn": lsn}


CHANGES = [  # (writer version, envelope)
    (1, {"before": None, "after": _image(1, 1), "op": "r", "source": _source(None)}),
    (1, {"before": None, "after": _image(1, 2), "op": "c", "source": _source(10, '["8","10"]')}),
    (2, {"before": _image(2, 2), "after": _image(2, 2, age=None, note=None), "op": "u",
         "source": _source(12, '[null,"12"]'), "transaction": {"id": "t1", "total_order": 1}}),
    (2, {"before": _image(2, 3), "after": None, "op": "d", "source": _source(14, '["13","14"]')}),
    (2, {"before": None, "after": None, "op": "t", "source": _source(16)}),
    (2, {"before": None, "after": _image(2, 4, note=PLACEHOLDER), "op": "u", "source": _source(18, '["17","18"]')}),
    (2, {"before": None, "after": _image(2, 5, name=PLACEHOLDER), "op": "u", "source": _source(20)}),
    (1, {"before": None, "after": _image(1, 6, score=-(2 ** 31)), "op": "c", "source": _source(22, "[]")}),
]
WRITER_IDS = {1: "41", 2: "42"}


@pytest.fixture(scope="module")
def framed(spark):
    """Confluent-framed envelopes, and one of each kind of broken body, as Kafka rows with their schema id."""
    values = []
    for version, change in CHANGES:
        out = BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(_envelope(version)),
                                   {"ts_ms": None, "transaction": None, **change})
        values.append((struct.pack(">bI", 0, int(WRITER_IDS[version])) + out.getvalue(), WRITER_IDS[version]))
    good = values[1][0]
    values += [(good[:len(good) // 2], "41"),  # cut short
               (struct.pack(">bI", 0, 41) + b"\xff\xff\xff", "41")]  # a union index out of range
    rows = [(value, "shop.public.t", 0, offset, datetime(2026, 1, 1), schema_id)
            for offset, (value, schema_id) in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_ROWS)


def _writers() -> dict[str, str]:
    return {WRITER_IDS[v]: json.dumps(_envelope(v)) for v in (1, 2)}


def _both(framed):
    reader = json.dumps(_envelope(2))
    framing = Framing.of("confluent")
    column = decode.avro(framed, framing, _writers(), json.dumps(read_schema(_envelope(2), "debezium")))
    return column, native.decoded(framed, framing, _writers(), reader), reader


def _rows(frame) -> dict[int, dict]:
    return {row["_transport"]["offset"]: row.asDict(recursive=True) for row in frame.collect()}


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "interpreted"])
def test_the_native_decoder_reads_what_the_reference_reads(spark, framed, compiled: bool) -> None:
    assert native.available(spark)
    assert native.reads(_envelope(2), [_envelope(1), _envelope(2)])
    column, decoded, reader = _both(framed)
    expected = _rows(normalize(column.where(decode.VALID), "debezium", "shop", reader))
    with session_conf(spark, code_generation(compiled)):
        frame = native.normalized(decoded.where(decode.VALID), reader)
        stages = frame._jdf.queryExecution().executedPlan().toString()
        found = _rows(frame)
    assert ("*(1)" in stages) == compiled, stages  # whole-stage code generation marks its operators "*(n)"
    assert found == expected
    assert len(found) == len(CHANGES)
    assert found[4]["_op"] == "t" and found[4]["id"] is None  # a truncate: no row values
    assert found[5]["note"] is None and found[5]["_unchanged"] == ["note"]
    assert found[2]["_seq"]["source_major"] == 12 and found[0]["_seq"]["source_major"] == 0


def test_bodies_that_do_not_decode_are_invalid_in_both(framed) -> None:
    column, decoded, _ = _both(framed)
    invalid = {len(CHANGES), len(CHANGES) + 1}
    assert {r["offset"] for r in column.where(~F.col(decode.VALID)).collect()} == invalid
    assert {r["offset"] for r in decoded.where(~F.col(decode.VALID)).collect()} == invalid


def test_a_placeholder_in_a_key_column_is_refused_by_both(framed) -> None:
    column, decoded, reader = _both(framed)
    keys = ["id", "name"]
    expected = [(cls, [r["offset"] for r in column.where(F.col(decode.VALID) & cond).collect()])
                for cond, cls, _ in rejections(column, "debezium", reader, keys)]
    found = [(cls, [r["offset"] for r in decoded.where(F.col(decode.VALID) & cond).collect()])
             for cond, cls, _ in native.rejections(decoded, reader, keys)]
    assert found == expected == [("ToastPlaceholderInKey", [6])]


def test_the_quiet_topics_job_lands_what_the_function_decodes(cfg, spark, framed, typed) -> None:
    """jvm/cdc `QuietTopics` (the quiet topics' one plan, `pipeline/stages/changelog/quiet.py`) decodes two topics'
    envelopes in one job with the function's programs: it lands the stamped change record `native.normalized`
    gives, and counts (lands none of) what does not decode, what the function's path refuses, tombstones and
    records that are not framed envelopes of the topic's writers: of those, the ones the input marks stray and
    the envelopes of an id of no writer (with their ids)."""
    from cdc.framing import Kind
    from cdc.normalize import any_rejection
    from pipeline.stages.changelog import quiet
    from tables.append import IcebergAppender, ManyTablesAppender
    from tables.lake import create_namespace

    namespace = f"quiet_{uuid.uuid4().hex[:6]}"
    create_namespace(spark, cfg.catalog.name, namespace)
    many = ManyTablesAppender(IcebergAppender(spark, f"{cfg.catalog.name}.{namespace}"))
    typed_rows, typed_reader = typed
    framing = Framing.of("confluent")
    cases = [("shop.public.t", framed, _writers(), json.dumps(_envelope(2)), ["id", "name"]),
             ("shop.public.typed", typed_rows, {"51": typed_reader}, typed_reader, ["id", "zoned", "blob"])]
    odd = spark.createDataFrame([(None, "shop.public.t", 1, 0, datetime(2026, 1, 1), None),  # a tombstone
                                 (b"\x07plain", "shop.public.t", 1, 1, datetime(2026, 1, 1), None),  # unframed
                                 (b"\x00\x00\x00\x00\x63\x02", "shop.public.t", 1, 2, datetime(2026, 1, 1), "99")],
                                KAFKA_ROWS)  # the last: an envelope of an id of no writer of the topic
    kind = (F.when(F.col("value").isNull(), Kind.TOMBSTONE.value)
            .when(F.col("schema_id").isNull(), Kind.UNFRAMED.value).otherwise(Kind.FRAMED.value))
    rows = (functools.reduce(DataFrame.unionByName, [frame for _, frame, *_ in cases] + [odd])
            .withColumns({"compressed": F.lit(False), "kind": kind, quiet.BODY_OFFSET: framing.body_offset()})
            .withColumn(quiet.STRAY, F.col("kind") == Kind.UNFRAMED.value))
    topics = []
    for topic, _, writers, reader, keys in cases:
        config = native.config(writers, reader)
        target = many.target(quiet.change_record(spark, config), topic.replace(".", "_"), "w", 3)
        topics.append(quiet.QuietTopic(topic, topic.replace(".", "_"), None, reader, writers, config, keys, target))
    counted = quiet.append(spark, rows, topics, "w", 3, {"_ingested_at": 1_767_268_800_000_000, "_batch_id": 3},
                           {}, threads=2)
    assert [(c.rows, c.tombstones, c.rest, c.invalid, c.refused, c.written, c.ids) for c in counted] == [
        (len(CHANGES) + 5, 1, 2, 2, 1, len(CHANGES) - 1, ["41", "42"]), (8, 0, 0, 0, 5, 3, ["51"])]
    assert [(c.stray, c.unlisted, c.unlisted_ids) for c in counted] == [(1, 1, ["99"]), (0, 0, [])]
    for (topic, frame, writers, reader, keys), found in zip(cases, topics):
        decoded = native.decoded(frame, framing, writers, reader)
        checks = native.rejections(decoded, reader, keys)
        expected = _rows(native.normalized(decoded.where(F.col(decode.VALID) & ~any_rejection(checks)), reader))
        landed = spark.table(f"{cfg.catalog.name}.{namespace}.{found.name}")
        assert {(r["_batch_id"], r["_ingested_at"]) for r in landed.collect()} == {(3, datetime(2026, 1, 1, 12))}
        assert _rows(landed.drop("_ingested_at", "_batch_id")) == expected, topic
        assert many.appender.committed("", found.target.table, "w", 3)


def _with_column(kind) -> dict:
    envelope = _envelope(2)
    envelope["fields"][0]["type"][1]["fields"].append({"name": "c", "type": kind})
    return envelope


def test_what_the_function_does_not_read_stays_on_the_column_path() -> None:
    assert set(native.FORMS) == set(CONVERSIONS)  # every semantic type the map converts, the function converts
    assert not native.reads({"type": "record", "name": "x", "fields": [{"name": "__op", "type": "string"}]}, [])
    for kind in ({"type": "array", "items": "string"}, {"type": "map", "values": "long"},
                 {"type": "enum", "name": "E", "symbols": ["a"]}, {"type": "fixed", "name": "F", "size": 2},
                 {"type": "int", "logicalType": "time-millis"},  # a logical type the map does not convert
                 {**semantic("long", "io.debezium.time.MicroTime"), "logicalType": "time-micros"},
                 {**semantic("string", "io.debezium.time.Date")},  # a semantic type in another Avro type
                 {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2},
                 ["null", "int", "string"], {"type": "record", "name": "R", "fields": [{"name": "a", "type": {
                     "type": "array", "items": "int"}}]}):
        assert not native.reads(_with_column(kind), [_with_column(kind)]), kind
    underscored = _envelope(2)
    underscored["fields"][0]["type"][1]["fields"].append({"name": "_op", "type": ["null", "string"]})
    assert not native.reads(underscored, [underscored])  # lands as `__op` (cdc/columns.py): the column path names it


GEOMETRY = {"type": "record", "name": "Geometry", "namespace": "io.debezium.data.geometry",
            "fields": [{"name": "wkb", "type": "bytes"}, {"name": "srid", "type": ["null", "int"], "default": None}],
            "connect.name": "io.debezium.data.geometry.Geometry"}  # a type the map does not know: as decoded
TYPED = {  # column -> (Avro type, values: one a row, the row's key its index)
    "day": (semantic("int", "io.debezium.time.Date"), [0, -1, 19_000]),
    "due": ({**semantic("int", "org.apache.kafka.connect.data.Date"), "logicalType": "date"}, [1, -719_162, 20_000]),
    "at_ms": (semantic("long", "io.debezium.time.Timestamp"), [1_700_000_000_123, -1, 0]),
    "at_us": (semantic("long", "io.debezium.time.MicroTimestamp"), [1_700_000_000_123_456, -1, 1]),
    "at_ns": (semantic("long", "io.debezium.time.NanoTimestamp"), [1_700_000_000_123_456_789, -1, 999]),
    "seen": ({**semantic("long", "org.apache.kafka.connect.data.Timestamp"), "logicalType": "timestamp-millis"},
             [1_700_000_000_123, -1_000, 5]),
    "seen_us": ({**semantic("long", "io.debezium.time.Timestamp"), "logicalType": "timestamp-micros"},
                [1_700_000_000_123_456, -1, 7]),  # the logical type's unit wins, as Spark reads it
    "zoned": (semantic("string", "io.debezium.time.ZonedTimestamp"),
              ["2025-03-04T05:06:07.123456Z", "2025-03-04T05:06:07+02:00", PLACEHOLDER]),
    "opens": (semantic("int", "io.debezium.time.Time"), [45_296_789, 86_400_000, -1]),
    "starts": (semantic("long", "io.debezium.time.MicroTime"), [45_296_789_012, 0, 86_399_999_999]),
    "ends": (semantic("long", "io.debezium.time.NanoTime"), [45_296_789_012_345, -1, 86_399_999_999_999]),
    "local": (semantic("string", "io.debezium.time.ZonedTime"), ["12:34:56.789Z", "23:59:59Z", "00:00:00.000001Z"]),
    "amount": (DECIMAL_12_2, [Decimal("-1234.56"), Decimal("0.01"), Decimal("9999999999.99")]),
    "price": (semantic("bytes", "org.apache.kafka.connect.data.Decimal", scale="3",
                       **{"connect.decimal.precision": "10"}),  # the precision in its parameters only
              [(12_345).to_bytes(2, "big", signed=True), b"", (10 ** 12).to_bytes(6, "big"), PLACEHOLDER.encode()]),
    "measure": (synthetic.VARIABLE_SCALE, [{"scale": 2, "value": (-12_345).to_bytes(4, "big", signed=True)},
                                 {"scale": 20, "value": (10 ** 21 + 5).to_bytes(9, "big")},  # rounded to 18
                                 {"scale": 0, "value": b"\x7f"}]),
    "attrs": (semantic("string", "io.debezium.data.Json"), ['{"n": 1}', PLACEHOLDER, "[]"]),
    "doc": (semantic("string", "io.debezium.data.Xml"), ["<a/>", "", "<b>x</b>"]),
    "uid": (semantic("string", "io.debezium.data.Uuid"), ["6f1c0a9e-7d7e-4b8a-9a51-1f4c1f2e3d4c"] * 3),
    "state": (semantic("string", "io.debezium.data.Enum", allowed="a,b"), ["a", "b", "a"]),
    "perms": (semantic("string", "io.debezium.data.EnumSet", allowed="r,w"), ["r,w", "", "w"]),
    "bits": (semantic("bytes", "io.debezium.data.Bits", length="8"), [b"\x01", b"\xff", b""]),
    "shape": (GEOMETRY, [{"wkb": b"\x01\x02", "srid": 4326}, {"wkb": b"", "srid": None}, {"wkb": b"\x00", "srid": 0}]),
    "blob": ("bytes", [b"\x00", PLACEHOLDER.encode(), b""]),
}
# values that do not fit: the row is refused as DecimalOverflow by both paths (more than 20 digits before the
# point, more than 38 digits, a negative scale)
OVERFLOWS = [{"scale": 0, "value": (10 ** 21).to_bytes(9, "big")},
             {"scale": 0, "value": (10 ** 38).to_bytes(17, "big")}, {"scale": -1, "value": b"\x01"}]


def _typed_envelope() -> dict:
    envelope = _envelope(1)
    envelope["fields"][0]["type"][1]["fields"] = [
        {"name": "id", "type": "long"},
        *[{"name": name, "type": ["null", kind], "default": None} for name, (kind, _) in TYPED.items()]]
    return envelope


def _typed_changes() -> list[dict]:
    rows = [{"id": i, **{name: values[i] if i < len(values) else None for name, (_, values) in TYPED.items()}}
            for i in range(4)]
    rows.append({"id": 4})  # every typed column null
    rows += [{"id": 5 + i, "measure": value} for i, value in enumerate(OVERFLOWS)]
    return [{"before": None, "after": {**{name: None for name in TYPED}, **row}, "op": "c",
             "source": _source(100 + row["id"]), "ts_ms": None, "transaction": None} for row in rows]


@pytest.fixture(scope="module")
def typed(spark):
    """Envelopes of a table with a column of every semantic type, as Kafka rows; and the reader's text."""
    schema = _typed_envelope()
    parsed = fastavro.parse_schema(schema)
    values = []
    for change in _typed_changes():
        out = BytesIO()
        fastavro.schemaless_writer(out, parsed, change)
        values.append(struct.pack(">bI", 0, 51) + out.getvalue())
    rows = [(value, "shop.public.typed", 0, offset, datetime(2026, 1, 1), "51") for offset, value in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_ROWS), json.dumps(schema)


def test_every_semantic_type_reads_as_the_reference_reads(typed) -> None:
    framed, reader = typed
    schema = json.loads(reader)
    assert native.reads(schema, [schema])
    framing, writers = Framing.of("confluent"), {"51": reader}
    column = decode.avro(framed, framing, writers, json.dumps(read_schema(schema, "debezium")))
    decoded = native.decoded(framed, framing, writers, reader)
    keys = ["id", "zoned", "blob"]

    def refused(part, checks) -> list[tuple[str, list[int]]]:
        return sorted((cls, sorted(r["offset"] for r in part.where(F.col(decode.VALID) & condition).collect()))
                      for condition, cls, _ in checks)

    assert (refused(column, rejections(column, "debezium", reader, keys))
            == refused(decoded, native.rejections(decoded, reader, keys))
            == [("DecimalOverflow", [5, 6, 7]), ("ToastPlaceholderInKey", [1]), ("ToastPlaceholderInKey", [2])])
    expected_frame = normalize(column.where(decode.VALID), "debezium", "shop", reader)
    frame = native.normalized(decoded.where(decode.VALID), reader)
    assert ([(f.name, f.dataType.simpleString()) for f in frame.schema]
            == [(f.name, f.dataType.simpleString()) for f in expected_frame.schema])
    found, expected = _rows(frame), _rows(expected_frame)
    assert found == expected
    assert found[0]["day"] == date(1970, 1, 1) and found[1]["at_ns"] == datetime(1969, 12, 31, 23, 59, 59, 999999)
    assert found[1]["opens"] == "00:00:00.000000" and found[1]["ends"] == "23:59:59.999999"
    assert found[1]["zoned"] == datetime(2025, 3, 4, 3, 6, 7) and found[2]["_unchanged"] == ["zoned"]
    assert found[1]["measure"] == Decimal("10.000000000000000000")  # 10**21 + 5 at scale 20, half up to 18
    assert found[1]["price"] is None and found[2]["price"] is None and found[3]["_unchanged"] == ["price"]
    assert found[0]["amount"] == Decimal("-1234.56") and found[0]["shape"] == {"wkb": b"\x01\x02", "srid": 4326}
    assert found[4]["_unchanged"] == [] and all(found[4][name] is None for name in TYPED)
    assert {r["offset"] for r in decoded.where(decode.VALID).collect()} == set(range(len(_typed_changes())))


def test_the_stage_decodes_plain_envelopes_natively_unless_told_not_to(cfg, spark) -> None:
    from pipeline.stages.changelog.landing import Landing, TopicPlan

    writers = _writers()
    assert Landing(cfg, spark)._native("debezium", _envelope(2), writers, TopicPlan("shop.public.t"))
    assert not Landing(cfg, spark)._native("debezium-unwrapped", _envelope(2), writers, TopicPlan("shop.public.t"))
    assert not Landing(cfg, spark)._native("debezium", _envelope(2), writers, TopicPlan("shop.public.t", compressed=1))
    off = cfg.model_copy(update={"changelog": cfg.changelog.model_copy(update={"native_decode": False})})
    assert not Landing(off, spark)._native("debezium", _envelope(2), writers, TopicPlan("shop.public.t"))


@pytest.fixture(scope="module")
def database(cfg, stack, spark, tmp_path_factory):
    """What `simulate --tables synthetic:N` sends (N: one table per kind of column, so every kind is there),
    with a schema change half-way (two writers a table), read back from Kafka; per topic its writers (schema
    id text -> text, from the registry), the last one registered its reader; and the tables."""
    prefix = f"synth{uuid.uuid4().hex[:6]}"
    options = SimulationOptions(format="debezium", tables=f"synthetic:{len(synthetic.KINDS)}", events=600,
                                snapshot_rows=2, evolve_at=300, topic_prefix=prefix)
    serde = serde_from_settings(cfg.registry, cfg.aws)
    Simulation(options, KafkaTransport(cfg.kafka, partitions=1), TruthStore(tmp_path_factory.mktemp("synthetic") /
               "truth.db"), serde).run(progress=False)
    framed = (spark.read.format("kafka").option("kafka.bootstrap.servers", cfg.kafka.bootstrap_servers)
              .option("subscribePattern", rf"{prefix}\..*").load()
              .selectExpr("value", "topic", "partition", "offset", "timestamp",
                          "CAST(conv(hex(substring(value, 2, 4)), 16, 10) AS STRING) AS schema_id")  # Confluent frame
              .localCheckpoint())
    writers: dict[str, dict[str, str]] = {}
    for row in framed.select("topic", "schema_id").distinct().collect():
        writers.setdefault(row["topic"], {})[row["schema_id"]] = serde.registry.schema(int(row["schema_id"]))
    return framed, writers, table_set(options.tables, options.seed), prefix


def _covering(tables) -> list:
    """Few tables that hold every kind of column between them (the widest first): each compared table costs a
    plan of each path, so the comparison takes these, not all."""
    chosen, missing = [], {kind.stem for kind in synthetic.KINDS}
    for table in sorted(tables, key=lambda t: -len(t.columns)):
        stems = {column.name.rsplit("_", 1)[0] for column in table.columns}
        if stems & missing:
            chosen.append(table)
            missing -= stems
    assert not missing
    return chosen


def _as_json(frame, topic: str) -> DataFrame:
    """A table's change records as (topic, offset, "record", the record as JSON): tables of different columns in
    one collect."""
    return frame.select(F.lit(topic).alias("topic"), F.col("_transport.offset").alias("offset"),
                        F.lit("record").alias("kind"), F.to_json(F.struct(*frame.columns)).alias("row"))


def _refused(decoded, topic: str, checks) -> DataFrame:
    """(topic, offset, "refused", why as JSON) of a table's decoded rows that must not land."""
    why = F.array_compact(F.array(*[F.when(condition, F.lit(f"{cls}: {message}"))
                                    for condition, cls, message in checks]))
    return (decoded.where(decoded[decode.VALID]).select(F.lit(topic).alias("topic"), "offset", why.alias("why"))
            .where(F.size("why") > 0).select("topic", "offset", F.lit("refused").alias("kind"),
                                             F.to_json("why").alias("row")))


def test_a_synthetic_database_reads_as_the_reference_reads(cfg, spark, database) -> None:
    from pipeline.stages.changelog.landing import Landing, TopicPlan

    framed, writers, tables, prefix = database
    landing, framing = Landing(cfg, spark), Framing.of("confluent")
    readers = {topic: of_topic[max(of_topic, key=int)] for topic, of_topic in writers.items()}
    for topic, of_topic in writers.items():  # the stage takes the function's path for every table
        assert landing._native("debezium", json.loads(readers[topic]), of_topic, TopicPlan(topic)), topic
    compared: dict[str, list[DataFrame]] = {"column": [], "native": []}
    for table in _covering(tables):
        topic = f"{prefix}.public.{table.name}"
        reader = readers[topic]
        # its TOAST-able columns as its key: both paths refuse a change that holds a placeholder in one
        schema, part, keys = json.loads(reader), framed.where(F.col("topic") == topic), list(table.toasted)
        column = decode.avro(part, framing, writers[topic], json.dumps(read_schema(schema, "debezium")))
        decoded = native.decoded(part, framing, writers[topic], reader)
        expected = normalize(column.where(decode.VALID), "debezium", "synth", reader)
        found = native.normalized(decoded.where(decode.VALID), reader)
        assert ([(f.name, f.dataType.simpleString()) for f in found.schema]
                == [(f.name, f.dataType.simpleString()) for f in expected.schema]), topic
        compared["column"] += [_as_json(expected, topic),
                               _refused(column, topic, rejections(column, "debezium", reader, keys))]
        compared["native"] += [_as_json(found, topic),
                               _refused(decoded, topic, native.rejections(decoded, reader, keys))]
    expected, found = ({(r["topic"], r["offset"], r["kind"]): r["row"]
                        for r in functools.reduce(DataFrame.unionAll, compared[path]).collect()}
                       for path in ("column", "native"))
    assert found == expected
    assert "refused" in {kind for _, _, kind in found}  # TOAST placeholders (in key columns here) met
    assert set(CONVERSIONS) <= {s.name for topic in {t for t, _, _ in found}
                                for s in field_semantics(json.loads(readers[topic]), "debezium").values()}
    assert any(len(writers[topic]) == 2 for topic, _, _ in found)  # the schema change: two writers
