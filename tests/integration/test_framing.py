"""The framing's Spark expressions on Kafka-shaped rows: the schema id per record, where it came from, the body."""

from __future__ import annotations

import struct
import uuid
import zlib

import pytest
from pyspark.sql import functions as F

from cdc.framing import Framing, kind

pytestmark = pytest.mark.integration

VERSION = uuid.UUID("0f5e2a3c-8d1b-4e6f-9a7c-1b2d3e4f5a6b")
GLOBAL, CONTENT = "apicurio.value.globalId", "apicurio.value.contentId"
BINARY = [("apicurio.value.encoding", b"BINARY")]


def _long(value: int) -> bytes:
    return struct.pack(">q", value)


# (case, value, headers, expected schema id, expected kind, expected body)
CASES = [
    ("confluent 4-byte id", b"\x00" + (258).to_bytes(4) + b"body", [], "258", "framed", b"body"),
    ("apicurio legacy 8-byte id", b"\x00" + (7).to_bytes(8) + b"body", [], "7", "framed", b"body"),
    ("glue", b"\x03\x00" + VERSION.bytes + b"body", [], str(VERSION), "framed", b"body"),
    ("glue, zlib", b"\x03\x05" + VERSION.bytes + zlib.compress(b"body"), [], str(VERSION), "framed", b"body"),
    # Apicurio's converter with headers (its 2.x default): a plain Avro body, here one starting with byte 0
    ("header global id", b"\x00\x02body", [(GLOBAL, _long(42)), *BINARY], "global:42", "framed", b"\x00\x02body"),
    ("header content id, body starting with {", b"{body", [(CONTENT, _long(7))], "content:7", "framed", b"{body"),
    ("the last header wins", b"\x02b", [(GLOBAL, _long(1)), (GLOBAL, _long(2))], "global:2", "framed", b"\x02b"),
    ("a key's header is not the value's", b"\x00" + (5).to_bytes(4) + b"b", [("apicurio.key.globalId", _long(9))],
     "5", "framed", b"b"),
    ("Avro's JSON encoding is not Avro binary", b'{"id": 1}',
     [(GLOBAL, _long(3)), ("apicurio.value.encoding", b"JSON")], None, "json", None),
    ("DMS JSON", b'{"data": {}}', [], None, "json", None),
    ("garbage", b"\x07garbage", [], None, "unframed", None),
    ("tombstone", None, [(GLOBAL, _long(3))], None, "tombstone", None),
]


def _rows(spark, cases: list) -> list:
    frame = spark.createDataFrame([(value, headers) for _, value, headers, *_ in cases],
                                  "value binary, headers array<struct<key: string, value: binary>>")
    framing = Framing.of("auto")
    framed = frame.select("value", framing.schema_id().alias("schema_id")).withColumn("kind", kind(F.col("schema_id")))
    return framed.withColumn("body", framing.body(inflate=True)).collect()


def test_each_framing_is_found_per_record(spark) -> None:
    for (case, _, _, schema_id, value_kind, body), row in zip(CASES, _rows(spark, CASES)):
        assert (row["schema_id"], row["kind"]) == (schema_id, value_kind), case
        if value_kind == "framed":
            assert bytes(row["body"]) == body, case


def test_a_configured_framing_reads_only_its_payload_frame(spark) -> None:
    frame = spark.createDataFrame([(b"\x00" + (7).to_bytes(8) + b"body", [(GLOBAL, _long(42))])],
                                  "value binary, headers array<struct<key: string, value: binary>>")
    legacy = Framing.of("apicurio-legacy")
    row = frame.select("value", legacy.schema_id().alias("schema_id")).withColumn("body", legacy.body()).first()
    assert (row["schema_id"], bytes(row["body"])) == ("7", b"body") and not legacy.reads_headers
    assert "first byte 0" in legacy.expected and "apicurio.value.globalId" in Framing.of("auto").expected


def _compiled(frame) -> list[int]:
    """The largest generated method of each whole-stage-codegen subtree of `frame`'s plan, in bytes of
    bytecode, after checking that no projection of it is left to Spark's interpreter."""
    execution = frame._jdf.queryExecution()
    interpreted = [line for line in execution.executedPlan().toString().splitlines()
                   if "Project [" in line and "*(" not in line]
    assert not interpreted, interpreted
    found = execution.debug().codegenToSeq()
    return [found.apply(i)._3().maxMethodCodeSize() for i in range(found.size())]


@pytest.mark.usefixtures("compiling")  # it reads the code Spark generates
def test_classifying_and_normalising_compile_to_methods_the_jit_takes(spark) -> None:
    """HotSpot compiles no method over 8000 bytes of bytecode: over it, the stage's per-row work ran in the
    bytecode interpreter (the classifying projection was 8762 bytes, with each header looked up many times)."""
    from cdc.normalize import normalize

    frame = spark.createDataFrame([(b"\x00" + (5).to_bytes(4) + b"b", [(GLOBAL, _long(42)), *BINARY])],
                                  "value binary, headers array<struct<key: string, value: binary>>")
    framing = Framing.of("auto")
    classified = (frame.select("value", framing.schema_id().alias("schema_id"), framing.compressed().alias("c"))
                  .withColumn("kind", kind(F.col("schema_id"))).withColumn("body", framing.body()))
    assert max(_compiled(classified)) <= 8000
    assert classified.select("schema_id", "kind").first() == ("global:42", "framed")

    image = "struct<id: bigint, name: string, note: string>"
    decoded = spark.createDataFrame(
        [((None, (1, "a", "__debezium_unavailable_value"), (24, '["1","2"]', 2, "postgresql", "db", "public", "t",
                                                            7), "u"), "t", 0, 3, None, "5")],
        f"v struct<before: {image}, after: {image}, source: struct<ts_ms: bigint, sequence: string, lsn: bigint, "
        "connector: string, db: string, schema: string, table: string, txId: bigint>, op: string>, topic string, "
        "partition int, offset bigint, timestamp timestamp, schema_id string")
    changes = normalize(decoded, "debezium", "db")
    assert max(_compiled(changes)) <= 8000
    assert changes.select("name", "note", "_unchanged").first() == ("a", None, ["note"])


@pytest.mark.usefixtures("compiling")  # it reads the code Spark generates
def test_a_batchs_rows_compile_to_the_same_code_whatever_the_batch(spark) -> None:
    """Spark writes a literal number or time into the generated Java: with the batch id and the ingestion time
    as literals, every batch compiled its decode and normalise anew and the JIT warmed them up again. The stamped
    rows are projected again, as an append and the backfill's change records project them: the optimiser carries
    a one-row frame's literal columns through the join into such a projection. No stage's code may differ, the
    stamp's own included (a frame computed from the batch compiled its stage anew every batch)."""
    from pipeline.stages.changelog.landing import stamped

    rows = spark.range(1, 3).withColumn("name", F.concat(F.lit("n"), F.col("id").cast("string")))  # generated code

    def generated(frame) -> list[str]:
        frame.collect()  # the broadcast makes the plan adaptive: its stages are known once it ran
        found = frame._jdf.queryExecution().debug().codegenToSeq()
        return sorted(found.apply(i)._2() for i in range(found.size()))

    def projected(batch_id: int):
        return stamped(rows, batch_id).select(
            "id", "name", F.col("_batch_id").cast("int").alias("partition"), "_ingested_at", "_batch_id")

    first, second = projected(7), projected(8)
    assert generated(first) == generated(second)
    assert {(r["id"], r["_batch_id"]) for r in second.collect()} == {(1, 8), (2, 8)}
    assert second.schema["_ingested_at"].dataType.typeName() == "timestamp"
    assert {r["_batch_id"] for r in stamped(rows, 2**40).collect()} == {2**40}  # past an int's range
