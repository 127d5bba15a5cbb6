"""Source names Spark, Iceberg and Athena do not take bare, through each transport into the changelog and mirror.

Each transport lands the same four changes of one table whose name has a dash, a space or a non-ASCII letter,
keyed by a column named `order`, with a column named `select`: inserts of keys 1, 2 and 3, an update of 1 and a
delete of 2. The lake table is named by `tables.names.lake_table_name`, and the mirror's MERGE and its views
work on it. Names no lake table can take are dead letters with their reason.
"""

from __future__ import annotations

import io
import json
import struct
import time
import uuid
from pathlib import Path

import boto3
import pytest

from pipeline.config import kafka
from pipeline.stages.changelog import ChangelogStage
from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import MirrorStage
from registry.apicurio import ApicurioClient
from registry.avro import avro_schema, encode
from simulators.s3_files import ensure_notified_bucket
from tables.names import MAX_LENGTH, lake_table_name, quote

pytestmark = pytest.mark.integration

# (op, order, select): the changes every transport sends, in commit order
CHANGES = [("c", 1, "a"), ("c", 2, "b"), ("c", 3, "c"), ("u", 1, "a2"), ("d", 2, "b")]
CURRENT = {(1, "a2"), (3, "c")}
DMS_OPERATIONS = {"c": "insert", "u": "update", "d": "delete"}


def _table(spark, cfg: PipelineConfig, namespace: str, name: str):
    return spark.table(quote(cfg.catalog.name, namespace, name))


def _assert_landed_and_mirrored(spark, cfg: PipelineConfig, name: str) -> None:
    """The changelog holds every change; the mirror and its views hold the source's state, keyed by `order`."""
    changes = _table(spark, cfg, "changelog", name).select("_op", "order", "select").collect()
    assert sorted(tuple(row) for row in changes) == sorted(CHANGES)
    cfg = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"keys": {name: "order"}, "tables": [name]})})
    MirrorStage(cfg, spark).run_once([name])
    mirror = {(r["order"], r["select"], r["_is_deleted"]) for r in _table(spark, cfg, "mirror", name).collect()}
    assert mirror == {(1, "a2", False), (2, "b", True), (3, "c", False)}
    current = _table(spark, cfg, "mirror", f"{name}{cfg.mirror.view_suffix}").select("order", "select").collect()
    assert {tuple(row) for row in current} == CURRENT
    latest = _table(spark, cfg, "changelog", f"{name}{cfg.mirror.latest_view_suffix}")
    assert {(r["order"], r["_op"]) for r in latest.collect()} == {(1, "u"), (2, "d"), (3, "c")}


def _dead_letters(spark, cfg: PipelineConfig, condition: str) -> list[tuple]:
    letters = _table(spark, cfg, "changelog", cfg.changelog.dead_letter_table).where(condition)
    return [(row["topic"], row["error_class"]) for row in letters.collect()]


def _dms_metadata(op: str, position: int, table: str | None) -> dict:
    names = {"schema-name": "public", "table-name": table} if table is not None else {}
    return {"timestamp": f"2026-01-01T00:00:0{position}.000000Z", "record-type": "data",
            "operation": DMS_OPERATIONS[op], "partition-key-type": "primary-key", **names,
            "transaction-id": 100 + position, "transaction-record-id": 1}


# -- Kafka: Debezium unwrapped Avro, its schema in Apicurio -------------------------------------------------

def _unwrapped_schema() -> dict:
    metadata = [("__op", "string"), ("__db", "string"), ("__table", "string"), ("__schema", "string"),
                ("__lsn", "long"), ("__source_ts_ms", "long"), ("__deleted", "string")]
    return {"type": "record", "name": "Value", "namespace": "odd",
            "fields": [{"name": "order", "type": "int"},
                       *[{"name": name, "type": ["null", kind], "default": None}
                         for name, kind in [("select", "string"), *metadata]]]}


def test_a_kafka_topic_with_an_odd_table_name_lands_and_mirrors(stack, spark, cfg: PipelineConfig,
                                                                 tmp_path: Path) -> None:
    from confluent_kafka import Producer

    db = f"9odd{uuid.uuid4().hex[:6]}"  # a lake name starting with a digit
    topics = {"Order-Items": f"{db}.public.Order-Items", "select": f"{db}.public.select"}
    schema = _unwrapped_schema()
    apicurio = ApicurioClient.from_settings(cfg.registry)
    ids = {table: apicurio.create_version(f"{topic}-value", schema).content_id for table, topic in topics.items()}
    producer = Producer(kafka.client_conf(cfg.kafka))
    for table, topic in topics.items():
        for lsn, (op, order, select) in enumerate(CHANGES, start=1000):
            row = {"order": order, "select": select, "__op": op, "__db": db, "__table": table, "__schema": "public",
                   "__lsn": lsn, "__source_ts_ms": int(time.time() * 1000), "__deleted": str(op == "d").lower()}
            value = b"\x00" + struct.pack(">I", ids[table]) + encode(avro_schema(schema), row)
            producer.produce(topic, value=value, key=str(order).encode())
    assert producer.flush(30) == 0

    changelog = cfg.changelog.model_copy(update={"topics": list(topics.values()), "checkpoint": tmp_path / "cp"})
    ChangelogStage(cfg.model_copy(update={"changelog": changelog}), spark).run(until_caught_up=True)

    name = lake_table_name(db, "Order-Items")
    assert name.startswith(f"{db}_order_items_")
    _assert_landed_and_mirrored(spark, cfg, name)
    assert _table(spark, cfg, "changelog", f"{db}_select").count() == len(CHANGES)  # a plain name stays as it is


# -- S3-SQS: DMS Parquet files in a table folder with a space --------------------------------------------------

def _parquet(rows: list[tuple[str, int, str]], first: int) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datetime import datetime

    data = pa.table({"Op": [{"c": "I", "u": "U", "d": "D"}[op] for op, _, _ in rows],
                     "dms_commit_ts": [datetime(2026, 1, 1, 0, 0, first + i) for i in range(len(rows))],
                     "order": pa.array([order for _, order, _ in rows], pa.int32()),
                     "select": [select for _, _, select in rows]})
    out = io.BytesIO()
    pq.write_table(data, out)
    return out.getvalue()


def put_dms_files(cfg: PipelineConfig, prefix: str, files: dict[str, bytes], checkpoint: Path) -> PipelineConfig:
    """The files in bucket `prefix`, announced on queue `prefix`; the configuration of a stage that reads them."""
    settings = cfg.dms_files.model_copy(update={"bucket": prefix, "queue": prefix, "file_format": "parquet",
                                                "long_polling_wait_s": 1,
                                                "options": {"queueFetchWaitTimeoutSeconds": "2"}})
    cfg = cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"source": "s3-sqs", "checkpoint": str(checkpoint)}),
        "dms_files": settings})
    ensure_notified_bucket(cfg.aws, prefix, prefix)
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    for key, body in files.items():
        s3.put_object(Bucket=prefix, Key=key, Body=body)
    return cfg


def test_dms_files_of_an_odd_table_folder_land_and_mirror(stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    prefix = f"oddfiles{uuid.uuid4().hex[:6]}"
    too_long = "T" * MAX_LENGTH
    files = {f"{prefix}/public/Order Items/20260101-000000000.parquet": _parquet(CHANGES[:3], 0),  # CDC files: I is c
             f"{prefix}/public/Order Items/20260101-000003000.parquet": _parquet(CHANGES[3:], 3),
             f"{prefix}/public/{too_long}/LOAD00000001.parquet": _parquet(CHANGES[:1], 0)}
    cfg = put_dms_files(cfg, prefix, files, tmp_path / "cp")

    ChangelogStage(cfg, spark).run(until_caught_up=True)

    name = lake_table_name(prefix, "Order Items")
    assert name.startswith(f"{prefix}_order_items_")
    _assert_landed_and_mirrored(spark, cfg, name)
    assert _dead_letters(spark, cfg, f"topic LIKE '{prefix}.%'") == [(f"{prefix}.public.{too_long}", "UnmappableName")]


# -- Kinesis: DMS JSON whose metadata names an odd table, and a record that names none -----------------------

def test_kinesis_records_of_an_odd_table_land_and_one_without_a_table_is_a_dead_letter(
        stack, spark, cfg: PipelineConfig, tmp_path: Path, aws_keys) -> None:
    stream = f"oddk{uuid.uuid4().hex[:6]}"
    client = boto3.client("kinesis", endpoint_url=cfg.aws.endpoint_url, region_name=cfg.aws.region,
                          aws_access_key_id="test", aws_secret_access_key="test")
    client.create_stream(StreamName=stream, ShardCount=1)
    client.get_waiter("stream_exists").wait(StreamName=stream)
    records = [{"data": {"order": order, "select": select}, "metadata": _dms_metadata(op, i, "Größe")}
               for i, (op, order, select) in enumerate(CHANGES)]
    records.append({"data": {"order": 9, "select": "z"}, "metadata": _dms_metadata("c", 5, None)})
    client.put_records(StreamName=stream, Records=[{"Data": json.dumps(r).encode(), "PartitionKey": str(i)}
                                                   for i, r in enumerate(records)])
    cfg = cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"source": "kinesis", "checkpoint": str(tmp_path / "cp")}),
        "kinesis": cfg.kinesis.model_copy(update={"streams": [stream], "fetch_interval_ms": 0})})

    ChangelogStage(cfg, spark).run(until_caught_up=True)

    name = lake_table_name(stream, "Größe")
    assert name.startswith(f"{stream}_gro_e_")
    _assert_landed_and_mirrored(spark, cfg, name)
    assert _dead_letters(spark, cfg, f"topic LIKE '{stream}.%'") == [(f"{stream}..", "NoTableName")]
    assert not spark.catalog.tableExists(quote(cfg.catalog.name, "changelog", f"{stream}_{stream}"))
