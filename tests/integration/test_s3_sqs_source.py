"""The `s3-sqs` streaming source against the real moto server: every option, odd notifications, crashes, reprocessing."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import boto3
import pytest

from pipeline.config.settings import PipelineConfig
from pipeline.sources import register
from pipeline.sources.s3sqs.files import MISSING
from pipeline.sources.s3sqs.folder import source_folder
from pipeline.sources.s3sqs.status import clear_status, read_status, status_path
from simulators.s3_files import ensure_notified_bucket
from tests.conftest import REPO

pytestmark = pytest.mark.integration
DEADLINE_S = 900  # a bound against hanging, not a timing claim: batches take minutes on a loaded machine


@dataclass
class Place:
    """A bucket and a queue; `notified`: S3 announces the bucket's new objects on the queue itself."""

    cfg: PipelineConfig
    bucket: str
    queue_url: str

    @property
    def s3(self) -> Any:
        return boto3.client("s3", **self.cfg.aws.boto3_kwargs())

    @property
    def sqs(self) -> Any:
        return boto3.client("sqs", **self.cfg.aws.boto3_kwargs())

    def put(self, key: str, body: bytes) -> str:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        return f"s3://{self.bucket}/{key}"

    def announce(self, body: str) -> None:
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)

    def messages_left(self) -> int:
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def options(self, checkpoint: Path, **extra: str) -> dict[str, str]:
        return {"fileFormat": "json", "queueUrl": self.queue_url, "queueRegion": self.cfg.aws.region,
                "endpointUrl": str(self.cfg.aws.endpoint_url), "checkpointLocation": str(checkpoint),
                "sqs.longPollingWaitTimeSeconds": "1", "queueFetchWaitTimeoutSeconds": "2", **extra}


def _place(cfg: PipelineConfig, notified: bool) -> Place:
    name = f"src{uuid.uuid4().hex[:10]}"
    if notified:
        return Place(cfg, name, ensure_notified_bucket(cfg.aws, name, name))
    place = Place(cfg, name, boto3.client("sqs", **cfg.aws.boto3_kwargs()).create_queue(QueueName=name)["QueueUrl"])
    place.s3.create_bucket(Bucket=name)
    return place


def s3_event(bucket: str, key: str, time_: str = "2030-01-01T00:00:00.000Z") -> str:
    return json.dumps({"Records": [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put", "eventTime": time_,
                                    "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": 1}}}]})


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.3)


def _run_until_drained(spark, options: dict[str, str], schema: str | None = None) -> list[tuple[int, list[dict]]]:
    """Run a query over the source until the queue is drained; the batches it delivered, rows as dicts."""
    batches: list[tuple[int, list[dict]]] = []
    clear_status(source_folder(options["checkpointLocation"]))
    reader = spark.readStream.format("s3-sqs").options(**options)
    reader = reader.schema(schema) if schema else reader
    query = (reader.load().writeStream.option("checkpointLocation", options["checkpointLocation"])
             .foreachBatch(lambda frame, batch_id: batches.append((batch_id, [r.asDict() for r in frame.collect()])))
             .trigger(processingTime="0.5 seconds").start())
    try:
        _wait_for(lambda: query.exception() is None
                  and (read_status(source_folder(options["checkpointLocation"])) or _NOT_YET).drained, "the queue to drain")
    finally:
        query.stop()
    return batches


class _NotYet:
    drained = False


_NOT_YET = _NotYet()


@pytest.fixture(scope="module")
def source_spark(spark):
    register(spark)
    return spark


def test_every_notification_shape_is_read_once_and_bad_ones_never_stop_the_query(
        source_spark, stack, cfg: PipelineConfig, tmp_path: Path) -> None:
    place = _place(cfg, notified=False)
    plain = place.put("in/plain.json", b'{"id": 1}\n{"id": 2}\n')
    encoded = place.put("in/a b+c/d.json", b'{"id": 3}\n')
    sns = place.put("in/sns.json", b'{"id": 4}\n')
    bridge = place.put("in/bridge.json", b'{"id": 5}\n')
    place.put("in/skip.txt", b'{"id": 6}\n')
    place.put("in/old.json", b'{"id": 7}\n')
    bodies = [
        s3_event(place.bucket, "in/plain.json"), s3_event(place.bucket, "in/plain.json"),  # a duplicate
        s3_event(place.bucket, "in/a+b%2Bc%2Fd.json"),  # S3 URL-encodes keys: '+' is a space, %2B '+', %2F '/'
        json.dumps({"Type": "Notification", "Message": s3_event(place.bucket, "in/sns.json")}),
        json.dumps({"source": "aws.s3", "detail-type": "Object Created", "time": "2030-01-01T00:00:00Z",
                    "detail": {"bucket": {"name": place.bucket}, "object": {"key": "in/bridge.json", "size": 1}}}),
        s3_event(place.bucket, "in/skip.txt"),  # pathGlobFilter
        s3_event(place.bucket, "in/old.json", "2001-01-01T00:00:00Z"),  # maxFileAge
        s3_event(place.bucket, "in/gone.json"),  # deleted before it is read
        json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent"}), "not json", '{"Records": [{}]}',
    ]
    for body in bodies:
        place.announce(body)
    options = place.options(tmp_path / "checkpoint", pathGlobFilter="*.json", maxFilesPerTrigger="-1")
    schema = "id int, _file_path string, _file_row bigint, _file_error string"
    batches = _run_until_drained(source_spark, options, schema)
    rows = sorted((r["id"], r["_file_path"], r["_file_row"]) for _, batch in batches for r in batch
                  if r["_file_error"] is None)
    assert rows == [(1, plain, 0), (2, plain, 1), (3, encoded, 0), (4, sns, 0), (5, bridge, 0)]
    errors = [(r["_file_path"], r["_file_error"]) for _, batch in batches for r in batch if r["_file_error"]]
    assert errors == [(f"s3://{place.bucket}/in/gone.json", MISSING)]  # never skipped in silence
    assert place.messages_left() == 0  # consumer errors deleted (sqs.keepMessageForConsumerError=false)


def test_consumer_errors_are_kept_for_a_dead_letter_queue(source_spark, stack, cfg: PipelineConfig,
                                                          tmp_path: Path) -> None:
    place = _place(cfg, notified=False)
    place.put("k/a.json", b'{"id": 1}\n')
    for body in (s3_event(place.bucket, "k/a.json"), s3_event(place.bucket, "k/a.json"), "not json"):
        place.announce(body)
    options = place.options(tmp_path / "checkpoint", **{"sqs.keepMessageForConsumerError": "true",
                                                        "sqs.visibilityTimeoutSeconds": "600"})
    batches = _run_until_drained(source_spark, options, "id int")
    assert [r["id"] for _, batch in batches for r in batch] == [1]
    assert place.messages_left() == 2  # the duplicate and the malformed one, in flight until redelivered


def test_csv_under_partition_folders_in_batches_of_max_files(source_spark, stack, cfg: PipelineConfig,
                                                             tmp_path: Path) -> None:
    place = _place(cfg, notified=True)  # S3 itself announces the objects
    paths = [place.put(f"root/day=2026-01-0{n}/f{n}.csv", f"{n},name {n}\n{n}0,\n".encode()) for n in range(1, 6)]
    options = place.options(tmp_path / "checkpoint", fileFormat="csv", maxFilesPerTrigger="2",
                            partitionColumns="day", basePath=f"s3://{place.bucket}/root/")
    batches = _run_until_drained(source_spark, options, "id int, name string, day date, _file_path string")
    files_per_batch = [len({r["_file_path"] for r in batch}) for _, batch in batches]
    assert max(files_per_batch) == 2 and sum(files_per_batch) == 5  # a batch may take fewer (S3's test event)
    rows = sorted((r["id"], r["name"], str(r["day"]), r["_file_path"]) for _, batch in batches for r in batch)
    expected = sorted([(n, f"name {n}", f"2026-01-0{n}", paths[n - 1]) for n in range(1, 6)]
                      + [(n * 10, None, f"2026-01-0{n}", paths[n - 1]) for n in range(1, 6)])
    assert rows == expected


@pytest.mark.parametrize("file_format", ["parquet", "avro"])
def test_parquet_and_avro_files(file_format: str, source_spark, stack, cfg: PipelineConfig, tmp_path: Path) -> None:
    place = _place(cfg, notified=True)
    records = [{"id": 1, "name": "a"}, {"id": 2, "name": None}]
    out = io.BytesIO()
    if file_format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), out)
    else:
        import fastavro

        fastavro.writer(out, {"type": "record", "name": "r", "fields": [
            {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}]}, records)
    place.put(f"f/data.{file_format}", out.getvalue())
    batches = _run_until_drained(source_spark, place.options(tmp_path / "checkpoint", fileFormat=file_format),
                                 "id bigint, name string")
    assert sorted((r["id"], r["name"]) for _, batch in batches for r in batch) == [(1, "a"), (2, None)]


def test_a_schema_is_required_with_a_clear_error(source_spark, stack, cfg: PipelineConfig, tmp_path: Path) -> None:
    place = _place(cfg, notified=False)
    with pytest.raises(Exception, match="needs the files' schema"):
        source_spark.readStream.format("s3-sqs").options(**place.options(tmp_path / "c")).load()


def test_reprocess_a_batch_range_and_its_dry_run(source_spark, stack, cfg: PipelineConfig, tmp_path: Path) -> None:
    place = _place(cfg, notified=True)
    paths = [place.put(f"r/{n}.json", f'{{"id": {n}}}\n'.encode()) for n in range(4)]
    # A query stopped in the middle of its poll's long wait leaves what that poll still receives in flight: the
    # late file's message, put just after, came back only after the visibility timeout (60 s by default).
    options = place.options(tmp_path / "checkpoint", maxFilesPerTrigger="2", **{"sqs.visibilityTimeoutSeconds": "5"})
    first = _run_until_drained(source_spark, options, "id int, _file_path string")
    assert sorted(r["_file_path"] for _, batch in first for r in batch) == sorted(paths)
    in_range = sorted(r["_file_path"] for batch_id, batch in first if batch_id <= 1 for r in batch)
    assert len(in_range) >= 2
    late = place.put("r/late.json", b'{"id": 9}\n')  # a reprocess run must leave new messages alone

    reprocess = {**options, "reprocessStartBatchId": "0", "reprocessEndBatchId": "1"}
    assert _run_until_drained(source_spark, reprocess, "id int, _file_path string") == []  # dry by default
    listed = status_path(options["checkpointLocation"]).with_name("reprocess-0-1-dry-run.txt").read_text().split()
    assert sorted(listed) == in_range

    again = _run_until_drained(source_spark, {**reprocess, "reprocessDryRun": "false"}, "id int, _file_path string")
    assert [sorted(r["_file_path"] for r in batch) for _, batch in again] == [in_range]
    assert place.messages_left() == 1
    rest = _run_until_drained(source_spark, options, "id int, _file_path string")
    assert [r["_file_path"] for _, batch in rest for r in batch] == [late]


# A consumer in a process of its own, killed in the middle of its batch 1: it writes each batch's files before it
# commits the batch, and batch 1's where it stalls.
CONSUMER = """
import json, pathlib, sys, time
from tests.conftest import SHORT_LIVED_JVM, make_config
from pipeline.runtime.spark import get_spark
from pipeline.sources import register
from pipeline.sources.s3sqs.folder import source_folder
from pipeline.sources.s3sqs.status import clear_status

options, out = json.loads(sys.argv[1]), pathlib.Path(sys.argv[2])
spark = get_spark(make_config(SHORT_LIVED_JVM))
register(spark)
clear_status(source_folder(options["checkpointLocation"]))

def land(frame, batch_id):
    paths = sorted(r._file_path for r in frame.select("_file_path").collect())
    if batch_id == 1:
        (out / "inside-1.json").write_text(json.dumps(paths))
        time.sleep(3600)  # killed here, in the middle of batch 1
    (out / f"batch-{batch_id}.json").write_text(json.dumps(paths))

(spark.readStream.format("s3-sqs").schema("id int, _file_path string").options(**options).load()
 .writeStream.foreachBatch(land).option("checkpointLocation", options["checkpointLocation"])
 .trigger(processingTime="0.5 seconds").start().awaitTermination())
"""


def test_sigkill_in_the_middle_of_a_batch_loses_and_repeats_no_file(source_spark, stack, cfg: PipelineConfig,
                                                                    tmp_path: Path) -> None:
    """The killed consumer's checkpoint resumed until drained on the session's Spark: no second JVM to start."""
    place = _place(cfg, notified=True)
    paths = [place.put(f"k/{n}.json", f'{{"id": {n}}}\n'.encode()) for n in range(6)]
    options = place.options(tmp_path / "checkpoint", maxFilesPerTrigger="2")
    first = subprocess.Popen([sys.executable, "-c", CONSUMER, json.dumps(options), str(tmp_path)], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: (tmp_path / "inside-1.json").exists() or first.poll() is not None, "batch 1 to start")
        assert first.poll() is None, "the consumer died before batch 1"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert not (tmp_path / "batch-1.json").exists()

    batches = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in tmp_path.glob("batch-*.json")}
    resumed = _run_until_drained(source_spark, options, "id int, _file_path string")
    batches.update({batch_id: sorted(row["_file_path"] for row in rows) for batch_id, rows in resumed})
    assert batches[1] == json.loads((tmp_path / "inside-1.json").read_text())  # replayed with the same files
    landed = [path for batch in batches.values() for path in batch]
    assert sorted(landed) == sorted(paths)  # none lost, none twice
