"""S3-SQS: AWS DMS's S3 target files (CSV or Parquet), announced by S3 event notifications on an SQS queue.

One pass: the `s3-sqs` source (`pipeline/sources/s3sqs`, `rowFormat=files`) hands over each batch's file list and
reads no file; the list names each file's table (DMS's folder layout), so each table's files are read once, by
Spark's own Parquet or CSV reader over the files alone (`cdc/dms_files.py`: row types from the footers or
headers, file and row from Spark's `_metadata`), decoded into the DMS shape and by `cdc/normalize.py` into the
canonical change record as they are read, and appended; nothing is cached or scanned to plan. A file announced
but gone, or unreadable, is a dead letter naming its object (`MissingDmsFile`, `UnreadableDmsFile`), counted
against the dead-letter bound like any other. `mirror` and
`verify` work unchanged. The source replays a crashed batch's exact file list, so with the stage's idempotent
appends every file lands once. A run until caught up stops once the queue is drained (the source's
status file says so), not after one batch as Spark's available-now would.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from cdc import dms_files
from cdc.dms_files import DmsFile
from cdc.decode import VALID
from cdc.normalize import normalize
from pipeline.stages.changelog.errors import StageError
from pipeline.stages.changelog.transports import Outage
from pipeline.config.settings import PipelineConfig
from pipeline.sources import register
from pipeline.sources.s3sqs.files import csv_headers
from pipeline.sources.s3sqs.options import S3SqsOptions, parse_options
from pipeline.sources.s3sqs.folder import SourceFolder, source_folder
from pipeline.sources.s3sqs.status import clear_status, read_status
from tables.names import SourceTable, UnmappableName

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.stages.changelog.landing import Landing
    from pipeline.stages.changelog.report import BatchReport

DRAIN_TRIGGER = "1 second"


def source_options(cfg: PipelineConfig, queue_url: str) -> dict[str, str]:
    """The `s3-sqs` source's options from `dms_files.*` (and `dms_files.options` verbatim, last)."""
    settings = cfg.dms_files
    options = {
        "fileFormat": settings.file_format, "rowFormat": "files", "header": "true",
        "queueUrl": queue_url, "queueRegion": cfg.aws.region,
        "checkpointLocation": str(cfg.changelog.checkpoint),
        "maxFilesPerTrigger": str(settings.max_files_per_trigger), "maxFileAge": settings.max_file_age,
        "sqs.longPollingWaitTimeSeconds": str(settings.long_polling_wait_s),
        "sqs.visibilityTimeoutSeconds": str(settings.visibility_timeout_s),
        "sqs.keepMessageForConsumerError": str(settings.keep_message_for_consumer_error).lower(),
    }
    if cfg.aws.endpoint_url:
        options["endpointUrl"] = cfg.aws.endpoint_url
    return {**options, **settings.options}


class S3SqsTransport:
    def __init__(self, cfg: PipelineConfig) -> None:
        """The queue is the subscription; it is looked up when the stage checks its services."""
        self.cfg = cfg
        self._queue_url: str | None = cfg.dms_files.queue_url

    def subscription(self) -> dict[str, str | None]:
        return {"source": "s3-sqs", "queue": self.queue_url}

    def check(self) -> None:
        self.queue_url  # noqa: B018 - resolving the URL asks SQS

    def outage(self) -> Outage | None:
        try:
            self._sqs().get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])
        except (BotoCoreError, ClientError) as exc:
            return Outage("sqs", self.cfg.aws.endpoint_url or "AWS", str(exc))
        return None

    @property
    def queue_url(self) -> str:
        if self._queue_url is None:
            try:
                self._queue_url = self._sqs().get_queue_url(QueueName=self.cfg.dms_files.queue)["QueueUrl"]
            except (BotoCoreError, ClientError) as exc:
                raise StageError(f"SQS queue {self.cfg.dms_files.queue!r} at {self.cfg.aws.endpoint_url or 'AWS'} does "
                                 f"not answer ({exc}): create it (`pipeline simulate --to s3` does), or set "
                                 "dms_files.queue / dms_files.queue_url") from None
        return self._queue_url

    @functools.cached_property
    def _folder(self) -> SourceFolder:
        """The source's folder in the checkpoint, where its status file is (one S3 client for every poll)."""
        return source_folder(str(self.cfg.changelog.checkpoint), self.cfg.aws.boto3_kwargs())

    def _sqs(self):  # type: ignore[no-untyped-def]
        return boto3.client("sqs", **self.cfg.aws.boto3_kwargs())

    def open(self, spark: SparkSession) -> DataFrame:
        register(spark)
        clear_status(self._folder)
        return spark.readStream.format("s3-sqs").options(**source_options(self.cfg, self.queue_url)).load()

    def trigger(self, until_caught_up: bool) -> dict[str, Any]:
        return {"processingTime": DRAIN_TRIGGER if until_caught_up else self.cfg.changelog.trigger_interval}

    def query_conf(self, until_caught_up: bool) -> dict[str, str]:
        return {}  # `drained` reads the source's status file

    def drained(self, query: StreamingQuery) -> bool:
        status = read_status(self._folder)
        return status is not None and status.drained

    def land(self, landing: Landing, batch: DataFrame, report: BatchReport) -> None:
        """The batch lists its files (the source reads none of them); each table's files are read once, by
        Spark's own reader, decoded and appended as they are read; dead letters last."""
        files = [DmsFile.of(row["_file_path"], row["_file_event_time"]) for row in batch.collect()]
        tables: dict[tuple[str, str, str], list[DmsFile]] = {}
        for item in files:
            tables.setdefault((item.db, item.schema, item.table), []).append(item)
        headers = csv_headers(self._options, [f.path for f in files]) if self.cfg.dms_files.file_format == "csv" \
            else None
        dead: list[DataFrame] = []
        for key in sorted(tables):
            dead += self._table(landing, tables[key], headers, report)
        landing.append_dead_letters(dead, report)

    def replay(self, landing: Landing, letters: DataFrame, report: BatchReport) -> None:
        raise StageError("dead letters from DMS files are replayed by the s3-sqs source itself: fix the files, "
                         "then re-deliver them (dms_files.options: reprocessStartBatchId / reprocessEndBatchId)")

    @functools.cached_property
    def _options(self) -> S3SqsOptions:
        """The source's options as it parses them (endpoint, credentials, CSV delimiter)."""
        return parse_options(source_options(self.cfg, self.queue_url))

    def _table(self, landing: Landing, files: list[DmsFile],
               headers: dict[str, tuple[str, ...] | ValueError] | None, report: BatchReport) -> list[DataFrame]:
        """One table's files: read once, decoded, appended; returns their dead letters."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        from pyspark.sql.types import _parse_datatype_string

        settings, first = self.cfg.dms_files, files[0]
        read = dms_files.read_table(landing.spark, files, settings.file_format, headers)
        dead: list[DataFrame] = []
        if read.lost:  # a file with no rows to show is one record, and one dead letter that names it
            dead.append(_lost(landing.spark, read.lost))
            _count(report, first.topic, len(read.lost))
        if read.rows is None:
            return dead
        refused = [(rows, "IncompatibleDmsFile", reason) for rows, reason in read.misfits]
        name, source = None, SourceTable(first.db, first.schema, first.table)
        if not first.table:
            refused.append((read.rows, "UnroutableFile", "not in DMS's <folder>/<schema>/<table>/<file> layout"))
        else:
            try:
                name = landing.owners.claim(source)
            except UnmappableName as exc:  # or TableNameCollision
                refused.append((read.rows, exc.error_class, str(exc)))
        dead += [_dead(rows, error_class, reason) for rows, error_class, reason in refused]
        if refused:  # rows that cannot land: counted (for the dead-letter bound), then read as dead letters
            _count(report, first.topic, sum(rows.count() for rows, _, _ in refused))
        if name is None:
            return dead
        ddl = settings.csv_schemas.get(name) if settings.file_format == "csv" else None
        decoded = dms_files.decode(read.rows, settings.timestamp_column, settings.queue,
                                   _parse_datatype_string(ddl) if ddl else None)
        counts = (F.count(F.lit(1)).alias("rows"), F.count_if(~F.col(VALID)).alias("invalid"))
        seen = Observation(f"rows {first.topic} {report.batch_id}")
        valid = decoded.drop("value").observe(seen, *counts).where(VALID)  # the row's JSON: for dead letters only
        done = landing.append(normalize(valid, f"dms-{settings.file_format}", first.db), name, report,
                              source=source)
        observed = decoded.agg(*counts).first() if done.skipped else seen.get  # a replay observed nothing
        _count(report, first.topic, observed["rows"])
        if observed["invalid"]:
            dead.append(_dead(decoded.where(~F.col(VALID)), "MalformedDmsRow",
                              f"not a DMS row: needs Op I/U/D and a {settings.timestamp_column} time"))
        return dead


def _count(report: BatchReport, topic: str, rows: int) -> None:
    report.rows_in += rows
    report.records[topic] = report.records.get(topic, 0) + rows


def _dead(rows: DataFrame, error_class: str, message: str) -> DataFrame:
    """A dead letter of a file row: the file and row are named."""
    from pyspark.sql import functions as F

    where = F.concat(F.lit(f"{message} ("), F.col("_file_path"), F.lit(" row "), F.col("_file_row"), F.lit(")"))
    return _letters(rows, F.col("value"), F.concat_ws(".", "db", "schema_name", "table_name"), F.col("_file_row"),
                    F.col("_file_event_time"), F.lit(error_class), where)


def _lost(spark: SparkSession, lost: list[tuple[DmsFile, str, str]]) -> DataFrame:
    """A dead letter of each file with no rows to show (gone, unreadable): no value, offset -1, the file named."""
    from pyspark.sql import functions as F

    files = spark.createDataFrame([(item.topic, item.event_time, error_class, f"{reason} ({item.path})")
                                   for item, error_class, reason in lost],
                                  "topic string, event_time timestamp, error_class string, message string")
    return _letters(files, F.lit(None), F.col("topic"), F.lit(-1).cast("bigint"), F.col("event_time"),
                    F.col("error_class"), F.col("message"))


def _letters(frame: DataFrame, value: Column, topic: Column, offset: Column, timestamp: Column,
             error_class: Column, message: Column) -> DataFrame:
    """Dead letters in the dead-letter table's Kafka-like columns."""
    from pyspark.sql import functions as F

    return frame.select(
        F.lit(None).cast("binary").alias("key"), value.cast("binary").alias("value"), topic.alias("topic"),
        F.lit(0).alias("partition"), offset.alias("offset"), timestamp.alias("timestamp"),
        F.lit(None).cast("string").alias("schema_id"), error_class.alias("error_class"),
        message.alias("error_message"))
