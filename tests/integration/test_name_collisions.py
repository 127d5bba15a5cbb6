"""Two source tables of one name in two schemas (`<db>.public.orders`, `<db>.sales.orders`) on each transport.

By default both map to lake table `<db>_orders`. The first to land owns it (its table property
`pipeline.source`); the other's records are dead letters with the reason (`TableNameCollision`), never appended
into the same table nor skipped as a batch the table already holds. Once `names.*` gives the other a lake table
of its own, a replay lands them there. With `names.with_schema` both land side by side from the start (Iceberg
and Delta). DMS files in folders `<folder>/<schema>/orders/` and DMS JSON on Kinesis, whose metadata names the
schema, are named (and refused) the same way.
"""

from __future__ import annotations

import json
import struct
import time
import uuid
from pathlib import Path

import boto3
import pytest

from pipeline.config import kafka
from pipeline.config.settings import PipelineConfig
from pipeline.stages import dead_letters
from pipeline.stages.changelog import ChangelogStage
from pipeline.stages.mirror import MirrorStage
from registry.apicurio import ApicurioClient
from registry.avro import avro_schema, encode
from tables.lake import lake_table
from tables.names import LakeNames, SourceTable, quote
from tables.owners import Owners, TableNameCollision
from tests.integration.test_odd_names import CHANGES as ODD_CHANGES
from tests.integration.test_odd_names import _dms_metadata, _parquet, put_dms_files

pytestmark = pytest.mark.integration

# schema -> (op, id, note) in commit order; both tables have keys 1 and 2
CHANGES = {"public": [("c", 1, "p1"), ("c", 2, "p2"), ("c", 3, "p3")],
           "sales": [("c", 1, "s1"), ("c", 2, "s2"), ("u", 1, "s1b")]}
MIRRORED = {"public": {(1, "p1"), (2, "p2"), (3, "p3")}, "sales": {(1, "s1b"), (2, "s2")}}


def _schema() -> dict:
    metadata = [("__op", "string"), ("__db", "string"), ("__table", "string"), ("__schema", "string"),
                ("__lsn", "long"), ("__source_ts_ms", "long"), ("__deleted", "string")]
    return {"type": "record", "name": "Value", "namespace": "clash",
            "fields": [{"name": "id", "type": "int"},
                       *[{"name": name, "type": ["null", kind], "default": None}
                         for name, kind in [("note", "string"), *metadata]]]}


def _produce(cfg: PipelineConfig, db: str) -> dict[str, str]:
    """Both tables' changes, on topics `<db>.<schema>.orders`; returns schema -> topic."""
    from confluent_kafka import Producer

    topics = {schema: f"{db}.{schema}.orders" for schema in CHANGES}
    apicurio = ApicurioClient.from_settings(cfg.registry)
    producer = Producer(kafka.client_conf(cfg.kafka))
    for schema, topic in topics.items():
        schema_id = apicurio.create_version(f"{topic}-value", _schema()).content_id
        for lsn, (op, key, note) in enumerate(CHANGES[schema], start=1000):
            row = {"id": key, "note": note, "__op": op, "__db": db, "__table": "orders", "__schema": schema,
                   "__lsn": lsn, "__source_ts_ms": int(time.time() * 1000), "__deleted": "false"}
            producer.produce(topic, value=b"\x00" + struct.pack(">I", schema_id) + encode(avro_schema(_schema()), row),
                             key=str(key).encode())
    assert producer.flush(30) == 0
    return topics


def _with(cfg: PipelineConfig, checkpoint: Path, topics: dict[str, str], **names) -> PipelineConfig:
    changelog = cfg.changelog.model_copy(update={"topics": sorted(topics.values()), "checkpoint": checkpoint})
    return cfg.model_copy(update={"changelog": changelog, "names": cfg.names.model_copy(update=names)})


def _changes(spark, cfg: PipelineConfig, name: str) -> list[tuple]:
    rows = lake_table(cfg, spark, "changelog", name).read().select("_op", "id", "note").collect()
    return sorted(tuple(row) for row in rows)


def _source_of(spark, cfg: PipelineConfig, name: str) -> str | None:
    return lake_table(cfg, spark, "changelog", name).properties().get("pipeline.source")


def test_a_second_table_of_the_same_name_is_dead_lettered_with_its_reason_and_replayed_once_renamed(
        stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    db = f"clash{uuid.uuid4().hex[:6]}"
    topics = _produce(cfg, db)
    ChangelogStage(_with(cfg, tmp_path / "cp", topics), spark).run(until_caught_up=True)

    # the first topic (in name order) owns <db>_orders and holds only its own rows
    assert _changes(spark, cfg, f"{db}_orders") == sorted(CHANGES["public"])
    assert _source_of(spark, cfg, f"{db}_orders") == topics["public"]
    # the second's rows are dead letters, none lost, with a reason naming both source tables and the fix
    found = dead_letters.reasons(cfg, spark, [topics["sales"]])
    assert [(r.error_class, r.count) for r in found] == [("TableNameCollision", len(CHANGES["sales"]))]
    reason = found[0].error_message
    assert topics["sales"] in reason and topics["public"] in reason and f"{db}_orders" in reason
    assert "names.with_schema" in reason and "names.tables" in reason

    fixed = _with(cfg, tmp_path / "cp", topics, tables={topics["sales"]: f"{db}_sales_orders"})
    report = dead_letters.replay(fixed, spark, [topics["sales"]])
    assert report.landed == {f"{db}_sales_orders": len(CHANGES["sales"])} and report.still_failing == {}
    assert _changes(spark, cfg, f"{db}_sales_orders") == sorted(CHANGES["sales"])
    assert _source_of(spark, cfg, f"{db}_sales_orders") == topics["sales"]
    assert dead_letters.reasons(cfg, spark, [topics["sales"]]) == []


def _land_apart(cfg: PipelineConfig, spark, tmp_path: Path) -> tuple[PipelineConfig, dict[str, str], dict[str, str]]:
    """Both tables landed with `names.with_schema = ["*"]`: the configuration, schema -> lake name and -> topic."""
    db = f"apart{uuid.uuid4().hex[:6]}"
    topics = _produce(cfg, db)
    schema_aware = _with(cfg, tmp_path / "cp", topics, with_schema=["*"])
    ChangelogStage(schema_aware, spark).run(until_caught_up=True)
    names = {schema: f"{db}_{schema}_orders" for schema in CHANGES}
    for schema, name in names.items():
        assert _changes(spark, cfg, name) == sorted(CHANGES[schema])
        assert _source_of(spark, cfg, name) == topics[schema]
    assert not lake_table(cfg, spark, "changelog", f"{db}_orders").exists()
    assert dead_letters.reasons(cfg, spark, list(topics.values())) == []
    return schema_aware, names, topics


def test_with_schema_in_the_names_both_tables_land_and_mirror_apart(stack, spark, cfg: PipelineConfig,
                                                                   tmp_path: Path) -> None:
    schema_aware, names, _ = _land_apart(cfg, spark, tmp_path)
    mirror = schema_aware.mirror.model_copy(update={"keys": {name: "id" for name in names.values()}})
    MirrorStage(schema_aware.model_copy(update={"mirror": mirror}), spark).run_once(list(names.values()))
    for schema, name in names.items():
        current = spark.table(quote(cfg.catalog.name, "mirror", f"{name}{cfg.mirror.view_suffix}"))
        assert {(r["id"], r["note"]) for r in current.collect()} == MIRRORED[schema]


def test_delta_tables_record_their_source_table_too(stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    cfg = cfg.model_copy(update={"lake": cfg.lake.model_copy(update={"format": "delta"})})
    _, names, topics = _land_apart(cfg, spark, tmp_path)
    # another process that maps a third source table to one of them reads the owner the table recorded
    db = topics["sales"].split(".")[0]
    elsewhere = Owners(LakeNames(tables={f"{db}.archive.orders": names["sales"]}),
                       lambda name: lake_table(cfg, spark, "changelog", name))
    with pytest.raises(TableNameCollision, match=topics["sales"]):
        elsewhere.claim(SourceTable(db, "archive", "orders"))


def test_dms_files_of_a_second_table_of_the_same_name_are_dead_letters_not_mixed_in(
        stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    prefix = f"clashfiles{uuid.uuid4().hex[:6]}"
    # the same rows in both folders: only the schema part of the path tells the tables apart
    files = {f"{prefix}/{schema}/orders/20260101-000000000.parquet": _parquet(ODD_CHANGES, 0)
             for schema in ("public", "sales")}
    cfg = put_dms_files(cfg, prefix, files, tmp_path / "cp")
    ChangelogStage(cfg, spark).run(until_caught_up=True)

    assert spark.table(quote(cfg.catalog.name, "changelog", f"{prefix}_orders")).count() == len(ODD_CHANGES)
    assert _source_of(spark, cfg, f"{prefix}_orders") == f"{prefix}.public.orders"
    found = dead_letters.reasons(cfg, spark, [f"{prefix}.sales.orders"])  # one reason a row: it names the row
    assert {r.error_class for r in found} == {"TableNameCollision"} and sum(r.count for r in found) == len(ODD_CHANGES)
    assert all(f"{prefix}.public.orders" in r.error_message and "orders/20260101" in r.error_message for r in found)


def test_kinesis_records_are_named_and_refused_by_their_schema_metadata(stack, spark, cfg: PipelineConfig,
                                                                         tmp_path: Path, aws_keys) -> None:
    stream = f"clashk{uuid.uuid4().hex[:6]}"
    client = boto3.client("kinesis", endpoint_url=cfg.aws.endpoint_url, region_name=cfg.aws.region,
                          aws_access_key_id="test", aws_secret_access_key="test")
    client.create_stream(StreamName=stream, ShardCount=1)
    client.get_waiter("stream_exists").wait(StreamName=stream)
    records = []
    for schema in ("public", "sales", "zarchive"):  # zarchive: the same default name as public, landed after it
        for i, (op, order, select) in enumerate(ODD_CHANGES):
            metadata = {**_dms_metadata(op, i, "orders"), "schema-name": schema}
            records.append({"data": {"order": order, "select": select}, "metadata": metadata})
    client.put_records(StreamName=stream, Records=[{"Data": json.dumps(r).encode(), "PartitionKey": str(i)}
                                                   for i, r in enumerate(records)])
    cfg = cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"source": "kinesis", "checkpoint": str(tmp_path / "cp")}),
        "kinesis": cfg.kinesis.model_copy(update={"streams": [stream], "fetch_interval_ms": 0}),
        "names": cfg.names.model_copy(update={"with_schema": ["sales"]})})

    ChangelogStage(cfg, spark).run(until_caught_up=True)

    for name, schema in ((f"{stream}_orders", "public"), (f"{stream}_sales_orders", "sales")):
        assert lake_table(cfg, spark, "changelog", name).read().count() == len(ODD_CHANGES)
        assert _source_of(spark, cfg, name) == f"{stream}.{schema}.orders"
    found = dead_letters.reasons(cfg, spark, [f"{stream}.zarchive.orders"])
    assert [(r.error_class, r.count) for r in found] == [("TableNameCollision", len(ODD_CHANGES))]
