"""The `aws-kinesis` pieces without services: options, offsets, KPL, retries, PutRecords batching, the metadata
committer's local files, and the planner and a shard's read over a fake Kinesis (expired iterators, limits,
replays up to the recorded end, parents first, no batch when nothing is new)."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock
import json
from datetime import datetime, timezone
from typing import Any

import pytest
from botocore.exceptions import ClientError

from pipeline.sources.kinesis.client import Kinesis, KinesisUnavailable, epoch_timestamp, parse_records, shared
from pipeline.sources.kinesis.kpl import UserRecord, aggregate, deaggregate
from pipeline.sources.kinesis.metadata import MetadataCommitter, MetadataUnavailable, ShardEnd, store_client
from pipeline.sources.kinesis.options import ClientOptions, KinesisOptionError, sink_options, source_options
from pipeline.sources.kinesis.positions import BatchOffset, OffsetFormatError, Position
from pipeline.sources.kinesis.put import MAX_RECORD_BYTES, RecordBatcher
from pipeline.sources.kinesis.reader import KinesisStreamReader
from pipeline.sources.kinesis.shards import Shard, _parents_first

QUICK = ClientOptions(num_retries=2, retry_interval_s=0.0, max_retry_interval_s=0.0)


def _options(**values: str):
    return source_options({"kinesis.streamName": "s", "kinesis.metadataPath": "/nowhere",
                           **{f"kinesis.{k}": v for k, v in values.items()}})


# -- options -----------------------------------------------------------------------------------------------


def test_defaults_are_the_seed_connectors() -> None:
    options = _options()
    assert options.starting_position.kind == "LATEST"
    assert (options.max_fetch_records_per_shard, options.records_per_fetch, options.fetch_interval_s) == (100_000, 10_000, 0.2)
    assert (options.describe_shard_interval_s, options.fail_on_data_loss) == (1.0, False)
    assert (options.client.num_retries, options.client.retry_interval_s, options.client.max_retry_interval_s) == (5, 1.0, 10.0)
    metadata = options.metadata
    assert (metadata.committer_type, metadata.path, options.check_new_record_threads) == ("HDFS", "/nowhere", 8)
    assert (metadata.num_retries, metadata.retry_interval_s, metadata.max_retry_interval_s) == (5, 1.0, 10.0)
    assert metadata.min_batches_to_retain == 100


def test_option_names_are_case_insensitive_and_durations_parse() -> None:
    options = source_options({"KINESIS.STREAMNAME": "s", "KINESIS.METADATAPATH": "/m", "kinesis.describeShardInterval": "250ms",
                              "kinesis.maxFetchRecordsPerShard": "1,000"})
    assert (options.stream_name, options.describe_shard_interval_s, options.max_fetch_records_per_shard) == ("s", 0.25, 1000)


@pytest.mark.parametrize(("text", "kind", "timestamp"), [
    ("EARLIEST", "TRIM_HORIZON", None), ("trim_horizon", "TRIM_HORIZON", None), ("LATEST", "LATEST", None),
    ("AT_TIMESTAMP 2023-08-30T19:00:05Z", "AT_TIMESTAMP", 1693422005.0),
    ("AT_TIMESTAMP 2023-08-30T19:00:05-08:00", "AT_TIMESTAMP", 1693422005.0 + 8 * 3600),
])
def test_starting_positions_in_the_seeds_formats(text: str, kind: str, timestamp: float | None) -> None:
    position = _options(startingPosition=text).starting_position
    assert (position.kind, position.timestamp) == (kind, timestamp)


@pytest.mark.parametrize("text", ["AT_TIMESTAMP", "AT_TIMESTAMP 2023-08-30T19:00:05", "OLDEST", "LATEST now"])
def test_a_bad_starting_position_names_the_accepted_forms(text: str) -> None:
    with pytest.raises(KinesisOptionError, match="AT_TIMESTAMP <ISO time with zone>"):
        _options(startingPosition=text)


def test_subscribe_to_shard_and_seed_only_options_are_rejected_with_the_reason() -> None:
    with pytest.raises(KinesisOptionError, match=r"SubscribeToShard.*\(moto\) does not implement it"):
        _options(consumerType="SubscribeToShard")
    with pytest.raises(KinesisOptionError, match="consumername is not supported"):
        _options(consumerName="app")
    with pytest.raises(KinesisOptionError, match="streamName is required"):
        sink_options({})
    with pytest.raises(KinesisOptionError, match="kinesis.maxfetchrecordspershards is not an option"):
        _options(maxFetchRecordsPerShards="5")
    with pytest.raises(KinesisOptionError, match="startingposition is not an option"):
        sink_options({"kinesis.streamName": "s", "kinesis.startingPosition": "LATEST"})


def test_the_metadata_committer_options_are_checked() -> None:
    dynamo = _options(metadataCommitterType="dynamodb", **{"dynamodb.tableName": "meta"}, metadataNumRetries="0",
                      metadataRetryIntervalsMs="50", metadataMaxRetryIntervalMs="200", minBatchesToRetain="3")
    assert (dynamo.metadata.committer_type, dynamo.metadata.table_name, dynamo.metadata.path) == ("DYNAMODB", "meta", None)
    assert (dynamo.metadata.num_retries, dynamo.metadata.retry_interval_s, dynamo.metadata.max_retry_interval_s,
            dynamo.metadata.min_batches_to_retain) == (0, 0.05, 0.2, 3)
    with pytest.raises(KinesisOptionError, match="dynamodb.tableName is required"):
        _options(metadataCommitterType="DYNAMODB")
    with pytest.raises(KinesisOptionError, match="metadataCommitterType 'ZOOKEEPER' is not one of HDFS, DYNAMODB"):
        _options(metadataCommitterType="zookeeper")
    with pytest.raises(KinesisOptionError, match="kinesis.metadataPath is required .* checkpointLocation"):
        source_options({"kinesis.streamName": "s"})
    given = source_options({"kinesis.streamName": "s", "checkpointLocation": "s3a://b/cp"})
    assert given.metadata.path == "s3a://b/cp"  # the seed's default: the checkpoint location


def test_the_region_is_inferred_from_an_aws_endpoint() -> None:
    assert _options(endpointUrl="https://kinesis.eu-west-2.amazonaws.com").client.region == "eu-west-2"
    assert _options(endpointUrl="http://127.0.0.1:5000").client.region == "us-east-1"
    assert _options(endpointUrl="http://127.0.0.1:5000", region="ap-south-1").client.region == "ap-south-1"


# -- offsets and shards ------------------------------------------------------------------------------------


def test_positions_round_trip_and_say_where_to_read_on() -> None:
    positions = {"a": Position(after="42"), "b": Position(start="AT_TIMESTAMP", at=1.5), "c": Position(done=True),
                 "d": Position()}
    offset = BatchOffset(7, positions, closed=frozenset({"c"}), waiting=frozenset({"d"}))
    assert BatchOffset.from_json(offset.to_json()) == offset
    assert offset.to_read() == ["a", "b"]  # c is done, d waits for a parent
    assert positions["a"].iterator_args() == {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": "42"}
    assert positions["b"].iterator_args() == {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": 1.5}
    assert positions["d"].iterator_args() == {"ShardIteratorType": "TRIM_HORIZON"}
    assert Position(after="100").reached(Position(after="99"))  # numeric, not text, order
    assert not Position(after="99").reached(Position(after="100"))


def test_an_offset_of_the_driver_side_reader_is_refused_with_what_to_do() -> None:
    with pytest.raises(OffsetFormatError, match="no batch number.*start a new checkpoint"):
        BatchOffset.from_json({"shards": {"a": {"after": "1"}}, "since": 5.0})


def test_parents_come_before_their_children() -> None:
    shards = [Shard("shardId-3", ("shardId-1", "shardId-2"), False), Shard("shardId-2", ("shardId-0",), True),
              Shard("shardId-1", ("shardId-0",), True), Shard("shardId-0", (), True)]
    order = [shard.shard_id for shard in _parents_first(shards)]
    assert order.index("shardId-0") < order.index("shardId-1") < order.index("shardId-3")
    assert order.index("shardId-2") < order.index("shardId-3")


# -- KPL ---------------------------------------------------------------------------------------------------


def test_kpl_aggregates_come_apart_into_their_user_records() -> None:
    records = [UserRecord("k1", b"one"), UserRecord("k2", b"two" * 100), UserRecord("k1", b"")]
    assert deaggregate(aggregate(records), "outer") == records


def test_plain_and_corrupt_records_pass_through_whole() -> None:
    assert deaggregate(b'{"a": 1}', "k") == [UserRecord("k", b'{"a": 1}')]
    corrupt = bytearray(aggregate([UserRecord("k1", b"one")]))
    corrupt[-1] ^= 0xFF  # the digest no longer matches
    assert deaggregate(bytes(corrupt), "k") == [UserRecord("k", bytes(corrupt))]


@pytest.mark.parametrize("aggregated", [True, False])
def test_an_answer_becomes_one_row_per_user_record(aggregated: bool) -> None:
    """Rows of an answer with a KPL aggregate in it, and of one without (which is not taken apart record by
    record): each user record with its partition key, its Kinesis record's sequence number and arrival time."""
    from pipeline.sources.kinesis.shard_reader import arrow_batch

    first = (aggregate([UserRecord("k1", b"one"), UserRecord("k2", b"two")]) if aggregated else b"plain")
    records = [{"Data": first, "PartitionKey": "outer", "SequenceNumber": "7", "ApproximateArrivalTimestamp": 1.5},
               {"Data": b"three", "PartitionKey": "k3", "SequenceNumber": "8",
                "ApproximateArrivalTimestamp": datetime(2024, 1, 1, tzinfo=timezone.utc)}]
    rows = arrow_batch(records, "st", "shardId-1").to_pylist()
    users = [(b"one", "k1", "7"), (b"two", "k2", "7")] if aggregated else [(b"plain", "outer", "7")]
    assert [(row["data"], row["partitionKey"], row["sequenceNumber"]) for row in rows] == [*users, (b"three", "k3", "8")]
    assert {(row["streamName"], row["shardId"]) for row in rows} == {("st", "shardId-1")}
    assert [row["approximateArrivalTimestamp"] for row in rows] == (
        [datetime.fromtimestamp(1.5, timezone.utc)] * len(users) + [datetime(2024, 1, 1, tzinfo=timezone.utc)])


# -- retries and PutRecords --------------------------------------------------------------------------------


def _throttled() -> ClientError:
    return ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "GetRecords")


class _FlakyBoto:
    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def list_shards(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.failures:
            raise _throttled()
        return {"Shards": []}


def test_throttling_is_retried_with_backoff_then_named() -> None:
    kinesis = Kinesis(QUICK)
    kinesis.client = _FlakyBoto(failures=2)
    assert kinesis.call("list_shards") == {"Shards": []}
    kinesis.client = _FlakyBoto(failures=3)
    with pytest.raises(KinesisUnavailable, match="list_shards .* failed after 3 attempts"):
        kinesis.call("list_shards")


class _Answer:
    """A raw HTTP body, as urllib3 hands it to botocore."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self) -> list[bytes]:
        return [self.body]


def test_arrival_times_are_parsed_to_the_same_instant_in_utc() -> None:
    """Records' epoch arrival times skip dateutil's local zone (a third of a shard read's Python time), and
    stay the instant Kinesis sent; a text timestamp is still parsed by botocore."""
    from botocore.awsrequest import AWSResponse

    kinesis = Kinesis(ClientOptions(keys=("key", "secret")))  # no request leaves: the answer is handed back below
    body = json.dumps({"Records": [{"SequenceNumber": "1", "Data": "eA==", "PartitionKey": "k",
                                    "ApproximateArrivalTimestamp": 1700000000.123}],
                       "NextShardIterator": "next", "MillisBehindLatest": 0}).encode()
    kinesis.client.meta.events.register("before-send.kinesis.GetRecords",
                                        lambda **_: AWSResponse("http://fake", 200, {}, _Answer(body)))
    arrived = kinesis.call("get_records", ShardIterator="it")["Records"][0]["ApproximateArrivalTimestamp"]
    assert arrived == datetime.fromtimestamp(1700000000.123, timezone.utc) and arrived.tzinfo is timezone.utc
    assert epoch_timestamp("2024-01-01T00:00:00Z") == datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_records_are_parsed_as_botocore_parses_them() -> None:
    """GetRecords' answers skip botocore's model walk, and come out as it would give them: every field of every
    record, the child shards of a closed shard, the answer's metadata; an error answer is still botocore's."""
    from botocore.awsrequest import AWSResponse

    body = json.dumps({"Records": [{"SequenceNumber": str(n), "Data": "eyJhIjogMX0=", "PartitionKey": f"k{n}",
                                    "ApproximateArrivalTimestamp": 1700000000.5 + n, "EncryptionType": "NONE"}
                                   for n in range(3)],
                       "MillisBehindLatest": 0,
                       "ChildShards": [{"ShardId": "shardId-2", "ParentShards": ["shardId-1"],
                                        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "9"}}]}).encode()
    refused = json.dumps({"__type": "ExpiredIteratorException", "message": "Iterator expired"}).encode()

    def answers(kinesis: Kinesis, status: int, text: bytes) -> Kinesis:
        kinesis.client.meta.events.register("before-send.kinesis.GetRecords",
                                            lambda **_: AWSResponse("http://fake", status, {}, _Answer(text)))
        return kinesis

    ours = answers(Kinesis(ClientOptions(keys=("key", "secret"))), 200, body)
    botocores = answers(Kinesis(ClientOptions(keys=("key", "secret"))), 200, body)
    botocores.client.meta.events.unregister("before-parse.kinesis.GetRecords", parse_records)
    from botocore.parsers import BaseJSONParser

    walked = BaseJSONParser._parse_body_as_json
    with mock.patch.object(BaseJSONParser, "_parse_body_as_json", autospec=True, side_effect=walked) as botocore_parse:
        parsed = ours.call("get_records", ShardIterator="it")
    assert [call.args[1] for call in botocore_parse.call_args_list] == [b"{}"]  # botocore never saw the records
    assert parsed == botocores.call("get_records", ShardIterator="it")
    assert parsed["Records"][0]["Data"] == b'{"a": 1}' and parsed["ChildShards"][0]["ShardId"] == "shardId-2"
    with pytest.raises(ClientError, match="Iterator expired") as error:
        answers(Kinesis(replace(QUICK, keys=("key", "secret"))), 400, refused).call("get_records", ShardIterator="it")
    assert error.value.response["Error"]["Code"] == "ExpiredIteratorException"


def test_shard_reads_of_one_process_share_a_client_per_options() -> None:
    """Making a client loads botocore's models anew, which every shard's read (and its metadata store) paid in
    every batch."""
    one, other = ClientOptions(keys=("key", "secret")), ClientOptions(keys=("key", "secret"), region="eu-west-1")
    try:
        assert shared(one) is shared(ClientOptions(keys=("key", "secret")))
        assert shared(other) is not shared(one) and shared(other).client.meta.region_name == "eu-west-1"
        s3 = store_client("s3", "us-east-1", "http://127.0.0.1:1")
        assert s3 is store_client("s3", "us-east-1", "http://127.0.0.1:1")
        assert store_client("dynamodb", "us-east-1", "http://127.0.0.1:1") is not s3
        assert store_client("s3", "eu-west-1", None).meta.region_name == "eu-west-1"
    finally:
        shared.cache_clear()
        store_client.cache_clear()


class _RecordingKinesis:
    """PutRecords that fails the entries whose data is in `refuse` once."""

    def __init__(self, refuse: set[bytes] = frozenset()) -> None:  # type: ignore[assignment]
        self.options, self.address = QUICK, "fake"
        self.requests: list[list[dict[str, Any]]] = []
        self.refuse = set(refuse)

    def call(self, operation: str, **params: Any) -> dict[str, Any]:
        records = params["Records"]
        self.requests.append(records)
        results = []
        for record in records:
            refused = record["Data"] in self.refuse
            self.refuse.discard(record["Data"])
            results.append({"ErrorCode": "ProvisionedThroughputExceededException"} if refused else {"SequenceNumber": "1"})
        return {"Records": results}


def test_put_records_stays_within_the_api_limits() -> None:
    kinesis = _RecordingKinesis()
    batcher = RecordBatcher(kinesis, "s")  # type: ignore[arg-type]
    for i in range(1100):
        batcher.add(str(i).encode(), "k")
    big = b"x" * (MAX_RECORD_BYTES - 1)
    for _ in range(6):
        batcher.add(big, "k")
    batcher.flush()
    assert [len(r) for r in kinesis.requests] == [500, 500, 100 + 4, 2]  # 5 MiB holds 4 of the big ones + the rest
    assert all(sum(len(e["Data"]) + 1 for e in r) <= 5 * 1024 * 1024 for r in kinesis.requests)
    assert batcher.sent == 1106
    with pytest.raises(ValueError, match="over Kinesis's 1048576 byte limit"):
        batcher.add(big + b"yy", "k")


def test_only_failed_entries_are_sent_again() -> None:
    kinesis = _RecordingKinesis(refuse={b"2", b"4"})
    batcher = RecordBatcher(kinesis, "s")  # type: ignore[arg-type]
    for i in range(6):
        batcher.add(str(i).encode(), "k")
    batcher.flush()
    assert [[e["Data"] for e in r] for r in kinesis.requests] == [[b"0", b"1", b"2", b"3", b"4", b"5"], [b"2", b"4"]]
    assert batcher.sent == 6


# -- the reader over a fake Kinesis ------------------------------------------------------------------------


class _FakeStream:
    """One open shard of `count` records; the first GetRecords answers ExpiredIteratorException."""

    def __init__(self, count: int) -> None:
        self.records = [{"SequenceNumber": str(n), "Data": f"r{n}".encode(), "PartitionKey": "k",
                         "ApproximateArrivalTimestamp": 0.0} for n in range(1, count + 1)]
        self.expired_once = False
        self.iterators = 0

    def call(self, operation: str, **params: Any) -> dict[str, Any]:
        if operation == "list_shards":
            return {"Shards": [{"ShardId": "shardId-0", "SequenceNumberRange": {"StartingSequenceNumber": "1"}}]}
        if operation == "get_shard_iterator":
            self.iterators += 1
            return {"ShardIterator": params.get("StartingSequenceNumber", "0")}
        if not self.expired_once:
            self.expired_once = True
            raise ClientError({"Error": {"Code": "ExpiredIteratorException", "Message": "old"}}, "GetRecords")
        after = int(params["ShardIterator"])
        found = self.records[after:after + params["Limit"]]
        last = found[-1]["SequenceNumber"] if found else str(after)
        return {"Records": found, "NextShardIterator": last, "MillisBehindLatest": 0 if not found else 1}


def _reader(tmp_path, fake: _FakeStream, **values: str) -> KinesisStreamReader:
    settings = {"startingPosition": "TRIM_HORIZON", "getRecords.fetchIntervalMs": "0", "metadataPath": str(tmp_path),
                **values}
    reader = KinesisStreamReader(_options(**settings))
    reader._plan().kinesis = reader._plan().directory.kinesis = fake  # type: ignore[assignment]
    return reader


def _read(reader: KinesisStreamReader, fake: _FakeStream, start: dict, end: dict) -> list[bytes]:
    """The batch ending at `end` as an executor reads it (over the fake)."""
    from pipeline.sources.kinesis import shard_reader

    rows: list[bytes] = []
    for partition in reader.partitions(start, end):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(shard_reader, "shared", lambda options: fake)
            for batch in reader.read(partition):
                rows += batch.column("data").to_pylist()
    return rows


def test_a_shard_read_renews_expired_iterators_bounds_the_batch_and_replays_to_its_recorded_end(tmp_path) -> None:
    fake = _FakeStream(10)
    fake.expired_once = True  # the planner's check gets a good iterator
    reader = _reader(tmp_path, fake, maxFetchRecordsPerShard="7", **{"getRecords.numberOfRecordsPerFetch": "3"})
    start = reader.initialOffset()
    end = reader.latestOffset()
    assert end["batch"] == start["batch"] + 1 and end["shards"] == {"shardId-0": {"start": "TRIM_HORIZON"}}
    fake.expired_once = False
    assert _read(reader, fake, start, end) == [f"r{n}".encode() for n in range(1, 8)]
    assert fake.iterators == 3  # the planner's check, the read's, and the expired one renewed at the same place
    fake.records += [{"SequenceNumber": "11", "Data": b"r11", "PartitionKey": "k", "ApproximateArrivalTimestamp": 0.0}]
    assert _read(reader, fake, start, end) == [f"r{n}".encode() for n in range(1, 8)]  # the recorded end, not 7 more
    following = reader.latestOffset()
    assert following["shards"] == {"shardId-0": {"after": "7"}}
    assert _read(reader, fake, end, following) == [b"r8", b"r9", b"r10", b"r11"]
    assert reader.latestOffset() == following  # nothing new: the same offset again, so Spark plans no batch


def test_a_read_whose_rows_were_never_taken_leaves_its_shard_where_it_was(tmp_path) -> None:
    fake = _FakeStream(3)
    fake.expired_once = True
    reader = _reader(tmp_path, fake)
    first = reader.latestOffset()
    reader.partitions(reader.initialOffset(), first)  # planned, but no executor read it (a batch nobody evaluated)
    assert reader.latestOffset()["shards"] == first["shards"]


def test_spark_committing_a_batch_forgets_the_metadata_of_batches_before_the_retained_ones(tmp_path) -> None:
    reader = _reader(tmp_path, _FakeStream(0), minBatchesToRetain="2")
    for batch in range(4):
        reader._plan().metadata.put(batch, "shardId-0", ShardEnd(Position(after=str(batch)), 1))
    reader.commit(BatchOffset(3, {"shardId-0": Position(after="2")}).to_json())
    assert [reader._plan().metadata.get(b, "shardId-0") is not None for b in range(4)] == [False, False, True, True]


def test_the_metadata_committer_keeps_the_last_batches_and_names_a_store_that_fails(tmp_path) -> None:
    options = _options(metadataPath=str(tmp_path), minBatchesToRetain="2").metadata
    committer = MetadataCommitter(options)
    for batch in range(5):
        committer.put(batch, "shardId-0", ShardEnd(Position(after=str(batch)), batch))
    committer.put(4, "shardId-1", ShardEnd(Position(done=True), 0))
    assert committer.get(3, "shardId-0") == ShardEnd(Position(after="3"), 3)
    assert committer.ends(4) == {"shardId-0": ShardEnd(Position(after="4"), 4), "shardId-1": ShardEnd(Position(done=True), 0)}
    committer.retain_from(4)
    assert [committer.get(b, "shardId-0") is not None for b in range(5)] == [False, False, False, True, True]
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    broken = MetadataCommitter(_options(metadataPath=str(blocked), metadataNumRetries="1",
                                        metadataRetryIntervalsMs="0").metadata)
    with pytest.raises(MetadataUnavailable, match=f"metadata store path {blocked}/kinesis-metadata/s failed to write "
                                                  "after 2 attempts"):
        broken.put(0, "shardId-0", ShardEnd(Position(), 0))


# -- the pipeline's settings -------------------------------------------------------------------------------


def test_kinesis_settings_are_checked_when_loaded() -> None:
    from pipeline.config.settings import ConfigError, load_config

    cfg = load_config(overrides=["changelog.source=kinesis", "kinesis.streams=moma, hr",
                                 "kinesis.starting_position=AT_TIMESTAMP 2026-01-01T00:00:00Z",
                                 "kinesis.options.describeShardInterval=5s"], environ={})
    assert (cfg.changelog.source, cfg.kinesis.streams) == ("kinesis", ["moma", "hr"])
    assert cfg.kinesis.options == {"describeShardInterval": "5s"}
    with pytest.raises(ConfigError, match="kinesis.starting_position.*AT_TIMESTAMP <ISO time with zone>"):
        load_config(overrides=["kinesis.starting_position=yesterday"], environ={})
    with pytest.raises(ConfigError, match="changelog.source"):
        load_config(overrides=["changelog.source=pulsar"], environ={})


def test_the_stage_passes_its_settings_as_source_options() -> None:
    from pipeline.config.settings import ConfigError, load_config
    from pipeline.stages.changelog.transports.kinesis import source_options as stage_options

    cfg = load_config(overrides=["aws.endpoint_url=http://127.0.0.1:4566", "kinesis.streams=moma",
                                 "kinesis.sts_role_arn=arn:aws:iam::222222222222:role/r",
                                 "kinesis.options.describeShardInterval=5s"], environ={})
    options = source_options(stage_options(cfg, "moma"))  # the reader accepts every one of them
    assert (options.stream_name, options.starting_position.kind, options.fail_on_data_loss) == ("moma", "TRIM_HORIZON", True)
    assert (options.client.sts_role_arn, options.client.sts_endpoint_url) == ("arn:aws:iam::222222222222:role/r",
                                                                              "http://127.0.0.1:4566")
    assert options.describe_shard_interval_s == 5.0
    assert (options.metadata.committer_type, options.metadata.path) == ("HDFS", cfg.changelog.checkpoint)
    assert options.metadata.endpoint_url == "http://127.0.0.1:4566"
    dynamo = load_config(overrides=["kinesis.streams=moma", "kinesis.metadata_committer=DYNAMODB",
                                    "kinesis.dynamodb_table_name=meta"], environ={})
    assert source_options(stage_options(dynamo, "moma")).metadata.table_name == "meta"
    with pytest.raises(ConfigError, match="DYNAMODB needs kinesis.dynamodb_table_name"):
        load_config(overrides=["kinesis.metadata_committer=DYNAMODB"], environ={})
