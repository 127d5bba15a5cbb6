"""The s3-sqs source's pure parts: options, message parsing, admission of files, the RocksDB log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.sources.s3sqs.admission import admit
from pipeline.sources.s3sqs.events import S3File, parse_message
from pipeline.sources.s3sqs.options import S3SqsOptionError, parse_options
from pipeline.sources.s3sqs.queue import Message
from pipeline.sources.s3sqs.folder import LocalFolder
from pipeline.sources.s3sqs.tracker import FileTracker

REQUIRED = {"fileFormat": "csv", "queueUrl": "http://sqs/q", "queueRegion": "us-east-1", "checkpointLocation": "/tmp/c"}
NOW_MS = 1_767_225_600_000


def s3_event(key: str, bucket: str = "b", name: str = "ObjectCreated:Put", time: str = "2026-01-01T00:00:00.000Z") -> str:
    return json.dumps({"Records": [{"eventSource": "aws:s3", "eventName": name, "eventTime": time,
                                    "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": 7}}}]})


def test_defaults_are_the_seed_connectors() -> None:
    options = parse_options(REQUIRED)
    assert (options.max_files_per_trigger, options.max_file_age_s, options.long_polling_wait_s) == (100, 15 * 86400, 10)
    assert options.queue_fetch_wait_timeout_s == 20  # 2 x long polling
    assert (options.max_concurrency, options.max_retries, options.visibility_timeout_s) == (50, 10, 60)
    assert options.reprocess_dry_run and not options.keep_message_for_consumer_error and not options.reprocessing


def test_names_take_the_prefix_and_any_case() -> None:
    options = parse_options({**REQUIRED, "spark.s3conn.maxFilesPerTrigger": "7", "SQS.VISIBILITYTIMEOUTSECONDS": "5",
                             "spark.s3conn.maxFileAge": "2h", "pathGlobFilter": "*.csv"})
    assert (options.max_files_per_trigger, options.visibility_timeout_s, options.max_file_age_s) == (7, 5, 7200)
    assert options.path_glob_filter == "*.csv"


@pytest.mark.parametrize(("given", "named"), [
    ({"fileFormat": None}, "fileFormat"), ({"fileFormat": "orc"}, "fileFormat"), ({"queueUrl": ""}, "queueUrl"),
    ({"maxFilesPerTrigger": "0"}, "maxFilesPerTrigger"), ({"maxFileAge": "soon"}, "maxFileAge"),
    ({"sqs.longPollingWaitTimeSeconds": "30"}, "sqs.longPollingWaitTimeSeconds"),
    ({"partitionColumns": "p"}, "basePath"), ({"reprocessStartBatchId": "1"}, "reprocessEndBatchId"),
    ({"reprocessStartBatchId": "3", "reprocessEndBatchId": "1"}, "reprocessStartBatchId"),
    ({"checkpointLocation": "hdfs://nn/c"}, "checkpointLocation"), ({"reprocessDryRun": "maybe"}, "reprocessDryRun"),
    ({"rowFormat": "json"}, "header=true"),
])
def test_bad_options_are_named(given: dict, named: str) -> None:
    options = {k: v for k, v in {**REQUIRED, **given}.items() if v is not None}
    with pytest.raises(S3SqsOptionError, match=named.replace(".", r"\.")):
        parse_options(options)


def test_s3_keys_are_url_decoded() -> None:
    parsed = parse_message(s3_event("dir/a+b%2Bc%2Fd.csv"))
    assert [f.path for f in parsed.files] == ["s3://b/dir/a b+c/d.csv"]
    assert parsed.files[0].event_time_ms == NOW_MS and parsed.files[0].size == 7


def test_sns_wrapped_and_eventbridge_events() -> None:
    sns = json.dumps({"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": s3_event("k.csv")})
    assert [f.path for f in parse_message(sns).files] == ["s3://b/k.csv"]
    bridge = json.dumps({"source": "aws.s3", "detail-type": "Object Created", "time": "2026-01-01T00:00:00Z",
                         "detail": {"bucket": {"name": "b"}, "object": {"key": "x y.csv", "size": 3}}})
    assert [f.path for f in parse_message(bridge).files] == ["s3://b/x y.csv"]


def eventbridge_event(key: str) -> str:
    return json.dumps({"source": "aws.s3", "detail-type": "Object Created", "time": "2026-01-01T00:00:00Z",
                       "detail": {"bucket": {"name": "b"}, "object": {"key": key, "size": 3}}})


@pytest.mark.parametrize(("encoded", "key"), [
    ("in/Order+Items/a.csv", "in/Order Items/a.csv"),  # a space is '+'
    ("in/c%2B%2B/a.csv", "in/c++/a.csv"),  # a '+' is %2B
    ("in/100%25/a.csv", "in/100%/a.csv"),  # a '%' is %25
    ("in/caf%C3%A9/%E5%90%8D%E5%89%8D.csv", "in/café/名前.csv"),  # non-ASCII: its UTF-8 bytes
])
@pytest.mark.parametrize("event", [s3_event, eventbridge_event], ids=["s3-notification", "eventbridge"])
def test_object_keys_are_decoded_as_form_values(event, encoded: str, key: str) -> None:
    assert [f.path for f in parse_message(event(encoded)).files] == [f"s3://b/{key}"]


def test_a_key_that_is_not_utf8_once_decoded_is_a_malformed_message() -> None:
    assert "UnicodeDecodeError" in (parse_message(s3_event("in/%FF.csv")).malformed or "")


def test_test_events_and_removals_announce_nothing() -> None:
    assert parse_message(json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent"})).ignored
    assert parse_message(s3_event("k", name="ObjectRemoved:Delete")).ignored


@pytest.mark.parametrize("body", ["not json", "[1]", '{"Records": [{"eventName": "ObjectCreated:Put"}]}', "{}"])
def test_malformed_messages_are_reported_not_raised(body: str) -> None:
    assert parse_message(body).malformed


def _messages(*bodies: str) -> list[Message]:
    return [Message(str(n), f"r{n}", body) for n, body in enumerate(bodies)]


def test_admission_refuses_duplicates_old_files_and_glob_mismatches() -> None:
    options = parse_options({**REQUIRED, "pathGlobFilter": "*.csv", "maxFileAge": "1d"})
    messages = _messages(s3_event("new.csv"), s3_event("new.csv"), s3_event("seen.csv"), s3_event("x.txt"),
                         s3_event("old.csv", time="2025-12-01T00:00:00Z"), "garbage",
                         json.dumps({"Event": "s3:TestEvent"}))
    admission = admit(messages, lambda path: path.endswith("seen.csv"), options, NOW_MS)
    assert [f.path for f in admission.files] == ["s3://b/new.csv"]
    assert admission.refused == {"duplicate": 2, "glob mismatch": 1, "too old": 1, "malformed": 1, "ignored": 1}
    assert len(admission.delete) == len(messages) and not admission.keep


def test_admission_keeps_consumer_errors_when_asked() -> None:
    options = parse_options({**REQUIRED, "sqs.keepMessageForConsumerError": "true"})
    admission = admit(_messages(s3_event("a.csv"), s3_event("a.csv"), "garbage"), lambda _: False, options, NOW_MS)
    assert [m.body for m in admission.keep] == [s3_event("a.csv"), "garbage"]
    assert [m.message_id for m in admission.delete] == ["0"]


def test_tracker_plans_batches_holds_the_rest_and_forgets_old_files(tmp_path: Path) -> None:
    tracker = FileTracker(LocalFolder(tmp_path))
    first, held = S3File("s3://b/1", 1, 100), S3File("s3://b/2", 1, 200)
    assert tracker.plan([first], [held]) == 0
    assert tracker.batch_files(0) == [first] and tracker.held() == [held]
    assert tracker.seen("s3://b/1") and tracker.seen("s3://b/2")
    assert tracker.plan([held], []) == 1 and tracker.held() == []
    assert tracker.plan([first, held], tracker.held(), reprocess=(0, 1)) == 2 and tracker.reprocess_batch(0, 1) == 2
    tracker.close()
    reopened = FileTracker(LocalFolder(tmp_path))  # what a restarted query finds
    assert reopened.meta("planned") == 2 and reopened.batch_files(1) == [held]
    assert reopened.purge_older_than(150) == 1 and not reopened.seen("s3://b/1") and reopened.seen("s3://b/2")


@pytest.mark.parametrize(("to", "fmt"), [("s3", "debezium"), ("kafka", "dms-parquet")])
def test_simulate_pairs_s3_with_the_dms_file_formats(to: str, fmt: str, capsys) -> None:
    from pipeline.cli.commands import EXIT_USAGE
    from pipeline.cli.main import main

    assert main(["simulate", "--to", to, "--format", fmt, "--events", "1"]) == EXIT_USAGE
    assert "--to s3 goes with --format dms-csv or dms-parquet" in capsys.readouterr().err


def test_files_are_packed_into_tasks_like_a_file_sources_splits() -> None:
    from pipeline.sources.s3sqs.files import pack

    small = [S3File(f"s3://b/{n}", 10, 0) for n in range(100)]
    assert [len(s.files) for s in pack(small)] == [31, 31, 31, 7]  # 4 MB opening cost each, 128 MB a task
    assert [f for s in pack(small) for f in s.files] == small
    assert [len(s.files) for s in pack([S3File("s3://b/big", 300 << 20, 0)] * 2)] == [1, 1]


class FakeSqs:
    """receive_message answers from a script of batches; records each call's wait."""

    def __init__(self, batches: list[int]) -> None:
        self.batches, self.waits, self.sent = list(batches), [], 0

    def receive_message(self, MaxNumberOfMessages: int, WaitTimeSeconds: int, **_: object) -> dict:
        self.waits.append(WaitTimeSeconds)
        count = min(MaxNumberOfMessages, self.batches.pop(0)) if self.batches else 0
        messages = [{"MessageId": str(self.sent + n), "ReceiptHandle": "r", "Body": "{}"} for n in range(count)]
        self.sent += count
        return {"Messages": messages}


def test_receive_long_polls_once_then_drains_without_waiting() -> None:
    from pipeline.sources.s3sqs.queue import SqsQueue

    queue = SqsQueue(parse_options({**REQUIRED, "sqs.maxConcurrency": "1"}))
    queue.client = FakeSqs([3, 10, 4, 0, 10])
    got = queue.receive(100)
    # The first call waits (long poll); the drain takes 10 + 4 without waiting and stops at the empty answer.
    assert len(got) == 17 and queue.client.waits == [10, 0, 0, 0]
    queue.client = FakeSqs([])
    assert queue.receive(100) == [] and queue.client.waits == [10]  # an idle trigger: one long poll
    queue.close()


def test_a_tracker_on_s3_is_found_by_a_reader_of_another_host_and_only_as_published(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """A checkpoint on S3: the working copy is published after each write; a reader elsewhere (another working
    folder) restores the last published version, and old versions' files are deleted."""
    import boto3
    from moto import mock_aws

    from pipeline.sources.s3sqs.folder import S3Folder

    keys = {"region_name": "us-east-1", "aws_access_key_id": "test", "aws_secret_access_key": "test"}
    with mock_aws():
        boto3.client("s3", **keys).create_bucket(Bucket="ckpt")
        monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "driver-1"))
        (tmp_path / "driver-1").mkdir()
        tracker = FileTracker(S3Folder("s3a://ckpt/q/checkpoint", keys))
        files = [S3File(f"s3://b/{n}", 1, 100 + n) for n in range(3)]
        for item in files:
            tracker.plan([item], [])
        tracker.mark("handed", 1)
        monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "driver-2"))
        (tmp_path / "driver-2").mkdir()
        elsewhere = FileTracker(S3Folder("s3://ckpt/q/checkpoint", keys))
        assert elsewhere.meta("planned") == 2 and elsewhere.meta("handed") == 1
        assert elsewhere.batch_files(2) == [files[2]] and elsewhere.seen("s3://b/0")
        objects = boto3.client("s3", **keys).list_objects_v2(Bucket="ckpt")["Contents"]
        versions = {o["Key"].split("/")[5] for o in objects if "/rocksdb/" in o["Key"] and "LATEST" not in o["Key"]}
        assert versions == {"sst", "4"}  # three plans and a mark; the earlier versions' own files are gone
        elsewhere.close()
        assert not elsewhere.folder.work.exists()  # type: ignore[attr-defined]  # the working copy went with it
        tracker.plan([S3File("s3://b/late", 1, 900)], [])  # the first driver again: published as version 5
        again = FileTracker(S3Folder("s3://ckpt/q/checkpoint", keys))
        assert again.meta("planned") == 3
