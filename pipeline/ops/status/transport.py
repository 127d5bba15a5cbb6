"""What the changelog stage has not landed yet, per transport source, read from the stage's checkpoint and the
transport itself (never by consuming for the stage: nothing here moves a position).

- Kafka: per topic, the records after the offsets of the last batch the checkpoint marks committed, and the age
  of the oldest of them (its record timestamp).
- S3-SQS: the queue's waiting and in-flight messages (S3 files, not records); SQS does not say how old the
  oldest is (that is a CloudWatch metric), so its age is unknown.
- Kinesis: the streams the stage reads, with figures unknown (the shard positions live in the source's own
  checkpoint format).
"""

from __future__ import annotations

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
    return [SourceLag("kinesis", stream, None, None) for stream in cfg.kinesis.streams]


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


def _timestamp_at(consumer, position) -> int | None:  # type: ignore[no-untyped-def]
    """The record timestamp (ms) at one partition position, read by an assigned consumer that commits nothing."""
    consumer.assign([position])
    message = consumer.poll(WAIT_S)
    if message is None or message.error():
        return None
    kind, stamp = message.timestamp()
    return stamp if kind else None


def sqs_lag(cfg: PipelineConfig) -> SourceLag:
    import boto3

    sqs = boto3.client("sqs", **cfg.aws.boto3_kwargs())
    url = cfg.dms_files.queue_url or sqs.get_queue_url(QueueName=cfg.dms_files.queue)["QueueUrl"]
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                                   "ApproximateNumberOfMessagesNotVisible"])
    waiting = sum(int(v) for v in found["Attributes"].values())
    return SourceLag("s3-sqs", cfg.dms_files.queue, waiting, 0.0 if not waiting else None)
