"""What the changelog stage has not landed yet, per transport source, read from the stage's checkpoint and the
transport itself (never by consuming for the stage: nothing here moves a position).

- Kafka: per topic, the records after the offsets of the last batch the checkpoint marks committed, and the age
  of the oldest of them (its record timestamp).
- S3-SQS: the queue's waiting and in-flight messages (S3 files, not records); SQS does not say how old the
  oldest is (that is a CloudWatch metric), so its age is unknown.
- Kinesis: per stream, the age of the oldest record after where the last committed batch read each shard to
  (the batch's offset in the checkpoint, and the ends its executors recorded in the metadata store); Kinesis
  cannot count what waits, so the records are unknown.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pipeline.config import kafka
from pipeline.ops.status.model import SourceLag
from pipeline.stages.changelog.transports.kafka_offsets import end_offsets

if TYPE_CHECKING:
    from pipeline.config.settings import PipelineConfig

WAIT_S = 10.0
PROBES = 5  # GetRecords calls a shard is followed for its first waiting record


class Checkpoint:
    """A streaming query's checkpoint folder, local or on S3 (`s3://`, `s3a://`), read without Spark."""

    def __init__(self, location: str, cfg: PipelineConfig) -> None:
        self.location, self.cfg = location.rstrip("/"), cfg
        url = urlparse(self.location)
        self._bucket = url.netloc if url.scheme in {"s3", "s3a"} else None
        self._prefix = url.path.lstrip("/")

    def _s3(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", **self.cfg.aws.boto3_kwargs())

    def read(self, path: str) -> str | None:
        if self._bucket is None:
            file = Path(self.location.removeprefix("file:")) / path
            return file.read_text() if file.is_file() else None
        try:
            return self._s3().get_object(Bucket=self._bucket, Key=f"{self._prefix}/{path}")["Body"].read().decode()
        except Exception as exc:  # noqa: BLE001 - botocore's NoSuchKey is generated per client
            if getattr(exc, "response", {}).get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return None
            raise

    def last_committed_batch(self) -> int | None:
        """The newest batch the query finished (a file under `commits/`)."""
        if self._bucket is None:
            folder = Path(self.location.removeprefix("file:")) / "commits"
            names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
        else:
            pages = self._s3().get_paginator("list_objects_v2").paginate(Bucket=self._bucket,
                                                                         Prefix=f"{self._prefix}/commits/")
            names = [item["Key"].rsplit("/", 1)[-1] for page in pages for item in page.get("Contents", [])]
        batches = [int(name) for name in names if name.isdigit()]
        return max(batches) if batches else None


def source_lags(cfg: PipelineConfig) -> list[SourceLag]:
    """The lag of every source the configured transport (`changelog.source`) reads; raises `KafkaUnavailable`
    when the brokers do not answer."""
    if cfg.changelog.source == "kafka":
        kafka.topic_names(cfg.kafka, timeout_s=WAIT_S)  # names the brokers' address when they do not answer
        return kafka_lags(cfg, Checkpoint(str(cfg.changelog.checkpoint), cfg))
    if cfg.changelog.source == "s3-sqs":
        return [sqs_lag(cfg)]
    return kinesis_lags(cfg, Checkpoint(str(cfg.changelog.checkpoint), cfg))


def kafka_lags(cfg: PipelineConfig, checkpoint: Checkpoint) -> list[SourceLag]:
    """Per topic of the query: records after the last committed batch, and the age of the oldest of them."""
    from confluent_kafka import Consumer, TopicPartition

    batch = checkpoint.last_committed_batch()
    if batch is None:
        return []
    landed = end_offsets(checkpoint.read, batch)
    consumer = Consumer(kafka.client_conf(cfg.kafka, **{"group.id": "pipeline-status", "enable.auto.commit": False}))
    try:
        lags = []
        for topic in sorted(landed):
            partitions = consumer.list_topics(topic, timeout=WAIT_S).topics[topic].partitions
            waiting, oldest_ms = 0, None
            for partition in sorted(partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=WAIT_S)
                start = max(landed[topic].get(partition, low), low)
                if high > start:
                    waiting += high - start
                    stamp = _timestamp_at(consumer, TopicPartition(topic, partition, start))
                    oldest_ms = stamp if oldest_ms is None or (stamp is not None and stamp < oldest_ms) else oldest_ms
            age = 0.0 if not waiting else (time.time() - oldest_ms / 1000 if oldest_ms is not None else None)
            lags.append(SourceLag("kafka", topic, waiting, age))
        return lags
    finally:
        consumer.close()


def kinesis_lags(cfg: PipelineConfig, checkpoint: Checkpoint) -> list[SourceLag]:
    """Per stream: the age of the oldest record not yet landed, from every open shard's position after the last
    committed batch. The offset log holds one line per stream, in `kinesis.streams` order (the stage's union)."""
    from pipeline.sources.kinesis.client import Kinesis
    from pipeline.sources.kinesis.metadata import MetadataCommitter
    from pipeline.sources.kinesis.options import source_options as parse_options
    from pipeline.sources.kinesis.positions import BatchOffset, Position
    from pipeline.stages.changelog.transports.kinesis import client_options, source_options

    batch = checkpoint.last_committed_batch()
    lines = (checkpoint.read(f"offsets/{batch}") or "").splitlines()[2:] if batch is not None else []
    kinesis, lags = Kinesis(client_options(cfg)), []
    for index, stream in enumerate(cfg.kinesis.streams):
        if index >= len(lines):
            lags.append(SourceLag("kinesis", stream, None, None))  # nothing landed yet
            continue
        offset = BatchOffset.from_json(json.loads(lines[index]))
        options = parse_options(source_options(cfg, stream))
        ends = MetadataCommitter(options.metadata).ends(offset.batch)
        oldest = None
        for shard in kinesis.call("list_shards", StreamName=stream)["Shards"]:
            shard_id = shard["ShardId"]
            position = ends[shard_id].end if shard_id in ends else offset.shards.get(shard_id, Position())
            if not position.done:
                arrived = _first_arrival(kinesis, stream, shard_id, position.iterator_args())
                oldest = arrived if oldest is None or (arrived is not None and arrived < oldest) else oldest
        lags.append(SourceLag("kinesis", stream, None, time.time() - oldest if oldest is not None else 0.0))
    return lags


def _first_arrival(kinesis, stream: str, shard_id: str, start: dict) -> float | None:  # type: ignore[no-untyped-def]
    """Epoch seconds the shard's first record from `start` arrived, or None when none is there; an empty answer
    short of the shard's tip is followed a few times (Kinesis may answer empty while records lie further on)."""
    iterator = kinesis.call("get_shard_iterator", StreamName=stream, ShardId=shard_id, **start)["ShardIterator"]
    for _ in range(PROBES):
        if iterator is None:
            return None
        answer = kinesis.call("get_records", ShardIterator=iterator, Limit=1)
        if answer["Records"]:
            return answer["Records"][0]["ApproximateArrivalTimestamp"].timestamp()
        if not answer.get("MillisBehindLatest"):
            return None
        iterator = answer.get("NextShardIterator")
    return None


def _timestamp_at(consumer, position) -> int | None:  # type: ignore[no-untyped-def]
    """The record timestamp (ms) at one partition position, read by an assigned consumer that commits nothing."""
    consumer.assign([position])
    message = consumer.poll(WAIT_S)
    if message is None or message.error():
        return None
    kind, stamp = message.timestamp()
    return stamp if kind else None


def sqs_lag(cfg: PipelineConfig) -> SourceLag:
    """The queue's waiting and in-flight messages, found as the stage finds its queue (a missing one is named)."""
    import boto3

    from pipeline.stages.changelog.transports.s3sqs import S3SqsTransport

    url = S3SqsTransport(cfg).queue_url
    found = boto3.client("sqs", **cfg.aws.boto3_kwargs()).get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                                   "ApproximateNumberOfMessagesNotVisible"])
    waiting = sum(int(v) for v in found["Attributes"].values())
    return SourceLag("s3-sqs", cfg.dms_files.queue, waiting, 0.0 if not waiting else None)
