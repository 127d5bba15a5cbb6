"""The pipeline's own envelope decoder (`cdc/native.py`, jvm/cdc) gives the rows the column path gives
(`cdc/decode.py` + `cdc/normalize.py`, the reference), case by case: every operation, two writer versions with a
promoted type and an added column, TOAST placeholders, null sequences, bodies that do not decode (Spark, no
services)."""

from __future__ import annotations

import json
import struct
from datetime import datetime
from io import BytesIO

import fastavro
import pytest
from pyspark.sql import functions as F

from cdc import decode, native
from cdc.framing import Framing
from cdc.normalize import normalize, read_schema, rejections
from cdc.semantic_types import PLACEHOLDER
from tables.lake import session_conf
from tests.conftest import code_generation

pytestmark = pytest.mark.integration

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
    return spark.createDataFrame(rows, "value binary, topic string, partition int, offset long, "
                                       "timestamp timestamp, schema_id string")


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
        frame = native.normalized(decoded.where(decode.VALID))
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
             for cond, cls, _ in native.rejections(decoded, keys)]
    assert found == expected == [("ToastPlaceholderInKey", [6])]


def test_semantic_types_and_other_formats_stay_on_the_column_path() -> None:
    dated = _envelope(2)
    row = dated["fields"][0]["type"][1]
    row["fields"] = [*row["fields"], {"name": "d", "type": ["null", {"type": "int", "connect.name":
                                                                      "io.debezium.time.Date"}]}]
    assert not native.reads(dated, [dated])
    assert not native.reads({"type": "record", "name": "x", "fields": [{"name": "__op", "type": "string"}]}, [])
    bytes_row = _envelope(2)
    bytes_row["fields"][0]["type"][1]["fields"].append({"name": "b", "type": ["null", "bytes"]})
    assert not native.reads(bytes_row, [bytes_row])  # bytes may carry the placeholder: the reference finds it
    underscored = _envelope(2)
    underscored["fields"][0]["type"][1]["fields"].append({"name": "_op", "type": ["null", "string"]})
    assert not native.reads(underscored, [underscored])  # lands as `__op` (cdc/columns.py): the column path names it


def test_the_stage_decodes_plain_envelopes_natively_unless_told_not_to(cfg, spark) -> None:
    from pipeline.stages.changelog.landing import Landing, TopicPlan

    writers = _writers()
    assert Landing(cfg, spark)._native("debezium", _envelope(2), writers, TopicPlan("shop.public.t"))
    assert not Landing(cfg, spark)._native("debezium-unwrapped", _envelope(2), writers, TopicPlan("shop.public.t"))
    assert not Landing(cfg, spark)._native("debezium", _envelope(2), writers, TopicPlan("shop.public.t", compressed=1))
    off = cfg.model_copy(update={"changelog": cfg.changelog.model_copy(update={"native_decode": False})})
    assert not Landing(off, spark)._native("debezium", _envelope(2), writers, TopicPlan("shop.public.t"))
