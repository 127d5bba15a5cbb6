"""`pipeline status` against a lake the stages wrote: what it says of a table agrees with the tables, the
checkpoint and Kafka, before and after each stage catches up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from unittest import mock

import pytest
from confluent_kafka import Consumer, TopicPartition

from pipeline.config import kafka
from pipeline.config.settings import PipelineConfig
from pipeline.ops.status import collect
from pipeline.ops.status.render import as_html
from pipeline.stages.changelog import ChangelogStage
from pipeline.stages.mirror import MirrorStage
from registry.factory import serde_from_settings
from simulators.simulation import Simulation, SimulationOptions
from simulators.kinesis import KinesisTransport
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore
from tests.conftest import REPO, TEST_SETTINGS

pytestmark = pytest.mark.integration


def _configured(cfg: PipelineConfig, prefix: str, folder: Path, lake_format: str = "iceberg") -> PipelineConfig:
    return cfg.model_copy(update={
        "lake": cfg.lake.model_copy(update={"format": lake_format}),
        "changelog": cfg.changelog.model_copy(update={"topic_pattern": rf"{prefix}\..*",
                                                      "checkpoint": str(folder / "checkpoint")}),
        "mirror": cfg.mirror.model_copy(update={"keys": {f"{prefix}_artists": "artist_id"},
                                                "tables": [f"{prefix}_artists"]}),
    })


def _simulate(cfg: PipelineConfig, prefix: str, folder: Path, seed: int, events: int, poison: float = 0.0) -> None:
    options = SimulationOptions(format="debezium", tables="moma", events=events, snapshot_rows=20, seed=seed,
                                poison=poison, topic_prefix=prefix)
    Simulation(options, KafkaTransport(cfg.kafka), TruthStore(folder / f"{prefix}-{seed}.db"),
               serde_from_settings(cfg.registry, cfg.aws)).run(progress=False)


def _end_offset(cfg: PipelineConfig, topic: str) -> int:
    consumer = Consumer(kafka.client_conf(cfg.kafka, **{"group.id": "status-test"}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def _snapshots(spark, cfg: PipelineConfig, table: str) -> list[int]:
    return [r["snapshot_id"] for r in spark.sql(f"SELECT snapshot_id FROM {cfg.catalog.name}.changelog.{table}"
                                                ".snapshots ORDER BY committed_at").collect()]


def test_status_follows_the_transport_the_changelog_and_the_mirror(stack, spark, cfg: PipelineConfig,
                                                                    tmp_path: Path) -> None:
    prefix = f"st{uuid.uuid4().hex[:6]}"
    cfg = _configured(cfg, prefix, tmp_path)
    table, topic = f"{prefix}_artists", f"{prefix}.public.artists"
    _simulate(cfg, prefix, tmp_path, seed=1, events=300, poison=0.05)
    ChangelogStage(cfg, spark).run(until_caught_up=True)
    MirrorStage(cfg, spark).run_once()

    landed = next(t for t in collect(cfg).tables if t.table == table)
    changelog = spark.table(f"{cfg.catalog.name}.changelog.{table}")
    assert landed.changelog_rows == changelog.count()
    assert landed.last_batch_rows > 0 and landed.last_batch_rate and landed.last_batch_rate > 0
    assert (landed.transport.records, landed.transport.seconds) == (0, 0.0)  # type: ignore[union-attr]
    assert landed.mirror is not None and landed.mirror.watermark == _snapshots(spark, cfg, table)[-1]
    assert (landed.mirror.pending_commits, landed.mirror.lag_seconds) == (0, 0.0)
    dead = (spark.table(f"{cfg.catalog.name}.changelog.dead_letters").where(f"topic = '{topic}'")
            .groupBy("error_class").count().collect())
    assert dead and landed.dead_letters == {r["error_class"]: r["count"] for r in dead}
    assert all(c.lag_seconds is not None for c in landed.history)  # each commit's newest source time is known

    before = _end_offset(cfg, topic)
    _simulate(cfg, prefix, tmp_path, seed=2, events=200)
    waiting = next(t for t in collect(cfg).tables if t.table == table)
    assert waiting.transport is not None and waiting.transport.records == _end_offset(cfg, topic) - before > 0
    assert waiting.transport.seconds is not None and waiting.transport.seconds > 0

    ChangelogStage(cfg, spark).run(until_caught_up=True)
    caught_up = next(t for t in collect(cfg).tables if t.table == table)
    assert caught_up.transport.records == 0  # type: ignore[union-attr]
    assert caught_up.mirror is not None and caught_up.mirror.pending_commits == 1 and caught_up.mirror.lag_seconds > 0
    assert caught_up.lag_seconds == caught_up.mirror.lag_seconds

    page = tmp_path / "status.html"
    settings = [*TEST_SETTINGS, f"changelog.checkpoint={tmp_path / 'checkpoint'}", rf"changelog.topic_pattern={prefix}\..*",
                "status.max_lag=0.001"]
    done = subprocess.run([sys.executable, "-m", "pipeline", *(a for s in settings for a in ("--set", s)), "status",
                           "--json", "--html", str(page)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stderr
    document = json.loads(done.stdout)
    assert table in document["stale"]
    assert next(t for t in document["tables"] if t["table"] == table)["changelog_rows"] == changelog.count()
    assert "<svg" in page.read_text() and table in page.read_text()


def test_status_of_a_delta_lake(stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    prefix = f"sd{uuid.uuid4().hex[:6]}"
    cfg = _configured(cfg, prefix, tmp_path, lake_format="delta")
    _simulate(cfg, prefix, tmp_path, seed=3, events=150)
    ChangelogStage(cfg, spark).run(until_caught_up=True)
    MirrorStage(cfg, spark).run_once()

    status = collect(cfg)
    landed = next(t for t in status.tables if t.table == f"{prefix}_artists")
    rows = spark.read.format("delta").load(f"{cfg.lake.delta_root}/changelog/{prefix}_artists").count()
    assert landed.changelog_rows == rows and landed.last_batch_rows > 0
    assert landed.last_batch_rate and landed.history[-1].lag_seconds is not None
    assert landed.mirror is not None and landed.mirror.pending_commits == 0
    assert "<svg" in as_html(status)


def test_status_of_a_kinesis_stream_says_how_old_its_oldest_waiting_record_is(stack, spark, cfg: PipelineConfig,
                                                                              tmp_path: Path) -> None:
    prefix = f"sk{uuid.uuid4().hex[:6]}"
    cfg = cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"source": "kinesis", "checkpoint": str(tmp_path / "checkpoint")}),
        "kinesis": cfg.kinesis.model_copy(update={"streams": [prefix], "fetch_interval_ms": 0})})

    def send(seed: int) -> None:
        options = SimulationOptions(format="dms-json", events=100, snapshot_rows=10, seed=seed, topic_prefix=prefix)
        Simulation(options, KinesisTransport(cfg.aws, shards=2), TruthStore(tmp_path / f"{seed}.db"), None).run(
            progress=False)

    keys = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": cfg.aws.region}
    with mock.patch.dict(os.environ, keys):  # where the executors' default credential chain looks
        send(seed=1)
        ChangelogStage(cfg, spark).run(until_caught_up=True)
        caught_up = collect(cfg).sources
        send(seed=2)
        waiting = collect(cfg).sources
    assert [(s.transport, s.source, s.records, s.seconds) for s in caught_up] == [("kinesis", prefix, None, 0.0)]
    assert len(waiting) == 1 and waiting[0].seconds is not None and waiting[0].seconds > 0


def test_status_of_an_sqs_queue_counts_its_waiting_messages(stack, cfg: PipelineConfig) -> None:
    import boto3

    from pipeline.ops.status.transport import sqs_lag

    queue = f"status-{uuid.uuid4().hex[:8]}"
    sqs = boto3.client("sqs", **cfg.aws.boto3_kwargs())
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    cfg = cfg.model_copy(update={"dms_files": cfg.dms_files.model_copy(update={"queue": queue})})
    assert (sqs_lag(cfg).records, sqs_lag(cfg).seconds) == (0, 0.0)
    for body in ("a", "b"):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    assert (sqs_lag(cfg).source, sqs_lag(cfg).records, sqs_lag(cfg).seconds) == (queue, 2, None)
