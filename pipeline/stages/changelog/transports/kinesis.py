"""Kinesis: AWS DMS's Kinesis target, DMS JSON records of every table of a task in one stream per task.

DMS writes one stream per task (a source database), every table into it, keyed by primary key. A batch is put
in the shape the stage reads Kafka records in (`kafka_shaped`) and landed the planned way, with no registry:
the Kafka-like topic is `<stream>.<schema>.<table>`, the table named by a record's DMS metadata (`schema-name`,
`table-name`, as DMS JSON is routed on any transport: `cdc/dms_tables.py`), else by a `<schema>.<table>.<key>`
partition key (what the simulator writes, so undecodable records still reach their table's dead letters). The shard's number is the
partition; the offset is `batch id << 32 | position in the shard's batch`, ascending with the shard's sequence
numbers and the same when a batch is replayed: the source reads each shard into an input partition of its own,
in sequence order, and a replay reads the same records, so the position is the row's place in its partition
(no shuffle to number them). The sequence number itself rides along in `sequence` (into `_transport`).
`aws-kinesis` is a Python source, which has no available-now trigger in Spark 4.1: a run until caught up runs
back-to-back batches and stops once a trigger finds nothing new.

A stream's tables keep their row types from batch to batch, so a batch is landed with the types earlier batches
found (`Landing.land_learned`): the job that reads the shards decodes and appends the first table as it reads,
and only what those types do not cover is planned afterwards. Which types a batch lands with is recorded in the
checkpoint before it lands (`RowTypes`), so that a replay splits its records exactly as the first attempt did.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cdc import decode, dms_tables
from pipeline.stages.changelog.errors import StageError
from pipeline.stages.changelog.transports import NO_DATA_PROGRESS_INTERVAL, Outage, found_nothing_new
from pipeline.config.settings import AwsSettings, PipelineConfig
from pipeline.sources.kinesis.client import Kinesis, KinesisUnavailable
from pipeline.sources.kinesis.options import ClientOptions
from pipeline.runtime.hadoop_files import read_text, write_text
from tables.names import LakeNames, UnmappableName

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.stages.changelog.landing import Landing, Learned
    from pipeline.stages.changelog.report import BatchReport

SEQUENCE = "sequence"
_ROW_BITS = 32


class StreamMissing(StageError):
    """A configured stream does not exist; names it and where it was looked for."""


def client_options_for(aws: AwsSettings) -> ClientOptions:
    """The pipeline's own clients (not Spark's workers, which get the keys through the environment)."""
    keys = ((aws.access_key_id.get_secret_value(), aws.secret_access_key.get_secret_value())
            if aws.access_key_id and aws.secret_access_key else None)
    return ClientOptions(endpoint_url=aws.endpoint_url or None, region=aws.region, keys=keys)


def client_options(cfg: PipelineConfig) -> ClientOptions:
    settings = cfg.kinesis
    return replace(client_options_for(cfg.aws), sts_role_arn=settings.sts_role_arn,
                   sts_session_name=settings.sts_session_name,
                   sts_endpoint_url=settings.sts_endpoint_url or cfg.aws.endpoint_url or None)


def check_streams(cfg: PipelineConfig) -> None:
    """Fail before a query starts when Kinesis does not answer (KinesisUnavailable) or a stream is missing."""
    kinesis = Kinesis(client_options(cfg))
    for stream in cfg.kinesis.streams:
        try:
            kinesis.call("describe_stream_summary", StreamName=stream)
        except kinesis.client.exceptions.ResourceNotFoundException:
            raise StreamMissing(f"Kinesis stream {stream!r} does not exist at {kinesis.address}: create it, or "
                                "fix kinesis.streams") from None


def source_options(cfg: PipelineConfig, stream: str) -> dict[str, str]:
    """The stream's `aws-kinesis` options; the metadata committer's files go to the stage's checkpoint by default
    (the seed's default; the source itself is not told the checkpoint), through `aws.endpoint_url`."""
    settings, client = cfg.kinesis, client_options(cfg)
    options = {"streamName": stream, "region": client.region, "startingPosition": settings.starting_position,
               "maxFetchRecordsPerShard": str(settings.max_fetch_records_per_shard),
               "getRecords.fetchIntervalMs": str(settings.fetch_interval_ms),
               "failOnDataLoss": str(settings.fail_on_data_loss).lower(),
               "metadataCommitterType": settings.metadata_committer,
               **{name: value for name, value in (("endpointUrl", client.endpoint_url),
                                                  ("stsRoleArn", client.sts_role_arn),
                                                  ("stsSessionName", client.sts_session_name),
                                                  ("stsEndpointUrl", client.sts_endpoint_url),
                                                  ("metadataEndpointUrl", client.endpoint_url),
                                                  ("metadataPath", settings.metadata_path or cfg.changelog.checkpoint),
                                                  ("dynamodb.tableName", settings.dynamodb_table_name)) if value},
               **settings.options}
    return {f"kinesis.{name}": value for name, value in options.items()}


def read(spark: SparkSession, cfg: PipelineConfig) -> DataFrame:
    """One `aws-kinesis` stream per configured stream, unioned."""
    from pipeline.sources.kinesis import register

    register(spark)
    streams = [spark.readStream.format("aws-kinesis").options(**source_options(cfg, stream)).load()
               for stream in cfg.kinesis.streams]
    return functools.reduce(lambda a, b: a.unionByName(b), streams)


def kafka_shaped(batch: DataFrame, batch_id: int) -> DataFrame:
    """key, value, topic, partition, offset, timestamp (as the Kafka source has them), and `sequence`."""
    from pyspark.sql import functions as F

    # the record is parsed once: its table's name is read from the variant, which the landing keeps (with the
    # batch's rows, cached) to plan and decode the batch; a record that is not JSON has none
    parsed = decode.parsed_json(F.col("data"))
    key_parts = F.split(F.col("partitionKey"), r"\.", 3)
    from_key = F.when(F.size(key_parts) == 3, F.concat(key_parts[0], F.lit("."), key_parts[1]))
    # the low bits of the id count the rows of its input partition: one shard, read in order
    in_shard = (F.monotonically_increasing_id().bitwiseAND((1 << _ROW_BITS) - 1) + 1)
    # the batch's first offset is joined from a broadcast one-row frame, not a literal: Spark writes a literal
    # into the Java it generates, so each batch's read, parse and fit check were new code that Janino compiled
    # and the JIT compiled again from the interpreter up (as `landing.stamped` explains for `_batch_id`). It is
    # the range's value, not a literal column, which the optimiser would carry through the join into the sum.
    start = batch_id << _ROW_BITS
    first = batch.sparkSession.range(start, start + 1, numPartitions=1).withColumnRenamed("id", "_first")
    return batch.withColumn("_in_shard", in_shard).crossJoin(F.broadcast(first)).select(
        F.col("partitionKey").cast("binary").alias("key"),
        F.col("data").alias("value"),
        # no table in the key or the metadata: `<stream>..`, a NoTableName dead letter (tables/names.py), never a
        # table `<stream>_<stream>`
        dms_tables.routed_topic(F.concat("streamName", F.lit("."), F.coalesce(from_key, F.lit("."))), parsed)
        .alias("topic"),
        F.regexp_extract("shardId", r"(\d+)$", 1).cast("int").alias("partition"),
        (F.col("_first") + F.col("_in_shard")).cast("long").alias("offset"),
        F.col("approximateArrivalTimestamp").alias("timestamp"),
        F.col("sequenceNumber").alias(SEQUENCE),
        parsed.alias(decode.PARSED),
    )


MAX_SHAPES = 64  # the known record shapes recorded per topic


@dataclass(frozen=True)
class Recorded:
    """What `RowTypes` recorded for a batch: its row types, the rule that decides which records fit them, and the
    record shapes that earlier batches found to fit them (`Landing.land_learned`)."""

    row_types: dict[str, str]
    fit_rule: int  # `decode.FIT_RULE` of the version that recorded them (0: a version from before the number)
    shapes: dict[str, list[str]] = field(default_factory=dict)


class RowTypes:
    """The DMS row types a batch lands with (topic -> type, the topic seen most in the batch before first),
    recorded in the checkpoint through Hadoop's file system (`<checkpoint>/kinesis-row-types/<batch id % 2>`),
    with the fit rule (`decode.FIT_RULE`) of the version that recorded them and the record shapes known to fit
    each type (up to `MAX_SHAPES` a topic; which records fit does not depend on them, only how fast it is found).

    A batch replayed after a crash must split its records as its first attempt did: the appends of what lands
    with the learned types and of the rest are each idempotent per (writer id, batch id), so a different split
    would land a record twice, or never. Batch N's record is written once batch N-1 has landed (before Spark
    commits N-1), and every attempt of N reads it; its slot is next written once N+1 has landed, after Spark
    committed N, which is then never replayed. A batch with no record (a new checkpoint, or one from before
    the stage learned row types) lands the planned way, as before.
    """

    FOLDER = "kinesis-row-types"

    def __init__(self, checkpoint: str, names: LakeNames) -> None:
        self.folder = f"{checkpoint}/{self.FOLDER}"
        self.names = names  # a topic whose name names no lake table is not learned

    def of(self, spark: SparkSession, batch_id: int) -> Recorded:
        text = read_text(spark, f"{self.folder}/{batch_id % 2}")
        record = json.loads(text) if text else {}
        if record.get("batch") != batch_id:
            return Recorded({}, decode.FIT_RULE)
        return Recorded(dict(record.get("row_types", [])), int(record.get("fit_rule", 0)),
                        dict(record.get("shapes", [])))

    def learn(self, spark: SparkSession, batch_id: int, used: Recorded, seen: Learned) -> None:
        """Record the next batch's row types: those `batch_id` landed with, merged with what its rest's plan
        found (a table whose types do not merge into a learnable one is planned again, and learned anew), and
        the shapes known to fit them (those of a type that changed are dropped: they were found for the old one)."""
        row_types, rows = dict(used.row_types), dict(seen.landed)
        for topic, plan in seen.rest.items():
            rows[topic] = rows.get(topic, 0) + plan.json_rows
            if not plan.json_rows or plan.row_type in (None, "VOID") or not self._names_a_table(topic):
                continue
            merged = decode.merged_row_type(row_types[topic], plan.row_type) if topic in row_types else plan.row_type
            if merged is not None and decode.learnable(merged):
                row_types[topic] = merged
            else:
                row_types.pop(topic, None)
        ordered = sorted(row_types.items(), key=lambda item: (-rows.get(item[0], 0), item[0]))
        shapes = {topic: _known(used.shapes.get(topic, []), seen.shapes.get(topic, []))
                  for topic, row_type in ordered if used.row_types.get(topic) == row_type}
        self.record(spark, batch_id + 1, Recorded(dict(ordered), decode.FIT_RULE,
                                                  {topic: known for topic, known in shapes.items() if known}))

    def record(self, spark: SparkSession, batch_id: int, recorded: Recorded) -> None:
        """Record the row types `batch_id` lands with (in their order) and their known shapes, under this
        version's fit rule."""
        write_text(spark, f"{self.folder}/{batch_id % 2}", json.dumps({"batch": batch_id,
                                                                        "row_types": list(recorded.row_types.items()),
                                                                        "fit_rule": decode.FIT_RULE,
                                                                        "shapes": list(recorded.shapes.items())}))

    def _names_a_table(self, topic: str) -> bool:
        try:
            self.names.of_topic(topic)
        except UnmappableName:
            return False
        return True


def _known(known: list[str], found: list[str]) -> list[str]:
    """The known shapes, then those found that were not, up to `MAX_SHAPES`."""
    return [*known, *sorted(set(found) - set(known))][:MAX_SHAPES]


def refuse_half_landed(landing: Landing, report: BatchReport, fit_rule: int) -> None:
    """Stop when an earlier version, which chose the records that fit learned row types by another rule,
    landed part of this batch: this version would split the batch otherwise, and land some records twice
    or never. A batch of which nothing landed yet lands with this version's rule."""
    held = landing.holding(report)
    if held:
        raise StageError(
            f"batch {report.batch_id} was partly landed (in {', '.join(held)}) by an earlier version that chose "
            f"the records landed with learned row types by another rule (fit rule {fit_rule}; this version's is "
            f"{decode.FIT_RULE}), so this version could land some of its records twice or never: start the "
            f"earlier version on this checkpoint until it has committed batch {report.batch_id} (SIGTERM stops "
            "it once its batch is done), then this one")


class KinesisTransport:
    def __init__(self, cfg: PipelineConfig) -> None:
        if not cfg.kinesis.streams:
            raise StageError("no Kinesis streams to read: set kinesis.streams (e.g. --set kinesis.streams=moma)")
        self.cfg = cfg
        self.row_types = RowTypes(str(cfg.changelog.checkpoint), cfg.names.rule())

    def subscription(self) -> dict[str, str | None]:
        return {"kinesis_streams": ",".join(self.cfg.kinesis.streams)}

    def check(self) -> None:
        check_streams(self.cfg)

    def outage(self) -> Outage | None:
        try:
            check_streams(self.cfg)
        except KinesisUnavailable as exc:
            return Outage("kinesis", str(self.cfg.aws.endpoint_url), str(exc))
        return None

    def open(self, spark: SparkSession) -> DataFrame:
        return read(spark, self.cfg)

    def trigger(self, until_caught_up: bool) -> dict[str, Any]:
        return {"processingTime": "0 seconds" if until_caught_up else self.cfg.changelog.trigger_interval}

    def query_conf(self, until_caught_up: bool) -> dict[str, str]:
        return {NO_DATA_PROGRESS_INTERVAL: "0"} if until_caught_up else {}

    def drained(self, query: StreamingQuery) -> bool:
        """The last finished trigger asked every shard for a record after its position and found none."""
        return found_nothing_new(query)

    def land(self, landing: Landing, batch: DataFrame, report: BatchReport) -> None:
        recorded = self.row_types.of(landing.spark, report.batch_id)
        if recorded.row_types and recorded.fit_rule != decode.FIT_RULE:
            refuse_half_landed(landing, report, recorded.fit_rule)
            # nothing of it landed: it lands under this version's rule, which its replays must know (shapes found
            # under another rule are not kept)
            recorded = Recorded(recorded.row_types, decode.FIT_RULE)
            self.row_types.record(landing.spark, report.batch_id, recorded)
        seen = landing.land_learned(kafka_shaped(batch, report.batch_id), recorded.row_types, report,
                                    recorded.shapes)
        self.row_types.learn(landing.spark, report.batch_id, recorded, seen)

    def replay(self, landing: Landing, letters: DataFrame, report: BatchReport) -> None:
        landing.land(letters, report, store_dead_letters=False, registry_frames=False)
