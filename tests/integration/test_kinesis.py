"""The `aws-kinesis` source and sink and `changelog --source kinesis`, against the stack's moto server.

The reader is driven directly (as Spark's Python streaming runner drives it: the planner's calls, then each
partition's read as an executor makes it) for starting positions, resharding, replays with each metadata
committer, data loss and STS; Spark runs the sink, a stream-to-stream query, and, in subprocesses killed
mid-stream, the changelog stage over a simulated DMS-to-Kinesis source, whose mirror must equal the truth.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator
from unittest import mock

import boto3
import pytest

from pipeline.stages.changelog import ChangelogStage
from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import MirrorStage
from pipeline.sources.kinesis.options import source_options
from pipeline.sources.kinesis.metadata import MetadataUnavailable
from pipeline.sources.kinesis.reader import KinesisStreamReader
from pipeline.sources.kinesis.shard_reader import KinesisDataLoss
from simulators.kinesis import KinesisTransport
from simulators.simulation import Simulation, SimulationOptions, Summary
from simulators.tables import table_set
from simulators.truth import TruthStore
from tests.integration.test_changelog import _StageProcess
from tests.integration.test_mirror import _assert_equal_to_truth, _configure

pytestmark = pytest.mark.integration

ROLE_ACCOUNT = "222222222222"
LANDED = [table.name for table in table_set(SimulationOptions().tables)]  # the simulated DMS source's tables


@pytest.fixture(scope="module")
def aws(cfg: PipelineConfig, stack) -> Iterator[PipelineConfig]:
    """The stack's moto, with its keys in the environment, where the reader's default credential chain looks."""
    keys = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": cfg.aws.region}
    with mock.patch.dict(os.environ, keys):
        yield cfg


def _client(cfg: PipelineConfig, **credentials: str):
    return boto3.client("kinesis", endpoint_url=cfg.aws.endpoint_url, region_name=cfg.aws.region,
                        **(credentials or {"aws_access_key_id": "test", "aws_secret_access_key": "test"}))


def _stream(client, shards: int = 1) -> str:
    name = f"k{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=name, ShardCount=shards)
    client.get_waiter("stream_exists").wait(StreamName=name)
    return name


def _put(client, stream: str, payloads: list[str]) -> None:
    client.put_records(StreamName=stream, Records=[{"Data": p.encode(), "PartitionKey": p} for p in payloads])


def _reader(cfg: PipelineConfig, stream: str, **options: str) -> KinesisStreamReader:
    settings = {"streamName": stream, "endpointUrl": cfg.aws.endpoint_url, "startingPosition": "TRIM_HORIZON",
                "getRecords.fetchIntervalMs": "0", "metadataEndpointUrl": cfg.aws.endpoint_url,
                "metadataPath": tempfile.mkdtemp(prefix="kinesis-metadata-"), **options}
    return KinesisStreamReader(source_options({f"kinesis.{k}": v for k, v in settings.items()}))


def _batch(reader: KinesisStreamReader, start: dict, end: dict) -> list[tuple]:
    """The batch (start, end] as Spark runs it: planned on the driver, each shard's partition read as an
    executor reads it; rows as tuples in the source's column order."""
    rows: list[tuple] = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            rows += list(zip(*(column.to_pylist() for column in batch.columns)))
    return rows


def _drain(reader: KinesisStreamReader, offset: dict) -> tuple[list[tuple], dict]:
    """Batches until the planner finds nothing new; every row, in read order, and the last offset."""
    rows: list[tuple] = []
    while (end := reader.latestOffset()) != offset:
        rows += _batch(reader, offset, end)
        offset = end
    return rows, end


def _payloads(rows: list[tuple]) -> list[str]:
    return [row[0].decode() for row in rows]


# -- the reader --------------------------------------------------------------------------------------------


def test_starting_positions_trim_horizon_at_timestamp_and_latest(aws: PipelineConfig) -> None:
    client = _client(aws)
    stream = _stream(client)
    _put(client, stream, ["a", "b", "c"])
    time.sleep(0.05)  # arrival times on either side of `cut`, not a wait for anything
    cut = time.time()
    time.sleep(0.05)
    _put(client, stream, ["d", "e"])

    earliest = _reader(aws, stream, startingPosition="EARLIEST")
    assert _payloads(_drain(earliest, earliest.initialOffset())[0]) == ["a", "b", "c", "d", "e"]
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(cut)) + f".{int(cut % 1 * 1e6):06d}+00:00"
    since = _reader(aws, stream, startingPosition=f"AT_TIMESTAMP {at}")
    assert _payloads(_drain(since, since.initialOffset())[0]) == ["d", "e"]
    latest = _reader(aws, stream, startingPosition="LATEST")
    start = latest.initialOffset()
    time.sleep(0.05)
    _put(client, stream, ["f"])
    assert _payloads(_drain(latest, start)[0]) == ["f"]


def _bucket(cfg: PipelineConfig) -> str:
    name = f"kmeta-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=cfg.aws.endpoint_url, region_name=cfg.aws.region).create_bucket(Bucket=name)
    return name


COMMITTERS = {
    "local path": lambda cfg: {"metadataPath": tempfile.mkdtemp(prefix="kinesis-metadata-")},
    "s3": lambda cfg: {"metadataPath": f"s3://{_bucket(cfg)}/checkpoint"},
    "s3a": lambda cfg: {"metadataPath": f"s3a://{_bucket(cfg)}/checkpoint"},
    "dynamodb": lambda cfg: {"metadataCommitterType": "DYNAMODB", "dynamodb.tableName": f"meta{uuid.uuid4().hex[:8]}"},
}


@pytest.mark.parametrize("committer", sorted(COMMITTERS))
def test_a_batch_is_bounded_per_shard_and_replays_identically(aws: PipelineConfig, committer: str) -> None:
    client = _client(aws)
    stream = _stream(client, shards=2)
    _put(client, stream, [f"r{i}" for i in range(30)])
    store = COMMITTERS[committer](aws)
    reader = _reader(aws, stream, maxFetchRecordsPerShard="4", **store)
    start = reader.initialOffset()
    end = reader.latestOffset()
    rows = _batch(reader, start, end)
    assert len(rows) == 8  # 4 from each shard
    _put(client, stream, [f"late{i}" for i in range(10)])
    restarted = _reader(aws, stream, **store)  # a new driver replaying the checkpointed batch, without the limit
    assert _batch(restarted, start, end) == rows  # the same batch: each shard up to its recorded end
    rest = _batch(restarted, end, restarted.latestOffset())  # the next batch starts at the recorded ends
    assert sorted(_payloads(rows + rest)) == sorted([f"r{i}" for i in range(30)] + [f"late{i}" for i in range(10)])


def test_a_metadata_store_that_does_not_answer_is_named_with_its_address(aws: PipelineConfig) -> None:
    client = _client(aws)
    stream = _stream(client)
    _put(client, stream, ["x"])
    nowhere = "http://127.0.0.1:9"  # nothing listens on the discard port
    reader = _reader(aws, stream, metadataCommitterType="DYNAMODB", **{"dynamodb.tableName": "meta"},
                     metadataEndpointUrl=nowhere, metadataNumRetries="1", metadataRetryIntervalsMs="10")
    with pytest.raises(MetadataUnavailable, match=f"DynamoDB table meta at {nowhere} failed to read after 2 attempts"):
        reader.latestOffset()  # the driver asks where the last batch ended


def test_parent_shards_are_read_to_their_end_before_their_children(aws: PipelineConfig) -> None:
    client = _client(aws)
    stream = _stream(client, shards=2)
    first = [f"p{i}" for i in range(40)]
    _put(client, stream, first)
    reader = _reader(aws, stream, maxFetchRecordsPerShard="5", describeShardInterval="0ms")
    start, offset = reader.initialOffset(), reader.latestOffset()
    rows = _batch(reader, start, offset)
    parents = [s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]]
    client.merge_shards(StreamName=stream, ShardToMerge=parents[0], AdjacentShardToMerge=parents[1])
    later = [f"q{i}" for i in range(10)]
    _put(client, stream, later)
    more, _ = _drain(reader, offset)
    rows += more
    shards = [row[5] for row in rows]
    child = next(s for s in shards if s not in parents)
    assert max(i for i, s in enumerate(shards) if s in parents) < shards.index(child)
    assert set(_payloads(rows)) == set(first + later)  # moto copies merged records into the child: a superset


def test_a_shard_that_is_gone_fails_or_is_skipped_per_fail_on_data_loss(aws: PipelineConfig) -> None:
    client = _client(aws)
    stream = _stream(client)
    _put(client, stream, ["x"])
    checkpointed = {"batch": 3, "shards": {"shardId-000000000000": {"after": "1"}, "shardId-000000000007": {"after": "9"}}}
    failing = _reader(aws, stream, failOnDataLoss="true")
    failing.partitions(checkpointed, checkpointed)  # a restart: Spark says where the query was
    with pytest.raises(KinesisDataLoss, match="shardId-000000000007"):
        failing.latestOffset()
    _put(client, stream, ["y"])
    skipping = _reader(aws, stream, failOnDataLoss="false")
    skipping.partitions(checkpointed, checkpointed)
    end = skipping.latestOffset()
    assert _payloads(_batch(skipping, checkpointed, end)) == ["y"]
    assert "shardId-000000000007" not in end["shards"]


def test_sts_role_options_read_a_stream_of_another_account(aws: PipelineConfig) -> None:
    sts = boto3.client("sts", endpoint_url=aws.aws.endpoint_url, region_name=aws.aws.region,
                       aws_access_key_id="test", aws_secret_access_key="test")
    role = f"arn:aws:iam::{ROLE_ACCOUNT}:role/kinesis-reader"
    credentials = sts.assume_role(RoleArn=role, RoleSessionName="setup")["Credentials"]
    other = _client(aws, aws_access_key_id=credentials["AccessKeyId"],
                    aws_secret_access_key=credentials["SecretAccessKey"], aws_session_token=credentials["SessionToken"])
    stream = _stream(other)
    _put(other, stream, ["cross-account"])
    with pytest.raises(Exception, match="ResourceNotFound|not found"):
        _reader(aws, stream).initialOffset()  # the caller's own account has no such stream
    reader = _reader(aws, stream, stsRoleArn=role, stsSessionName="pipeline-test", stsEndpointUrl=aws.aws.endpoint_url)
    assert _payloads(_drain(reader, reader.initialOffset())[0]) == ["cross-account"]


# -- the sink ----------------------------------------------------------------------------------------------


def test_the_sink_writes_every_row_with_its_partition_key(aws: PipelineConfig, spark) -> None:
    from pipeline.sources.kinesis import register

    client = _client(aws)
    stream = _stream(client, shards=2)
    register(spark)
    rows = [(f"value-{i}", f"key-{i % 7}") for i in range(1200)]  # more than two PutRecords requests
    # one task: moto numbers a shard's records by max + 1 without a lock, so concurrent puts can overwrite
    (spark.createDataFrame(rows, "data string, partitionKey string").coalesce(1).write.format("aws-kinesis")
     .option("kinesis.streamName", stream).option("kinesis.endpointUrl", aws.aws.endpoint_url).mode("append").save())
    reader = _reader(aws, stream)
    read, _ = _drain(reader, reader.initialOffset())
    assert sorted((row[0].decode(), row[2]) for row in read) == sorted(rows)


def test_a_streaming_query_copies_one_stream_into_another(aws: PipelineConfig, spark, tmp_path) -> None:
    from pipeline.sources.kinesis import register

    client = _client(aws)
    source, target = _stream(client, shards=2), _stream(client)
    payloads = [f"s{i}" for i in range(60)]
    _put(client, source, payloads)
    register(spark)
    query = (spark.readStream.format("aws-kinesis").option("kinesis.streamName", source)
             .option("kinesis.endpointUrl", aws.aws.endpoint_url).option("kinesis.startingPosition", "TRIM_HORIZON")
             .option("kinesis.maxFetchRecordsPerShard", "20")
             .option("kinesis.metadataPath", str(tmp_path / "checkpoint")).load()
             .selectExpr("data", "partitionKey").writeStream.format("aws-kinesis")
             .option("kinesis.streamName", target).option("kinesis.endpointUrl", aws.aws.endpoint_url)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="1 second").start())
    reader = _reader(aws, target)
    offset, copied = reader.initialOffset(), []
    deadline = time.monotonic() + 300
    try:
        while len(copied) < len(payloads) and time.monotonic() < deadline and query.isActive:
            rows, offset = _drain(reader, offset)
            copied += _payloads(rows)
            query.awaitTermination(1.0)
    finally:
        query.stop()
    assert sorted(copied) == sorted(payloads)  # two batches or more (20 per shard), each row once


# -- the changelog stage over DMS-to-Kinesis ---------------------------------------------------------------


Landed = tuple[PipelineConfig, str, Summary, TruthStore]


def _simulated(aws: PipelineConfig, folder: Path) -> tuple[str, Summary, TruthStore]:
    """A simulated DMS source sent to a 2-shard stream of its own, its truth in `folder`."""
    prefix = f"kc{uuid.uuid4().hex[:6]}"
    truth = TruthStore(folder / "truth.db")
    options = SimulationOptions(format="dms-json", events=600, snapshot_rows=30, seed=13, topic_prefix=prefix,
                                duplicates=0.03, reorder=0.03, poison=0.02)
    summary = Simulation(options, KinesisTransport(aws.aws, shards=2), truth, None).run(progress=False)
    return prefix, summary, truth


def _killed(prefix: str, folder: Path, committer: dict[str, str], kills: int) -> None:
    """The stream landed by `kills` changelog stages, each SIGKILLed at a random point after its first batch
    (mid-batch or between batches); the checkpoint is in `folder`."""
    kinesis = {"streams": prefix, "max_fetch_records_per_shard": "100", "fetch_interval_ms": "0", **committer}
    settings = ["changelog.source=kinesis", *(f"kinesis.{key}={value}" for key, value in kinesis.items())]
    rng = random.Random(5)
    for _ in range(kills):
        stage = _StageProcess(prefix, folder / "checkpoint", settings=settings)
        stage.wait_for_batches(1, timeout_s=900)  # a deadline, not a measure: Spark starts slowly on a busy machine
        time.sleep(rng.uniform(0.0, 2.5))
        stage.kill()


def _resumed(aws: PipelineConfig, spark, folder: Path, prefix: str, committer: dict[str, str]) -> PipelineConfig:
    """The killed stages' checkpoint resumed until caught up, on the session's Spark: no third JVM to start."""
    cfg = _configure(aws, prefix)
    cfg = cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"source": "kinesis", "checkpoint": str(folder / "checkpoint")}),
        "kinesis": cfg.kinesis.model_copy(update={"streams": [prefix], "fetch_interval_ms": 0, **committer})})
    ChangelogStage(cfg, spark).run(until_caught_up=True)
    return cfg


@pytest.fixture(scope="module")
def killed(aws: PipelineConfig, spark, tmp_path_factory) -> dict[str, Landed]:
    """Each metadata committer's source killed, the two committers' stage processes side by side (their JVMs
    start and wait together), then each resumed; by committer. The default (HDFS) committer's is killed twice,
    a restart's own batch interrupted too; the DynamoDB committer's once, which its ends' store is about. The
    DynamoDB committer's table is new."""
    committers = {"hdfs": {}, "dynamodb": {"metadata_committer": "DYNAMODB",
                                           "dynamodb_table_name": f"meta{uuid.uuid4().hex[:8]}"}}
    kills = {"hdfs": 2, "dynamodb": 1}
    folders = {name: tmp_path_factory.mktemp(f"kinesis-{name}") for name in committers}
    sources = {name: _simulated(aws, folders[name]) for name in committers}  # the truth's SQLite stays here
    with ThreadPoolExecutor(len(committers)) as pool:
        list(pool.map(lambda name: _killed(sources[name][0], folders[name], committers[name], kills[name]), committers))
    landed: dict[str, Landed] = {}
    for name, (prefix, summary, truth) in sources.items():
        landed[name] = (_resumed(aws, spark, folders[name], prefix, committers[name]), prefix, summary, truth)
    return landed


@pytest.fixture(scope="module")
def landed(killed: dict[str, Landed]) -> Landed:
    """Landed with the default (HDFS) committer: its files in the stage's checkpoint."""
    return killed["hdfs"]


def _assert_every_record_once(spark, landed: Landed) -> None:
    cfg, prefix, summary, _ = landed
    poison = sum(n for kind, n in summary.faults.items() if kind.startswith("poison:"))
    tables = [_changelog(spark, cfg, f"{prefix}_{name}") for name in LANDED]
    positions = [(row["partition"], row["sequence"]) for table in tables
                 for row in table.select("_transport.partition", "_transport.sequence").collect()]
    assert len(positions) == summary.messages_acknowledged - poison  # duplicates sent are kept: each is a record
    assert len(set(positions)) == len(positions)  # no record twice despite the kills


def _changelog(spark, cfg: PipelineConfig, name: str):
    return spark.table(f"{cfg.catalog.name}.{cfg.changelog.namespace}.{name}")


SLOW = pytest.mark.timeout(1800)  # the shared setup starts four more Sparks; on a busy machine it outlasts 600 s


@SLOW
def test_a_killed_stage_lands_every_record_once(landed, spark) -> None:
    _assert_every_record_once(spark, landed)
    cfg, prefix, _, _ = landed
    assert any(Path(str(cfg.changelog.checkpoint), "kinesis-metadata", prefix).iterdir())  # the seed's default place


@SLOW
def test_a_killed_stage_with_the_dynamodb_committer_lands_every_record_once(killed, aws, spark) -> None:
    landed = killed["dynamodb"]
    _assert_every_record_once(spark, landed)
    cfg = landed[0]
    dynamodb = boto3.client("dynamodb", endpoint_url=aws.aws.endpoint_url, region_name=aws.aws.region)
    assert dynamodb.scan(TableName=cfg.kinesis.dynamodb_table_name)["Items"]  # the ends were recorded there
    assert not (Path(str(cfg.changelog.checkpoint)) / "kinesis-metadata").exists()  # not in the checkpoint


@SLOW
def test_malformed_records_go_to_dead_letters_with_their_position(landed, spark) -> None:
    cfg, prefix, summary, _ = landed
    dead = _changelog(spark, cfg, cfg.changelog.dead_letter_table).where(f"topic LIKE '{prefix}.%'").collect()
    assert len(dead) == sum(n for kind, n in summary.faults.items() if kind.startswith("poison:"))
    assert all(row["sequence"] and row["error_class"] == "WireFormatError" for row in dead)  # no registry asked


@SLOW
def test_transport_names_stream_shard_and_sequence_in_shard_order(landed, spark) -> None:
    from pyspark.sql import functions as F

    cfg, prefix, _, _ = landed
    rows = _changelog(spark, cfg, f"{prefix}_artists").select("_transport", "_seq").collect()
    assert {row["_transport"]["topic"] for row in rows} == {f"{prefix}.public.artists"}
    assert {row["_transport"]["partition"] for row in rows} <= {0, 1}
    by_shard = (_changelog(spark, cfg, f"{prefix}_artists")
                .select(F.col("_transport.partition").alias("shard"), F.col("_seq.transport_offset").alias("offset"),
                        F.col("_transport.sequence").cast("decimal(38,0)").alias("sequence"))
                .orderBy("shard", "offset").collect())
    for before, after in zip(by_shard, by_shard[1:]):
        if before["shard"] == after["shard"]:
            assert before["sequence"] < after["sequence"]  # ties between duplicates break by shard sequence


@SLOW
def test_the_mirror_of_a_kinesis_changelog_equals_the_truth(landed, spark) -> None:
    cfg, prefix, _, truth = landed
    tables = [f"{prefix}_{name}" for name in LANDED]
    MirrorStage(cfg, spark).run_once(tables)
    _assert_equal_to_truth(cfg, spark, truth, tables)


def test_a_batch_is_parsed_once_and_planned_and_decoded_from_that_parse(aws, spark) -> None:
    """The transport parses each record once (its table's name is read from the variant) and the landing plans
    and decodes the cached batch from that variant: parsing the text again for each step cost about a second
    per 200k records, and Spark copied the parse into every filter and field that used it."""
    import json
    from datetime import datetime, timezone

    from cdc import decode
    from pipeline.sources.kinesis.schema import SCHEMA
    from pipeline.stages.changelog.landing import Landing
    from pipeline.stages.changelog.transports.kinesis import kafka_shaped

    record = {"data": {"id": 7, "name": "x"}, "metadata": {
        "timestamp": "2024-01-02T03:04:05.000000Z", "record-type": "data", "operation": "insert",
        "schema-name": "shop", "table-name": "orders", "transaction-id": 1, "transaction-record-id": 1}}
    now = datetime.now(timezone.utc)
    rows = spark.createDataFrame([(json.dumps(record).encode(), "st", "k", "1", now, "shardId-000000000001"),
                                  (b"not json", "st", "shop.orders.8", "2", now, "shardId-000000000001")], SCHEMA)
    landing = Landing(aws, spark)
    cached = landing._classified(kafka_shaped(rows, 0), registry_frames=False).persist()
    try:
        plan = landing._plan(cached)
        assert set(plan) == {"st.shop.orders"}  # from the record's metadata, and the other's partition key
        assert plan["st.shop.orders"].row_type == "OBJECT<id: BIGINT, name: STRING>"
        decoded = decode.dms_json(cached.where("kind = 'json'"), plan["st.shop.orders"].row_type)
        assert [row["v"]["data"]["id"] for row in decoded.where(decode.VALID).collect()] == [7]
        # the cached rows' plan (printed below the scan of the cache) parses; the decode above it does not
        above, cache = decoded._jdf.queryExecution().executedPlan().toString().split("InMemoryRelation", 1)
        assert "parseJson" in cache and "parseJson" not in above
    finally:
        cached.unpersist()


def test_a_lone_learned_table_is_landed_by_the_job_that_reads_the_batch(aws, spark) -> None:
    """With one learned table nothing reads the batch again, so it is not cached: Spark's adaptive execution
    turns a cache in a write's plan into a job of its own that reads the whole batch first, and the read and
    the landing ran one after the other. With a second learned table, its append reads the first one's cache."""
    import json
    from datetime import datetime, timezone

    from pipeline.sources.kinesis.schema import SCHEMA
    from pipeline.stages.changelog.landing import Landing
    from pipeline.stages.changelog.report import BatchReport
    from pipeline.stages.changelog.transports.kinesis import kafka_shaped

    stream, now = f"lone{uuid.uuid4().hex[:6]}", datetime.now(timezone.utc)

    def record(table: str, n: int) -> tuple:
        return (json.dumps(_record(table, {"id": n}, n)).encode(), stream, f"shop.{table}.{n}", str(n), now,
                "shardId-000000000001")

    rows = spark.createDataFrame([record("orders", n) for n in range(3)] + [record("items", n) for n in range(2)],
                                 SCHEMA)
    landing, append, cached = Landing(aws, spark), Landing.append, {}

    def recording(self, frame, name, report, *args, **kwargs):
        cached[name] = "InMemoryRelation" in frame._jdf.queryExecution().withCachedData().toString()
        return append(self, frame, name, report, *args, **kwargs)

    with mock.patch.object(Landing, "append", recording):
        one = {f"{stream}.shop.orders": "OBJECT<id: BIGINT>"}
        seen = landing.land_learned(kafka_shaped(rows, 0), one, BatchReport(0, writer="lone"))
        assert seen.landed == {f"{stream}.shop.orders": 3} and cached[f"{stream}_orders"] is False
        assert set(seen.rest) == {f"{stream}.shop.items"}  # read again from the source, then planned
        two = {**one, f"{stream}.shop.items": "OBJECT<id: BIGINT>"}
        cached.clear()
        seen = landing.land_learned(kafka_shaped(rows, 1), two, BatchReport(1, writer="lone"))
        assert seen.landed == {f"{stream}.shop.orders": 3, f"{stream}.shop.items": 2} and all(cached.values())
    assert spark.table(f"{aws.catalog.name}.{aws.changelog.namespace}.{stream}_orders").count() == 6


def test_records_of_shapes_known_to_fit_skip_the_check_and_new_ones_are_learned(aws, spark, tmp_path) -> None:
    """A batch returns the shapes of the records that fit their learned type and were not known; the next batch
    lets records of those shapes through without the check (here, a check that refuses everything), and lands
    the same rows. The transport records them with the row types, and drops those of a type that changed."""
    import json
    from datetime import datetime, timezone

    from pyspark.sql import functions as F

    from cdc import decode
    from pipeline.stages.changelog.landing import Landing, Learned, TopicPlan
    from pipeline.stages.changelog.report import BatchReport
    from pipeline.sources.kinesis.schema import SCHEMA
    from pipeline.stages.changelog.transports.kinesis import Recorded, RowTypes, kafka_shaped

    stream, now = f"shape{uuid.uuid4().hex[:6]}", datetime.now(timezone.utc)
    orders, items = f"{stream}.shop.orders", f"{stream}.shop.items"
    data = [("orders", {"id": 1}), ("orders", {"id": 2}), ("orders", {"id": 3, "x": 1}), ("items", {"id": 4})]
    texts = [json.dumps(_record(table, values, n)) for n, (table, values) in enumerate(data)]
    rows = spark.createDataFrame([(text.encode(), stream, f"shop.{table}.{n}", str(n), now, "shardId-000000000001")
                                  for n, (text, (table, _)) in enumerate(zip(texts, data))], SCHEMA)
    shapes = [row[0] for row in spark.createDataFrame([(t,) for t in texts], "t string")
              .select(decode.row_shape(decode.parsed_json(F.col("t")))).collect()]
    landing, row_types = Landing(aws, spark), {orders: "OBJECT<id: BIGINT>", items: "OBJECT<id: BIGINT>"}

    seen = landing.land_learned(kafka_shaped(rows, 0), row_types, BatchReport(0, writer="shapes"))
    assert seen.landed == {orders: 2, items: 1} and set(seen.rest) == {orders}  # the new key, planned
    assert seen.shapes == {orders: [shapes[0]], items: [shapes[3]]}  # the records of ids 1 and 2 share a shape
    with mock.patch.object(decode, "fits", lambda shape, row_type: F.lit(False)):
        again = landing.land_learned(kafka_shaped(rows, 1), row_types, BatchReport(1, writer="shapes"), seen.shapes)
    assert again.landed == seen.landed and set(again.rest) == {orders} and again.shapes == {}

    learned = RowTypes(str(tmp_path), aws.names.rule())
    widened = TopicPlan(items, json_rows=1, row_type="OBJECT<id: BIGINT, n: STRING>")
    learned.learn(spark, 1, Recorded(row_types, decode.FIT_RULE, {orders: ["known"]}),
                  Learned(again.landed, {items: widened}, {orders: [shapes[0]], items: [shapes[3]]}))
    recorded = learned.of(spark, 2)
    assert recorded.row_types[items] == "OBJECT<id: BIGINT, n: STRING>"
    assert recorded.shapes == {orders: ["known", shapes[0]]}  # the items' shape was found for their old type


def _record(table: str, data: dict, n: int) -> dict:
    """A DMS JSON insert into `shop.<table>`."""
    return {"data": data, "metadata": {
        "timestamp": "2024-01-02T03:04:05.000000Z", "record-type": "data", "operation": "insert",
        "partition-key-type": "primary-key", "schema-name": "shop", "table-name": table, "transaction-id": n,
        "transaction-record-id": n}}


def _dms(table: str, data: dict, n: int) -> dict:
    """A DMS JSON insert into `shop.<table>`, keyed as DMS keys it, for `put_records`."""
    import json

    return {"PartitionKey": f"shop.{table}.{n}", "Data": json.dumps(_record(table, data, n)).encode()}


def _stage_cfg(aws: PipelineConfig, stream: str, checkpoint: Path) -> PipelineConfig:
    return aws.model_copy(update={
        "changelog": aws.changelog.model_copy(update={"source": "kinesis", "checkpoint": str(checkpoint),
                                                      "max_restarts": 0}),
        "kinesis": aws.kinesis.model_copy(update={"streams": [stream], "fetch_interval_ms": 0})})


def test_learned_row_types_land_as_read_and_a_new_shape_after_them_each_record_once(aws, spark, tmp_path) -> None:
    """A batch whose tables earlier batches learned is decoded and appended as it is read; a record those row
    types do not cover exactly (a new key, a new table) is landed after them, the
    planned way, under a writer id of its own. A failure between the two appends replays the batch, split as
    its first attempt split it: every record lands once."""
    from pyspark.errors import StreamingQueryException

    from pipeline.stages.changelog.landing import Landing
    from pipeline.stages.changelog.transports.kinesis import RowTypes

    client = _client(aws)
    stream = _stream(client, shards=2)
    checkpoint = tmp_path / "checkpoint"
    cfg = _stage_cfg(aws, stream, checkpoint)
    client.put_records(StreamName=stream, Records=[_dms("items", {"id": i, "name": f"n{i}"}, i) for i in range(20)])
    ChangelogStage(cfg, spark).run(until_caught_up=True)  # nothing learned yet: planned, and learned
    known = [_dms("items", {"id": i, "name": f"n{i}"}, i) for i in range(20, 30)]
    shapes = [_dms("items", {"id": 30, "name": "n30", "color": "red"}, 30),  # a new key
              *(_dms("tags", {"tag": f"t{i}"}, i) for i in range(5))]  # a new table
    client.put_records(StreamName=stream, Records=known + shapes)

    planned, failed = Landing._planned, []

    def fail_before_the_rest(landing, rows, report, plans=None):
        if report.writer.endswith("+rest") and not failed:
            failed.append(report.batch_id)
            raise RuntimeError("killed between the appends")
        return planned(landing, rows, report, plans)

    with mock.patch.object(Landing, "_planned", fail_before_the_rest), pytest.raises(StreamingQueryException):
        ChangelogStage(cfg, spark).run(until_caught_up=True)
    ChangelogStage(cfg, spark).run(until_caught_up=True)  # a new stage replays the batch

    table = f"{cfg.catalog.name}.{cfg.changelog.namespace}"
    items = spark.table(f"{table}.{stream}_items")
    rows = {row["id"]: row for row in items.select("id", "name", "color", "_transport.sequence").collect()}
    assert len(rows) == items.count() == 31  # each record once
    assert rows[30]["color"] == "red" and rows[29]["name"] == "n29" and rows[29]["color"] is None
    assert sorted(row["tag"] for row in spark.table(f"{table}.{stream}_tags").collect()) == [f"t{i}" for i in range(5)]
    commits = {row["commit"] for row in spark.sql(f"SELECT summary['pipeline.commit'] AS commit "
                                                 f"FROM {table}.{stream}_items.snapshots").collect()}
    writer = ChangelogStage(cfg, spark)._query_id()
    assert {f"{writer}:0", f"{writer}:{failed[0]}", f"{writer}+rest:{failed[0]}"} <= commits
    assert len(commits) == 3  # the replay appended nothing twice
    learned = RowTypes(str(checkpoint), cfg.names.rule()).of(spark, failed[0] + 1).row_types
    assert learned[f"{stream}.shop.items"] == "OBJECT<color: STRING, id: BIGINT, name: STRING>"
    assert learned[f"{stream}.shop.tags"] == "OBJECT<tag: STRING>"


def _recorded_by_an_earlier_version(checkpoint: Path) -> tuple[int, Path, str]:
    """The row types recorded for the next batch, rewritten as a version from before fit rules had a number
    wrote them; returns the batch, the record's file and its text as this version wrote it."""
    import json

    record = max((checkpoint / "kinesis-row-types").glob("[01]"), key=lambda f: json.loads(f.read_text())["batch"])
    text = record.read_text()
    earlier = {key: value for key, value in json.loads(text).items() if key != "fit_rule"}
    _rewrite(record, json.dumps(earlier))
    return earlier["batch"], record, text


def _rewrite(record: Path, text: str) -> None:
    """A checkpoint file written anew, without the checksum file Hadoop's local file system keeps beside it."""
    record.write_text(text)
    record.with_name(f".{record.name}.crc").unlink(missing_ok=True)


def test_a_batch_half_landed_by_a_version_of_another_fit_rule_stops_the_stage(aws, spark, tmp_path) -> None:
    """A version whose fit rule differs could split a half-landed batch otherwise, landing a record twice or
    never: the stage stops, naming the batch and the tables that hold part of it; the version that half landed
    it (its record put back) then lands the rest once. A batch nothing of which has landed lands whatever rule
    recorded its row types."""
    from pipeline.stages.changelog.errors import StageError
    from pipeline.stages.changelog.landing import Landing

    client = _client(aws)
    stream = _stream(client, shards=1)
    checkpoint = tmp_path / "checkpoint"
    cfg = _stage_cfg(aws, stream, checkpoint)
    planned = Landing._planned

    def fail_before_the_rest(landing, rows, report, plans=None):
        if report.writer.endswith("+rest"):
            raise RuntimeError("killed between the appends")
        return planned(landing, rows, report, plans)

    def half_land(first: int) -> None:
        """Ten items and a record of a new table (the rest), of which the items land and the other does not."""
        client.put_records(StreamName=stream, Records=[*(_dms("items", {"id": i, "name": f"n{i}"}, i)
                                                         for i in range(first, first + 10)),
                                                       _dms(f"tags{first}", {"tag": f"t{first}"}, first + 10)])
        with mock.patch.object(Landing, "_planned", fail_before_the_rest), \
                pytest.raises(Exception, match="killed between the appends"):
            ChangelogStage(cfg, spark).run(until_caught_up=True)

    client.put_records(StreamName=stream, Records=[_dms("items", {"id": i, "name": f"n{i}"}, i) for i in range(10)])
    ChangelogStage(cfg, spark).run(until_caught_up=True)  # planned, and learned
    _recorded_by_an_earlier_version(checkpoint)  # nothing of the next batch is landed: it lands with this rule
    half_land(10)
    ChangelogStage(cfg, spark).run(until_caught_up=True)  # so its replay splits it as this version did

    half_land(20)
    batch, record, text = _recorded_by_an_earlier_version(checkpoint)  # as if an earlier version half landed it
    with pytest.raises(StageError, match=rf"batch {batch} was partly landed \(in {stream}_items\) .*fit rule 0"):
        ChangelogStage(cfg, spark).run(until_caught_up=True)

    _rewrite(record, text)  # the version that half landed it
    ChangelogStage(cfg, spark).run(until_caught_up=True)
    table = f"{cfg.catalog.name}.{cfg.changelog.namespace}"
    items = spark.table(f"{table}.{stream}_items")
    assert items.count() == items.select("id").distinct().count() == 30
    for first in (10, 20):
        assert [row["tag"] for row in spark.table(f"{table}.{stream}_tags{first}").collect()] == [f"t{first}"]


def test_a_value_the_learned_type_would_cast_does_not_fit_it(spark) -> None:
    """Spark prints each record's `data` type as the learned types' patterns expect (tests/unit/
    test_dms_row_types.py): `try_variant_get` would land 1.5 as 1 and "12" as 12 in a BIGINT, so neither fits."""
    from pyspark.sql import functions as F

    from cdc import decode

    values = ['{"data": {"id": 1.5}}', '{"data": {"id": "12"}}', '{"data": {"id": true}}', '{"data": {"id": 7, "n": null}}',
              '{"data": {"id": 7, "x": 1}}', '{"data": 3}', '{"metadata": {}}', 'not json']
    shapes = spark.createDataFrame([(v,) for v in values], "v string").select(
        decode.fits(decode.row_shape(decode.parsed_json(F.col("v"))), "OBJECT<id: BIGINT, n: STRING>").alias("fits"))
    assert [row["fits"] for row in shapes.collect()] == [False, False, False, True, False, False, False, False]


def test_records_that_fit_a_learned_type_decode_from_their_text_as_from_their_variant(spark) -> None:
    """`decode.dms_json_fitting` (one `from_json`) gives every record that `decode.fits` exactly what
    `decode.dms_json` (`try_variant_get`) gives it, value for value and validity, with escapes, extreme and
    negative-zero numbers, nulls, absent keys and metadata fields of their own; records whose values the two
    could decode differently do not fit. Each record is parsed once by the `from_json` decode."""
    import json

    from pyspark.sql import functions as F

    from cdc import decode

    row_type = "OBJECT<amount: DECIMAL(6,2), flag: BOOLEAN, id: BIGINT, name: STRING, rate: DOUBLE, `x-y`: BIGINT>"
    meta = {"timestamp": "2024-01-02T03:04:05.000000Z", "record-type": "data", "operation": "update",
            "partition-key-type": "primary-key", "schema-name": "shop", "table-name": "t", "transaction-id": 9,
            "transaction-record-id": 3}
    fitting = [
        {"data": {"amount": 1234.56, "flag": True, "id": 1, "name": "n", "rate": 0.5, "x-y": 2}, "metadata": meta},
        {"data": {"name": "a\"b\\c\u00e9\n\t\U0001F600 \u0000", "id": -9223372036854775808}, "metadata": meta},
        {"data": {"id": 9223372036854775807, "amount": -0.01, "rate": -0.0}, "metadata": meta},
        {"data": {"amount": 12.5, "rate": 0.12345678901234567}, "metadata": meta},
        {"data": {"amount": -0.0, "rate": 12345678901234567, "flag": False}, "metadata": meta},
        {"data": {"rate": 1e-5, "amount": 0.1}, "metadata": meta},
        {"data": {"amount": None, "flag": None, "id": None, "name": None, "rate": None, "x-y": None}, "metadata": meta},
        {"data": {}, "metadata": meta},
        {"data": {"id": 2}, "metadata": {**meta, "prev-transaction-id": 8, "commit-timestamp": "x", "z": 1.5}},
        # no transaction details (IncludeTransactionDetails is off by default): valid
        {"data": {"id": 3}, "metadata": {"operation": "insert", "timestamp": "2024-01-02T03:04:05Z"}},
        {"data": {"id": 4}, "metadata": {**meta, "operation": "bogus", "transaction-id": None}},
        {"data": {"id": 5}, "metadata": {**meta, "timestamp": "not a time"}},
        {"data": {"id": 6}},  # no metadata
    ]
    other = [
        {"data": {"id": 1.5}, "metadata": meta},  # 1 into the BIGINT
        {"data": {"id": "12"}, "metadata": meta},  # 12
        {"data": {"name": 12}, "metadata": meta},  # "12"
        {"data": {"amount": 0.125}, "metadata": meta},  # 0.13
        {"data": {"id": 1}, "metadata": {**meta, "operation": 1}},  # "1"
        {"data": {"id": 1}, "metadata": {**meta, "transaction-record-id": "3"}},  # 3
        {"data": {"id": 1}, "metadata": {**meta, "extra": {"a": 1}}},  # a field of no scalar type
        {"data": {"id": 1}, "metadata": meta, "before-image": {"id": 0}},  # a key beside data and metadata
        {"data": None, "metadata": meta},
    ]
    texts = [json.dumps(record) for record in fitting + other] + ['{"data": {"id": 1}, "data": {"id": 2}}']
    rows = (spark.createDataFrame(list(enumerate(texts)), "i int, value string")
            .withColumn(decode.PARSED, decode.parsed_json(F.col("value"))))
    fits = {row["i"] for row in rows.where(decode.fits(decode.row_shape(F.col(decode.PARSED)), row_type)).collect()}
    assert fits == set(range(len(fitting)))
    fitted = rows.where(F.col("i").isin(*fits))

    def decoded(frame) -> dict[int, str]:
        return {row["i"]: repr(row.asDict(recursive=True)) for row in frame.select("i", "v", decode.VALID).collect()}

    by_text = decode.dms_json_fitting(fitted, row_type)
    assert decoded(by_text) == decoded(decode.dms_json(fitted, row_type))
    assert by_text.where(decode.VALID).count() == len(fitting) - 3  # a bogus operation, a bad time, no metadata
    assert by_text._jdf.queryExecution().optimizedPlan().toString().count("from_json") == 1


@pytest.mark.usefixtures("compiling")  # it reads the code Spark generates
def test_every_batch_reads_its_shards_with_the_same_generated_code(spark) -> None:
    """The batch's first offset is joined, not a literal: Spark writes literals into the Java it generates, so
    with `batch id << 32` in the projection every batch's read, parse and fit check were new code for Janino to
    compile and the JIT to compile again. Only the one-row frame's code differs between batches."""
    from pyspark.sql import functions as F

    from pipeline.stages.changelog.transports.kinesis import kafka_shaped

    rows = spark.range(3, numPartitions=1).select(  # not a local relation, which Spark would fold
        F.lit('{"data": {"id": 1}}').cast("binary").alias("data"), F.lit("st").alias("streamName"),
        F.lit("shop.t.1").alias("partitionKey"), F.col("id").cast("string").alias("sequenceNumber"),
        F.timestamp_seconds("id").alias("approximateArrivalTimestamp"), F.lit("shardId-000000000002").alias("shardId"))

    def code(batch_id: int) -> tuple[list[int], str]:
        frame = kafka_shaped(rows, batch_id)
        offsets = [row["offset"] for row in frame.collect()]  # the broadcast makes the plan adaptive: run it
        found = frame._jdf.queryExecution().debug().codegenToSeq()
        return offsets, max((found.apply(i)._2() for i in range(found.size())), key=len)

    (first, first_code), (second, second_code) = code(0), code(1)
    assert first == [1, 2, 3] and second == [(1 << 32) + 1, (1 << 32) + 2, (1 << 32) + 3]
    assert first_code == second_code
