"""S3-SQS: AWS DMS's S3 target files (CSV or Parquet), announced by S3 event notifications on an SQS queue.

The `s3-sqs` source (`pipeline/sources/s3sqs`) hands over each file row as JSON with its file and position;
`cdc/dms_files.py` decodes them into the DMS shape and `cdc/normalize.py` into the canonical change record, so
`mirror` and `verify` work unchanged. The source replays a crashed batch's exact file list, so with the stage's
idempotent appends every file lands once. A run until caught up stops once the queue is drained (the source's
status file says so), not after one batch as Spark's available-now would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from cdc import dms_files
from cdc.decode import VALID
from cdc.normalize import normalize
from pipeline.stages.changelog.errors import StageError
from pipeline.stages.changelog.transports import Outage
from pipeline.config.settings import PipelineConfig
from pipeline.sources import register
from pipeline.sources.s3sqs.status import clear_status, read_status
from tables.names import UnmappableName, lake_table_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.stages.changelog.landing import Landing
    from pipeline.stages.changelog.report import BatchReport

DRAIN_TRIGGER = "1 second"


def source_options(cfg: PipelineConfig, queue_url: str) -> dict[str, str]:
    """The `s3-sqs` source's options from `dms_files.*` (and `dms_files.options` verbatim, last)."""
    settings = cfg.dms_files
    options = {
        "fileFormat": settings.file_format, "rowFormat": "json", "header": "true",
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

    def _sqs(self):  # type: ignore[no-untyped-def]
        return boto3.client("sqs", **self.cfg.aws.boto3_kwargs())

    def open(self, spark: SparkSession) -> DataFrame:
        register(spark)
        clear_status(str(self.cfg.changelog.checkpoint))
        return spark.readStream.format("s3-sqs").options(**source_options(self.cfg, self.queue_url)).load()

    def trigger(self, until_caught_up: bool) -> dict[str, Any]:
        return {"processingTime": DRAIN_TRIGGER if until_caught_up else self.cfg.changelog.trigger_interval}

    def drained(self, query: StreamingQuery) -> bool:
        status = read_status(str(self.cfg.changelog.checkpoint))
        return status is not None and status.drained

    def land(self, landing: Landing, batch: DataFrame, report: BatchReport) -> None:
        """Plan (rows and merged row type per table), then decode and append each table; dead letters last."""
        from pyspark.sql import functions as F

        rows = dms_files.with_table(batch).persist()
        try:
            plans = (rows.groupBy("db", "schema_name", "table_name")
                     .agg(F.count(F.lit(1)).alias("rows"), dms_files.row_type().alias("row_type")).collect())
            report.rows_in = sum(plan["rows"] for plan in plans)
            report.records = {".".join((plan["db"], plan["schema_name"], plan["table_name"])): plan["rows"]
                              for plan in plans}
            dead = [_dead(rows.where(F.col("table_name") == ""), "UnroutableFile",
                          "not in DMS's <folder>/<schema>/<table>/<file> layout")] \
                if any(plan["table_name"] == "" for plan in plans) else []
            for plan in sorted(plans, key=lambda p: (p["db"], p["table_name"])):
                if plan["table_name"]:
                    dead += self._table(landing, rows, plan, report)
            landing.append_dead_letters(dead, report)
        finally:
            rows.unpersist()

    def replay(self, landing: Landing, letters: DataFrame, report: BatchReport) -> None:
        raise StageError("dead letters from DMS files are replayed by the s3-sqs source itself: fix the files, "
                         "then re-deliver them (dms_files.options: reprocessStartBatchId / reprocessEndBatchId)")

    def _table(self, landing: Landing, rows: DataFrame, plan: Row, report: BatchReport) -> list[DataFrame]:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        from pyspark.sql.types import _parse_datatype_string

        settings, db, table = self.cfg.dms_files, plan["db"], plan["table_name"]
        part = rows.where((F.col("db") == db) & (F.col("schema_name") == plan["schema_name"])
                          & (F.col("table_name") == table))
        try:
            name = lake_table_name(db, table)
        except UnmappableName as exc:
            return [_dead(part, exc.error_class, str(exc))]
        ddl = settings.csv_schemas.get(name) if settings.file_format == "csv" else None
        decoded = dms_files.decode(part, plan["row_type"] or "STRUCT<>", settings.timestamp_column,
                                   settings.queue, _parse_datatype_string(ddl) if ddl else None)
        seen = Observation(f"invalid {db}.{table} {report.batch_id}")
        valid = decoded.observe(seen, F.count_if(~F.col(VALID)).alias("n")).where(VALID)
        done = landing.append(normalize(valid, f"dms-{settings.file_format}", db), name, report)
        if done.skipped or seen.get["n"]:  # a replayed batch observed nothing: look again
            return [_dead(decoded.where(~F.col(VALID)), "MalformedDmsRow",
                          f"not a DMS row: needs Op I/U/D and a {settings.timestamp_column} time")]
        return []


def _dead(rows: DataFrame, error_class: str, message: str) -> DataFrame:
    """A dead letter of a file row, in the dead-letter table's Kafka-like columns: the file and row are named."""
    from pyspark.sql import functions as F

    where = F.concat(F.lit(f"{message} ("), F.col("_file_path"), F.lit(" row "), F.col("_file_row"), F.lit(")"))
    return rows.select(
        F.lit(None).cast("binary").alias("key"), F.col("value").cast("binary").alias("value"),
        F.concat_ws(".", "db", "schema_name", "table_name").alias("topic"), F.lit(0).alias("partition"),
        F.col("_file_row").alias("offset"), F.col("_file_event_time").alias("timestamp"),
        F.lit(None).cast("string").alias("schema_id"), F.lit(error_class).alias("error_class"),
        where.alias("error_message"))
