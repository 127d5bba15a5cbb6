"""`pipeline changelog --source s3-sqs`: AWS DMS files on S3, announced on SQS, into the same changelog tables.

The `s3-sqs` source (`pipeline/sources/s3sqs`) hands over each file row as JSON with its file and position;
`cdc/dms_files.py` decodes them into the DMS shape and `cdc/normalize.py` into the canonical change record, so
`mirror` and `verify` work unchanged. Appends are idempotent per (query id, batch id) as for Kafka, and the
source replays a crashed batch's exact file list, so every file lands once. `--until-caught-up` stops once
the queue is drained (the source's status file says so), not after one batch as Spark's available-now would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
import structlog
from botocore.exceptions import BotoCoreError, ClientError

from cdc import dms_files
from cdc.decode import VALID
from cdc.normalize import normalize
from pipeline.changelog import BatchReport, ChangelogStage, StageError
from pipeline.config import PipelineConfig
from pipeline.sources import register
from pipeline.sources.s3sqs.status import clear_status, read_status
from tables.names import UnmappableName, lake_table_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

log = structlog.get_logger(__name__)
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


class S3SqsChangelogStage(ChangelogStage):
    def __init__(self, cfg: PipelineConfig, spark) -> None:  # type: ignore[no-untyped-def]
        super().__init__(cfg, spark)
        self._queue_url: str | None = cfg.dms_files.queue_url
        self._until_caught_up = False

    @staticmethod
    def _check_subscription(cfg: PipelineConfig) -> None:
        """The queue is the subscription; it is checked when the stage runs."""

    def _subscription(self) -> dict[str, str | None]:
        return {"source": "s3-sqs", "queue": self.queue_url}

    def _check_services(self) -> None:
        self.queue_url  # noqa: B018 - resolving the URL asks SQS

    def _outage(self) -> tuple[str, str, str] | None:
        try:
            self._sqs().get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])
        except (BotoCoreError, ClientError) as exc:
            return "sqs", self.cfg.aws.endpoint_url or "AWS", str(exc)
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

    def start(self, until_caught_up: bool = False) -> StreamingQuery:
        settings = self.cfg.changelog
        register(self.spark)
        self._until_caught_up = until_caught_up
        clear_status(str(settings.checkpoint))
        if self.cfg.lake.format == "iceberg":
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.namespace}")
        rows = self.spark.readStream.format("s3-sqs").options(**source_options(self.cfg, self.queue_url)).load()
        return (rows.writeStream.foreachBatch(self._process).option("checkpointLocation", str(settings.checkpoint))
                .queryName("changelog")
                .trigger(processingTime=DRAIN_TRIGGER if until_caught_up else settings.trigger_interval).start())

    def _drained(self, query: StreamingQuery) -> bool:
        if not self._until_caught_up:
            return False
        status = read_status(str(self.cfg.changelog.checkpoint))
        return status is not None and status.drained

    # -- one micro-batch -----------------------------------------------------------------------------

    def land(self, batch: DataFrame, report: BatchReport, store_dead_letters: bool = True) -> None:
        """Plan (rows and merged row type per table), then decode and append each table; dead letters last."""
        from pyspark.sql import functions as F

        batch_id = report.batch_id
        rows = dms_files.with_table(batch).persist()
        try:
            plans = (rows.groupBy("db", "schema_name", "table_name")
                     .agg(F.count(F.lit(1)).alias("rows"), dms_files.row_type().alias("row_type")).collect())
            report.rows_in = sum(plan["rows"] for plan in plans)
            report.records = {".".join((plan["db"], plan["schema_name"], plan["table_name"])): plan["rows"]
                              for plan in plans}
            dead = [self._dead(rows.where(F.col("table_name") == ""), "UnroutableFile",
                               "not in DMS's <folder>/<schema>/<table>/<file> layout")] \
                if any(plan["table_name"] == "" for plan in plans) else []
            for plan in sorted(plans, key=lambda p: (p["db"], p["table_name"])):
                if plan["table_name"]:
                    dead += self._table(rows, plan, batch_id, report)
            self._append_dead_letters(dead, report, store_dead_letters)
        finally:
            rows.unpersist()

    def _table(self, rows: DataFrame, plan, batch_id: int, report: BatchReport) -> list[DataFrame]:  # type: ignore[no-untyped-def]
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        from pyspark.sql.types import _parse_datatype_string

        db, table = plan["db"], plan["table_name"]
        part = rows.where((F.col("db") == db) & (F.col("schema_name") == plan["schema_name"])
                          & (F.col("table_name") == table))
        try:
            name = lake_table_name(db, table)
        except UnmappableName as exc:
            return [self._dead(part, exc.error_class, str(exc))]
        ddl = self.cfg.dms_files.csv_schemas.get(name) if self.cfg.dms_files.file_format == "csv" else None
        decoded = dms_files.decode(part, plan["row_type"] or "STRUCT<>", self.cfg.dms_files.timestamp_column,
                                   self.cfg.dms_files.queue, _parse_datatype_string(ddl) if ddl else None)
        seen = Observation(f"invalid {db}.{table} {batch_id}")
        valid = decoded.observe(seen, F.count_if(~F.col(VALID)).alias("n")).where(VALID)
        changes = normalize(valid, f"dms-{self.cfg.dms_files.file_format}", db)
        done = self._append(changes, name, batch_id, report)
        if done.skipped or seen.get["n"]:  # a replayed batch observed nothing: look again
            return [self._dead(decoded.where(~F.col(VALID)), "MalformedDmsRow",
                               f"not a DMS row: needs Op I/U/D and a {self.cfg.dms_files.timestamp_column} time")]
        return []

    @staticmethod
    def _dead(rows: DataFrame, error_class: str, message: str) -> DataFrame:  # type: ignore[override]
        from pyspark.sql import functions as F

        where = F.concat(F.lit(f"{message} ("), F.col("_file_path"), F.lit(" row "), F.col("_file_row"), F.lit(")"))
        return rows.select(
            F.lit(None).cast("binary").alias("key"), F.col("value").cast("binary").alias("value"),
            F.concat_ws(".", "db", "schema_name", "table_name").alias("topic"), F.lit(0).alias("partition"),
            F.col("_file_row").alias("offset"), F.col("_file_event_time").alias("timestamp"),
            F.lit(None).cast("string").alias("schema_id"), F.lit(error_class).alias("error_class"),
            where.alias("error_message"))
