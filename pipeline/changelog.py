"""`pipeline changelog`: CDC events from Kafka, decoded on the JVM, appended once to per-table Iceberg tables.

Each micro-batch is decoded per writer schema id with Spark's `from_avro` (writer schema from the registry,
the subject's latest version as the reader schema), normalised into the canonical change record (`cdc/`), and
routed by topic `<db>.<schema>.<table>` to `<catalog>.changelog.<db>_<table>` (Iceberg) or
`<lake.delta_root>/changelog/<db>_<table>` (Delta). Records that cannot be decoded go, with their raw bytes and
the reason, to the `dead_letters` table beside them; they never block a partition.

Exactly once: the checkpoint is the only offset store, and every table append is idempotent per (query id,
batch id) (`tables/append.py`), so a batch replayed after a crash skips the tables it already wrote.
"""

from __future__ import annotations

import functools
import json
import operator
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from cdc.normalize import detect_format, normalize
from pipeline import kafka
from pipeline.config import PipelineConfig
from registry.backend import RegistryError
from registry.ccompat import ConfluentCompatClient
from tables.append import Appender, DeltaAppender, IcebergAppender

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = structlog.get_logger(__name__)

HEADER_BYTES = 5  # Confluent framing: magic byte 0 and a 4-byte schema id


class StageError(RuntimeError):
    """The stage cannot run as configured; the message says which setting to change."""


def check_services(cfg: PipelineConfig) -> None:
    """Fail before any query starts when Kafka or the registry does not answer, naming which and where."""
    kafka.topic_names(cfg.kafka)
    ConfluentCompatClient.from_settings(cfg.registry).subjects()


@dataclass
class BatchReport:
    batch_id: int
    rows_in: int = 0
    tombstones: int = 0
    dead_letters: int = 0
    tables: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # tables this batch had already committed (a replay)


class ChangelogStage:
    def __init__(self, cfg: PipelineConfig, spark: SparkSession) -> None:
        if not (cfg.changelog.topics or cfg.changelog.topic_pattern):
            raise StageError("no topics to read: set changelog.topics or changelog.topic_pattern "
                             "(e.g. --set changelog.topic_pattern='moma\\..*')")
        if cfg.registry.backend != "ccompat" or cfg.registry.wire_format != "confluent":
            raise StageError("the changelog stage reads Confluent-framed Avro through the Confluent-compatible "
                             "API for now: set registry.backend = 'ccompat' and registry.wire_format = 'confluent'")
        self.cfg = cfg
        self.spark = spark
        self.registry = ConfluentCompatClient.from_settings(cfg.registry)
        self.namespace = f"{cfg.catalog.name}.{cfg.changelog.namespace}"
        self.appender: Appender = (DeltaAppender(spark, f"{cfg.lake.delta_root}/{cfg.changelog.namespace}")
                                   if cfg.lake.format == "delta" else IcebergAppender(spark, self.namespace))
        self.reports: deque[BatchReport] = deque(maxlen=1000)  # the recent batches, for progress lines
        self._id: str | None = None

    # -- the streaming query -------------------------------------------------------------------------

    def start(self, until_caught_up: bool = False) -> StreamingQuery:
        settings = self.cfg.changelog
        reader = (self.spark.readStream.format("kafka").options(**kafka.spark_options(self.cfg.kafka))
                  .option("startingOffsets", settings.starting_offsets).option("failOnDataLoss", "false"))
        if settings.topics:
            reader = reader.option("subscribe", ",".join(settings.topics))
        else:
            reader = reader.option("subscribePattern", settings.topic_pattern)
        if settings.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
        if self.cfg.lake.format == "iceberg":
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.namespace}")
        writer = (reader.load().writeStream.foreachBatch(self._process)
                  .option("checkpointLocation", str(settings.checkpoint)).queryName("changelog"))
        writer = writer.trigger(availableNow=True) if until_caught_up else writer.trigger(
            processingTime=settings.trigger_interval)
        return writer.start()

    def run(self, until_caught_up: bool = False) -> None:
        """Run the query, logging one progress line per batch; SIGTERM lets the running batch finish.

        When the query fails it restarts from the checkpoint with backoff, up to `changelog.max_restarts` times
        in a row (a restart replays the unfinished batch, which is idempotent). One failure is expected after a
        crash: Spark 4.1's Kafka source throws a NullPointerException while reporting lag for a batch replayed
        from the offset log, after that batch has committed.
        """
        from pyspark.errors import StreamingQueryException

        check_services(self.cfg)
        stopping = threading.Event()
        self._on_sigterm(stopping)
        restarts = 0
        while True:
            query = self.start(until_caught_up)
            try:
                self._watch(query, stopping)
                return
            except StreamingQueryException as exc:
                if restarts >= self.cfg.changelog.max_restarts:
                    raise
                restarts += 1
                delay = min(60.0, 2.0 ** restarts)
                log.warning("changelog.restart", attempt=restarts, seconds=delay, error=str(exc).splitlines()[0][:300])
                time.sleep(delay)

    def _watch(self, query: StreamingQuery, stopping: threading.Event) -> None:
        logged = -1
        while not query.awaitTermination(1.0):
            logged = self._log_progress(query, logged)
            if stopping.is_set():
                while query.status["isTriggerActive"]:  # the running batch finishes first
                    time.sleep(0.2)
                query.stop()
                log.info("changelog.stopped", reason="SIGTERM", last_batch=logged)
                return
        self._log_progress(query, logged)

    def _log_progress(self, query: StreamingQuery, logged: int) -> int:
        """One line per finished batch: rows in, rows per table, dead letters, rows/s and consumer lag."""
        reports = {report.batch_id: report for report in self.reports}
        for progress in query.recentProgress:
            batch_id = progress["batchId"]
            if batch_id <= logged or batch_id not in reports:
                continue
            report = reports[batch_id]
            lag = max((int(source.get("metrics", {}).get("maxOffsetsBehindLatest") or 0)
                       for source in progress["sources"]), default=0)
            log.info("changelog.batch", batch=batch_id, rows_in=report.rows_in, tables=report.tables,
                     dead_letters=report.dead_letters, tombstones=report.tombstones, skipped=report.skipped,
                     rows_per_s=round(progress.get("processedRowsPerSecond") or 0), lag=lag)
            logged = batch_id
        return logged

    @staticmethod
    def _on_sigterm(stopping: threading.Event) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    # -- one micro-batch -----------------------------------------------------------------------------

    def _process(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        report = BatchReport(batch_id)
        raw = batch.select("key", "value", "topic", "partition", "offset", "timestamp").persist()
        try:
            report.rows_in = raw.count()
            report.tombstones = raw.where(F.col("value").isNull()).count()
            framed = raw.where(F.col("value").isNotNull()).withColumn(
                "schema_id",
                F.when((F.length("value") >= HEADER_BYTES) & (F.hex(F.substring("value", 1, 1)) == "00"),
                       F.conv(F.hex(F.substring("value", 2, 4)), 16, 10).cast("long")))
            dead = [self._dead(framed.where(F.col("schema_id").isNull()), "WireFormatError",
                               "not a Confluent-framed message: the first byte must be 0 and a 4-byte schema id follow")]
            pairs = framed.where(F.col("schema_id").isNotNull()).select("topic", "schema_id").distinct().collect()
            by_topic: dict[str, list[int]] = {}
            for row in pairs:
                by_topic.setdefault(row["topic"], []).append(int(row["schema_id"]))
            for topic, schema_ids in sorted(by_topic.items()):
                dead += self._topic(framed.where(F.col("topic") == topic), topic, schema_ids, batch_id, report)
            letters = functools.reduce(type(raw).unionByName, dead)
            report.dead_letters = self._append(letters, self.cfg.changelog.dead_letter_table, batch_id, report,
                                               partition_by_source_time=False)
        finally:
            raw.unpersist()
        self.reports.append(report)

    def _topic(self, framed: DataFrame, topic: str, schema_ids: list[int], batch_id: int,
               report: BatchReport) -> list[DataFrame]:
        """Decode one topic's messages per writer schema id into its reader schema; write; return dead letters."""
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import from_avro

        db, table = topic.split(".")[0], topic.rsplit(".", 1)[-1]
        try:
            reader = self.registry.latest(f"{topic}-value").schema
        except RegistryError as exc:
            if exc.status != 404:
                raise
            raise RegistryError(f"topic {topic} carries registry-framed messages, but the subject {topic}-value has "
                                f"no schema at {self.registry.address}: register it, or leave the topic out of "
                                "changelog.topics / changelog.topic_pattern", status=404) from None
        fmt = detect_format(json.loads(reader))
        decoded, dead = [], []
        for schema_id in schema_ids:
            rows = framed.where(F.col("schema_id") == schema_id)
            try:
                writer = self.registry.schema(schema_id)
            except RegistryError as exc:
                if exc.status != 404:
                    raise  # the registry is down: fail the batch, it is retried from the checkpoint
                dead.append(self._dead(rows, "UnknownSchemaId", f"schema id {schema_id} is not in the registry"))
                continue
            body = F.expr(f"substring(value, {HEADER_BYTES + 1}, length(value) - {HEADER_BYTES})")
            decoded.append(rows.withColumn("v", from_avro(body, writer, {"avroSchema": reader, "mode": "PERMISSIVE"})))
        if not decoded:
            return dead
        union = functools.reduce(type(framed).unionByName, decoded)
        # PERMISSIVE from_avro yields a record of nulls for a body it cannot read; a real record never is one,
        # since every CDC record has required fields (the key, Debezium's op, DMS's data and metadata).
        fields = union.schema["v"].dataType.fieldNames()  # type: ignore[attr-defined]
        malformed = F.col("v").isNull() | functools.reduce(operator.and_, [F.col("v")[f].isNull() for f in fields])
        dead.append(self._dead(union.where(malformed).drop("v"), "MalformedAvro",
                               "the body does not decode with the schema its header names"))
        changes = normalize(union.where(~malformed), fmt, db)
        self._append(changes, f"{db}_{table}", batch_id, report)
        return dead

    def _dead(self, rows: DataFrame, error_class: str, message: str) -> DataFrame:
        from pyspark.sql import functions as F

        return rows.select(
            "key", "value", "topic", "partition", "offset", "timestamp",
            F.col("schema_id").cast("string").alias("schema_id") if "schema_id" in rows.columns
            else F.lit(None).cast("string").alias("schema_id"),
            F.lit(error_class).alias("error_class"), F.lit(message).alias("error_message"),
        )

    # -- idempotent appends --------------------------------------------------------------------------

    def _query_id(self) -> str:
        """The query's id, which Spark keeps in the checkpoint: stable across restarts of the same query, new
        for a new checkpoint (whose batch ids start again at 0). Read through Spark, so S3 checkpoints work."""
        if self._id is None:
            metadata = self.spark.read.text(f"{self.cfg.changelog.checkpoint}/metadata").first()
            self._id = json.loads(metadata["value"])["id"]  # type: ignore[index]
        return self._id

    def _append(self, rows: DataFrame, name: str, batch_id: int, report: BatchReport,
                partition_by_source_time: bool = True) -> int:
        from pyspark.sql import functions as F

        rows = rows.withColumn("_ingested_at", F.current_timestamp()).withColumn("_batch_id", F.lit(batch_id).cast("long"))
        done = self.appender.append(rows, name, self._query_id(), batch_id, partition_by_source_time)
        if done.skipped:
            report.skipped.append(done.table)
        elif done.rows:
            report.tables[done.table] = done.rows
        return done.rows
