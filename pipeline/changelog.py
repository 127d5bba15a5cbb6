"""`pipeline changelog`: CDC events from Kafka, decoded on the JVM, appended once to per-table Iceberg tables.

Each micro-batch is planned in one job (rows per topic, value kind and writer schema id), then each topic is
decoded in one pass: registry-framed Avro (`registry.wire_format`: Confluent, Apicurio legacy or Glue) with
one `from_avro` per writer schema id (the subject's latest version as the reader schema), DMS JSON through a
variant (`cdc/decode.py`). Changes are normalised into the canonical change record (`cdc/normalize.py`) and
routed by topic `<db>.<schema>.<table>` to `<catalog>.changelog.<db>_<table>` (Iceberg) or
`<lake.delta_root>/changelog/<db>_<table>` (Delta). Records that cannot be decoded go, with their raw bytes and
the reason, to the `dead_letters` table beside them; they never block a partition. With `changelog.source =
"kinesis"` the rows come from Kinesis streams instead, in the same shape (`pipeline/sources/kinesis/changelog.py`).

Exactly once: the checkpoint is the only offset store, and every table append is idempotent per (query id,
batch id) (`tables/append.py`), so a batch replayed after a crash skips the tables it already wrote. The
checkpoint is bound to the subscription and target it was made for. Kafka or registry outages are waited out:
a failed query restarts once they answer, and a trigger that hangs (Spark's Kafka source retries a broker that
went away for minutes before it fails) has them probed and the outage logged while it lasts.
"""

from __future__ import annotations

import functools
import json
import math
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from cdc import decode, framing
from cdc.control import control_kind
from cdc.framing import Framing, Kind
from cdc.normalize import TRANSPORT_EXTRAS, any_rejection, detect_format, normalize, rejections
from pipeline import kafka
from pipeline.config import DeadLetterSettings, PipelineConfig
from pipeline.sources.kinesis import changelog as kinesis
from pipeline.sources.kinesis.client import KinesisUnavailable
from registry.backend import RegistryError
from registry.ids import UnresolvedSchemaId
from registry.resolver import resolver_from_settings
from tables.append import Appended, Appender, DeltaAppender, IcebergAppender
from tables.glue_delta import DeltaGlue
from tables.names import UnmappableName, lake_table_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = structlog.get_logger(__name__)

CARRIED = ("headers",)  # Kafka headers (registry ids may travel there): kept with a dead letter, for its replay


class StageError(RuntimeError):
    """The stage cannot run as configured; the message says which setting to change."""


class DeadLetterBoundExceeded(StageError):
    """A batch dead-lettered more of a table than `changelog.dead_letters` allows. Raised after the batch's
    dead letters are stored and before Spark commits the batch, so the stage stops and nothing is lost."""


def check_services(cfg: PipelineConfig) -> None:
    """Fail before any query starts when Kafka or the registry (or Kinesis) does not answer, naming which and
    where. DMS JSON from Kinesis needs no registry."""
    if cfg.changelog.source == "kinesis":
        kinesis.check_streams(cfg)
        return
    kafka.topic_names(cfg.kafka)
    resolver_from_settings(cfg.registry, cfg.aws).check()


@dataclass
class BatchReport:
    batch_id: int
    writer: str = ""  # the id its appends commit under (with the batch id): the query's, or a replay's
    rows_in: int = 0
    tombstones: int = 0
    dead_letters: int = 0
    tables: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # tables this batch had already committed (a replay)
    records: dict[str, int] = field(default_factory=dict)  # topic -> records that are not tombstones
    dead_by_topic: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> error class -> count
    dead_letters_skipped: bool = False  # the batch's dead letters were already stored (a replay)
    control: dict[str, int] = field(default_factory=dict)  # Debezium heartbeats, transaction records: skipped

    def dead_letter_excess(self, bound: DeadLetterSettings) -> str | None:
        """What breaks the bound, in words, or None: the first (topic, error class) past it."""
        for topic, classes in sorted(self.dead_by_topic.items()):
            dead, records = sum(classes.values()), max(self.records.get(topic, 0), 1)
            error_class = max(classes, key=classes.__getitem__)
            over_count = bound.max_count is not None and dead > bound.max_count
            over_fraction = (bound.max_fraction is not None and records >= bound.min_records
                             and dead / records > bound.max_fraction)
            if over_count or over_fraction:
                limit = (f"changelog.dead_letters.max_count = {bound.max_count}" if over_count else
                         f"changelog.dead_letters.max_fraction = {bound.max_fraction:g}")
                return (f"batch {self.batch_id} dead-lettered {dead} of {records} records of topic {topic} "
                        f"({dead / records:.0%}; most of them {error_class}: {classes[error_class]}), past "
                        f"{limit}")
        return None


@dataclass
class TopicPlan:
    """What one topic brought in a batch: rows by kind, framed rows by writer schema id, DMS JSON row type."""

    topic: str
    rows: int = 0
    tombstones: int = 0
    unframed: int = 0
    json_rows: int = 0
    row_type: str | None = None
    framed: dict[str, int] = field(default_factory=dict)
    compressed: int = 0  # framed rows with a zlib-compressed body (Glue)

    def add(self, kind: Kind, schema_id: str | None, rows: int, row_type: str | None, compressed: int) -> None:
        self.rows += rows
        self.compressed += compressed
        if kind is Kind.TOMBSTONE:
            self.tombstones += rows
        elif kind is Kind.UNFRAMED:
            self.unframed += rows
        elif kind is Kind.JSON:
            self.json_rows, self.row_type = rows, row_type
        else:
            self.framed[str(schema_id)] = rows


class ChangelogStage:
    def __init__(self, cfg: PipelineConfig, spark: SparkSession) -> None:
        self._check_subscription(cfg)
        self.cfg = cfg
        self.spark = spark
        self.resolver = resolver_from_settings(cfg.registry, cfg.aws)
        self.framing = Framing.of(cfg.registry.wire_format)
        self.namespace = f"{cfg.catalog.name}.{cfg.changelog.namespace}"
        delta_root = f"{cfg.lake.delta_root}/{cfg.changelog.namespace}"
        self.target = f"delta tables under {delta_root}" if cfg.lake.format == "delta" else f"iceberg {self.namespace}"
        self.appender: Appender = (DeltaAppender(spark, delta_root) if cfg.lake.format == "delta"
                                   else IcebergAppender(spark, self.namespace))
        self.glue = DeltaGlue.enabled(cfg, spark)  # Delta tables registered in Glue for Athena
        self.reports: deque[BatchReport] = deque(maxlen=1000)  # the recent batches, for progress lines
        self._id: str | None = None
        self._stopped_by: DeadLetterBoundExceeded | None = None  # why `run` must not restart the query
        self._until_caught_up = False

    # -- what it reads (a stage over another source overrides these) ----------------------------------

    @staticmethod
    def _check_subscription(cfg: PipelineConfig) -> None:
        if cfg.changelog.source == "kinesis":
            if not cfg.kinesis.streams:
                raise StageError("no Kinesis streams to read: set kinesis.streams (e.g. --set kinesis.streams=moma)")
        elif not (cfg.changelog.topics or cfg.changelog.topic_pattern):
            raise StageError("no topics to read: set changelog.topics or changelog.topic_pattern "
                             "(e.g. --set changelog.topic_pattern='moma\\..*')")

    def _subscription(self) -> dict[str, str | None]:
        settings = self.cfg.changelog
        if settings.source == "kinesis":
            return {"kinesis_streams": ",".join(self.cfg.kinesis.streams)}
        return {"topics": ",".join(settings.topics) or None, "topic_pattern": settings.topic_pattern}

    def _check_services(self) -> None:
        check_services(self.cfg)

    def _drained(self, query: StreamingQuery) -> bool:
        """Whether a run until caught up may stop now. The Kafka query stops by itself (available-now); the
        Kinesis one (a Python source: no available-now in Spark 4.1) once a trigger finds nothing new."""
        return self._until_caught_up and self.cfg.changelog.source == "kinesis" and _found_nothing_new(query)

    # -- the streaming query -------------------------------------------------------------------------

    def start(self, until_caught_up: bool = False) -> StreamingQuery:
        """Kafka drains with `availableNow`; Kinesis (a Python source, which has no such trigger in Spark 4.1)
        runs back-to-back batches and `_watch` stops it once a trigger finds nothing new."""
        settings = self.cfg.changelog
        self._until_caught_up = until_caught_up
        if self.cfg.lake.format == "iceberg":
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.namespace}")
        if settings.source == "kinesis":
            writer = (kinesis.read(self.spark, self.cfg).writeStream.foreachBatch(self._process)
                      .option("checkpointLocation", str(settings.checkpoint)).queryName("changelog"))
            return writer.trigger(processingTime="0 seconds" if until_caught_up else settings.trigger_interval).start()
        reader = (self.spark.readStream.format("kafka")
                  .options(**kafka.spark_options(self.cfg.kafka, headers=self.framing.reads_headers))
                  .option("startingOffsets", settings.starting_offsets).option("failOnDataLoss", "false"))
        if settings.topics:
            reader = reader.option("subscribe", ",".join(settings.topics))
        else:
            reader = reader.option("subscribePattern", settings.topic_pattern)
        if settings.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
        writer = (reader.load().writeStream.foreachBatch(self._process)
                  .option("checkpointLocation", str(settings.checkpoint)).queryName("changelog"))
        writer = writer.trigger(availableNow=True) if until_caught_up else writer.trigger(
            processingTime=settings.trigger_interval)
        return writer.start()

    def run(self, until_caught_up: bool = False) -> None:
        """Run the query, logging one progress line per batch; SIGTERM lets the running batch finish.

        When the query fails while Kafka or the registry does not answer, the outage is logged by name and
        address and waited out with backoff, then the query restarts from its checkpoint. Other failures
        restart it with backoff up to `changelog.max_restarts` times in a row (a restart replays the unfinished
        batch, which is idempotent). One failure is expected after a crash: Spark 4.1's Kafka source throws a
        NullPointerException while reporting lag for a batch replayed from the offset log, after that batch
        has committed.
        """
        from pyspark.errors import StreamingQueryException

        self._check_services()
        self._check_checkpoint()
        stopping = threading.Event()
        self._on_sigterm(stopping)
        restarts = 0
        while not stopping.is_set():
            query = self.start(until_caught_up)
            try:
                self._watch(query, stopping)
                return
            except StreamingQueryException as exc:
                if self._stopped_by is not None:
                    raise self._stopped_by from None
                error = str(exc).splitlines()[0][:300]
                if self._wait_out_outage(stopping):
                    log.info("changelog.restart", after="outage", error=error)
                    continue
                if restarts >= self.cfg.changelog.max_restarts:
                    raise
                restarts += 1
                delay = min(60.0, 2.0 ** restarts)
                log.warning("changelog.restart", attempt=restarts, seconds=delay, error=error)
                stopping.wait(delay)

    def _wait_out_outage(self, stopping: threading.Event) -> bool:
        """After a failed query: while a service the stage needs does not answer, log which one and where and
        wait with backoff (up to a minute between tries), for at most `changelog.max_outage_s`. False when all
        answer: the failure was something else."""
        delay, since = 1.0, None
        while not stopping.is_set():
            down = self._outage()
            if down is None:
                if since is not None:
                    log.info("changelog.recovered")
                return since is not None
            since = since or time.monotonic()
            service, address, error = down
            waited, bound = time.monotonic() - since, self.cfg.changelog.max_outage_s
            if bound and waited >= bound:
                raise StageError(f"{service} at {address} has not answered for {waited:.0f} s "
                                 f"(changelog.max_outage_s = {bound:g}): {error}; the checkpoint is intact, "
                                 "so start the stage again once it is back")
            log.warning("changelog.outage", service=service, address=address, retry_in_s=delay, error=error)
            stopping.wait(min(delay, bound - waited) if bound else delay)
            delay = min(60.0, delay * 2)
        return since is not None

    def _outage(self) -> tuple[str, str, str] | None:
        """(service, address, error) of a service that does not answer, or None."""
        try:
            check_services(self.cfg)
        except (kafka.KafkaUnavailable, RegistryError, KinesisUnavailable) as exc:
            service, address = {kafka.KafkaUnavailable: ("kafka", self.cfg.kafka.bootstrap_servers),
                                KinesisUnavailable: ("kinesis", self.cfg.aws.endpoint_url)}.get(
                type(exc), ("registry", self.resolver.address))
            return service, str(address), str(exc)
        return None

    def _check_checkpoint(self) -> None:
        """A checkpoint records how far a subscription was read into one target; reading other topics, or
        into another target, from it would skip or mix data. The stage writes what it is for beside Spark's
        own files on first use (through Spark, so S3 checkpoints work) and refuses a mismatch."""
        settings = self.cfg.changelog
        path = f"{settings.checkpoint}/pipeline-changelog"
        mine = {**self._subscription(), "target": self.target}
        jvm = self.spark.sparkContext._jvm
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
        if not hadoop_path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()).exists(hadoop_path):
            # a new checkpoint, or one from before the stage recorded what it is for
            self.spark.createDataFrame([(json.dumps(mine),)], "value string").coalesce(1).write.text(path)
            return
        found = json.loads(self.spark.read.text(path).first()["value"])  # type: ignore[index]
        if found != mine:
            raise StageError(f"the checkpoint {settings.checkpoint} belongs to a changelog stage with {found}, "
                             f"but this one has {mine}: give this configuration its own changelog.checkpoint, "
                             "or run with the settings the checkpoint was made with")

    def _watch(self, query: StreamingQuery, stopping: threading.Event) -> None:
        """Log progress until the query ends or SIGTERM; while a trigger hangs, name a service that is down."""
        logged, stall, down = -1, Stall(self.cfg.changelog.stall_probe_s), False
        while not query.awaitTermination(1.0):
            logged = self._log_progress(query, logged)
            progress = (query.lastProgress or {}).get("timestamp")
            if stall.stalled(query.status["isTriggerActive"], progress, time.monotonic()):
                retry_in_s = stall.probe(time.monotonic())
                still_down = down if retry_in_s is None else self._log_outage(retry_in_s)
            else:
                still_down = False  # the trigger got through: Spark resumed by itself
            if down and not still_down:
                log.info("changelog.recovered")
            down = still_down
            if self._drained(query):
                query.stop()
                log.info("changelog.stopped", reason="caught up", last_batch=logged)
                return
            if stopping.is_set():
                while query.status["isTriggerActive"]:  # the running batch finishes first
                    time.sleep(0.2)
                query.stop()
                log.info("changelog.stopped", reason="SIGTERM", last_batch=logged)
                return
        self._log_progress(query, logged)

    def _log_outage(self, retry_in_s: float) -> bool:
        """Whether a service is down now, logged by name and address; the query keeps running, since Spark
        resumes once the service answers (and if it fails instead, `run` waits the outage out)."""
        outage = self._outage()
        if outage is None:
            return False
        service, address, error = outage
        log.warning("changelog.outage", service=service, address=address, retry_in_s=retry_in_s, error=error,
                    query="running")
        return True

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
                     control=report.control,
                     rows_per_s=round(progress.get("processedRowsPerSecond") or 0), lag=lag)
            logged = batch_id
        return logged

    @staticmethod
    def _on_sigterm(stopping: threading.Event) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    # -- one micro-batch -----------------------------------------------------------------------------

    def _process(self, batch: DataFrame, batch_id: int) -> None:
        """Land one micro-batch under the query's id, then hold its dead letters to the bound."""
        if self.cfg.changelog.source == "kinesis":
            batch = kinesis.kafka_shaped(batch, batch_id)
        report = BatchReport(batch_id, writer=self._query_id())
        self.land(batch, report)
        self.reports.append(report)
        self._hold_to_bound(report)

    def _hold_to_bound(self, report: BatchReport) -> None:
        """Stop the stage when the batch dead-lettered more than `changelog.dead_letters` allows. A replayed
        batch whose dead letters were already stored was judged when they were: it goes on, with a warning."""
        if report.dead_letters_skipped:
            log.warning("changelog.dead_letters_replayed", batch=report.batch_id,
                        hint="this batch's dead letters were stored before a stop or crash; "
                             "see them with `python -m pipeline dead-letters list`")
            return
        excess = report.dead_letter_excess(self.cfg.changelog.dead_letters)
        if excess is not None:
            self._stopped_by = DeadLetterBoundExceeded(
                f"{excess}. The dead letters are stored in {self.cfg.changelog.dead_letter_table} and the batch is "
                "not committed. See them with `python -m pipeline dead-letters list`, fix the cause (the reason "
                "names it), then `python -m pipeline dead-letters replay`; or raise the bound. Restarting the "
                "stage goes on past this batch.")
            raise self._stopped_by

    def land(self, batch: DataFrame, report: BatchReport, store_dead_letters: bool = True) -> None:
        """One job plans the batch (rows per topic, kind and schema id, and DMS JSON row types) and caches
        its rows; then each topic's rows are decoded and appended in one pass. Dead letters are gathered
        from what the plan and the appends' observed counts say is there, counted, and appended once
        (unless `store_dead_letters` is off: a replay of stored dead letters only counts what still fails)."""
        from pyspark.sql import functions as F

        batch_id = report.batch_id
        schema_id, compressed = self.framing.schema_id("headers" in batch.columns), self.framing.compressed()
        if self.cfg.changelog.source == "kinesis":  # DMS JSON only: no registry frames, no registry lookups
            schema_id, compressed = F.lit(None).cast("string"), F.lit(False)
        transport = [name for name in (*TRANSPORT_EXTRAS, *CARRIED) if name in batch.columns]
        raw = batch.select("key", "value", "topic", "partition", "offset", "timestamp", *transport,
                           schema_id.alias("schema_id"), compressed.alias("compressed"))
        raw = raw.withColumn("kind", framing.kind(F.col("schema_id"))).persist()
        try:
            plans = self._plan(raw)
            batch_rows = self._per_topic_tasks(raw, len(plans))
            report.rows_in = sum(plan.rows for plan in plans.values())
            report.tombstones = sum(plan.tombstones for plan in plans.values())
            report.records = {topic: plan.rows - plan.tombstones for topic, plan in plans.items()}
            dead = []
            if any(plan.unframed for plan in plans.values()):
                dead.append(self._dead(batch_rows.where(F.col("kind") == Kind.UNFRAMED.value), "WireFormatError",
                                       f"neither {self.framing.expected} nor a DMS JSON object"))
            for topic, plan in sorted(plans.items()):
                dead += self._topic(batch_rows.where(F.col("topic") == topic), plan, batch_id, report)
            self._append_dead_letters(dead, report, store_dead_letters)
        finally:
            raw.unpersist()

    def _per_topic_tasks(self, raw: DataFrame, topics: int) -> DataFrame:
        """The cached batch, read by as many tasks as one topic has partitions (at least one per core).

        Each topic's decode scans the whole cached batch, so with a task per Kafka partition a batch of twelve
        4-partition topics ran 48 mostly empty tasks per topic. A lone topic keeps a task per partition: 2M
        events of one 4-partition topic took 75 s coalesced to 2 cores, 62 s not."""
        cores, partitions = self.spark.sparkContext.defaultParallelism, raw.rdd.getNumPartitions()
        return raw.coalesce(max(cores, math.ceil(partitions / max(topics, 1))))

    def _append_dead_letters(self, dead: list[DataFrame], report: BatchReport, store: bool = True) -> None:
        """Every dead letter the batch produced, counted by topic and error class (for the bound) and, with
        `store`, appended once to the dead-letter table."""
        if not dead:
            return
        # A union of the topics' parts runs every part's tasks, each carrying the whole union's plan: with
        # 25 parts that was 1200 tasks and 47 s for 84 rows, unless coalesced to the cores.
        letters = functools.reduce(type(dead[0]).unionByName, dead)
        letters = letters.coalesce(self.spark.sparkContext.defaultParallelism).persist()
        try:
            for row in letters.groupBy("topic", "error_class").count().collect():
                report.dead_by_topic.setdefault(row["topic"], {})[row["error_class"]] = row["count"]
            if store:
                done = self._append(letters, self.cfg.changelog.dead_letter_table, report.batch_id, report,
                                    partition_by_source_time=False)
                report.dead_letters, report.dead_letters_skipped = done.rows, done.skipped
            else:
                report.dead_letters = sum(sum(classes.values()) for classes in report.dead_by_topic.values())
        finally:
            letters.unpersist()

    def _plan(self, raw: DataFrame) -> dict[str, TopicPlan]:
        from pyspark.sql import functions as F

        json_rows = F.when(F.col("kind") == Kind.JSON.value, F.col("value"))
        groups = (raw.groupBy("topic", "kind", "schema_id")
                  .agg(F.count(F.lit(1)).alias("rows"), F.count_if("compressed").alias("compressed"),
                       decode.dms_json_row_type(json_rows).alias("row_type")).collect())
        plans: dict[str, TopicPlan] = {}
        for group in groups:
            plan = plans.setdefault(group["topic"], TopicPlan(group["topic"]))
            plan.add(Kind(group["kind"]), group["schema_id"], group["rows"], group["row_type"], group["compressed"])
        return plans

    def _topic(self, rows: DataFrame, plan: TopicPlan, batch_id: int, report: BatchReport) -> list[DataFrame]:
        """Decode one topic's rows (per writer schema id, and DMS JSON); append; return its dead letters: what
        did not decode, and what decoded but must not land (`cdc.normalize.rejections`)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        db, table = plan.topic.split(".")[0], plan.topic.rsplit(".", 1)[-1]
        try:
            name = lake_table_name(db, table)
        except UnmappableName as exc:  # unframed rows are dead letters already; tombstones carry nothing
            return [self._dead(rows.where(F.col("kind").isin(Kind.FRAMED.value, Kind.JSON.value)), exc.error_class,
                               str(exc))]
        # (format, rows with `v` and `_valid`, dead letter, reader schema text)
        decoded: list[tuple[str, DataFrame, str, str, str | None]] = []
        dead: list[DataFrame] = []
        unresolved: dict[tuple[str, str], list[str]] = {}  # (error class, reason) -> ids
        by_reader: dict[str, dict[str, str]] = {}
        for schema_id, writer in self.resolver.writers(plan.topic, plan.framed).items():
            if isinstance(writer, UnresolvedSchemaId):
                unresolved.setdefault((writer.error_class, str(writer)), []).append(schema_id)
            else:
                by_reader.setdefault(self.resolver.reader(plan.topic, writer), {})[schema_id] = writer
        framed = rows.where(F.col("kind") == Kind.FRAMED.value)
        for (error_class, reason), ids in unresolved.items():
            dead.append(self._dead(framed.where(F.col("schema_id").isin(ids)), error_class, reason))
        for reader, writers in by_reader.items():
            schema = json.loads(reader)
            control = control_kind(schema)
            if control is not None:  # heartbeats and transaction metadata: counted, never landed
                report.control[control] = report.control.get(control, 0) + sum(plan.framed[i] for i in writers)
                continue
            try:
                fmt = detect_format(schema)
            except ValueError as exc:
                dead.append(self._dead(framed.where(F.col("schema_id").isin(list(writers))), "UnknownFormat",
                                       f"{exc}: land it with its own pipeline, or leave the topic out"))
                continue
            part = decode.avro(framed.where(F.col("schema_id").isin(list(writers))), self.framing, writers, reader,
                               inflate=plan.compressed > 0)
            decoded.append((fmt, part, "MalformedAvro", "the body does not decode with the schema its header names",
                            reader))
        if plan.json_rows:
            part = decode.dms_json(rows.where(F.col("kind") == Kind.JSON.value), plan.row_type)
            decoded.append(("dms-json", part, "WireFormatError",
                            "starts like JSON but is not a DMS JSON record: a JSON object with data and metadata "
                            "(operation, timestamp, transaction-record-id)", None))
        if not decoded:
            return dead
        keys = self.cfg.mirror.key_columns(name)
        refused = [rejections(part, fmt, reader, keys) for fmt, part, _, _, reader in decoded]
        observations = [Observation(f"invalid {plan.topic} {batch_id} {i}") for i in range(len(decoded))]
        changes = functools.reduce(
            lambda a, b: a.unionByName(b, allowMissingColumns=True),
            [normalize(part.observe(seen, F.count_if(~F.col(decode.VALID)).alias("n"),
                                    F.count_if(F.col(decode.VALID) & any_rejection(checks)).alias("refused"))
                       .where(F.col(decode.VALID) & ~any_rejection(checks)), fmt, db, reader)
             for (fmt, part, _, _, reader), seen, checks in zip(decoded, observations, refused)])
        done = self._append(changes, name, batch_id, report)
        for (_, part, error_class, message, _), seen, checks in zip(decoded, observations, refused):
            if done.skipped or seen.get["n"]:  # a replayed batch observed nothing: look again
                dead.append(self._dead(part.where(~F.col(decode.VALID)), error_class, message))
            if done.skipped or seen.get["refused"]:
                for i, (condition, refusal, reason) in enumerate(checks):  # each row once, by its first reason
                    dead.append(self._dead(part.where(F.col(decode.VALID) & condition & ~any_rejection(checks[:i])),
                                           refusal, reason))
        return dead

    @staticmethod
    def _dead(rows: DataFrame, error_class: str, message: str) -> DataFrame:
        from pyspark.sql import functions as F

        transport = [name for name in (*TRANSPORT_EXTRAS, *CARRIED) if name in rows.columns]
        return rows.select("key", "value", "topic", "partition", "offset", "timestamp", *transport,
                           F.col("schema_id").cast("string").alias("schema_id"),
                           F.lit(error_class).alias("error_class"), F.lit(message).alias("error_message"))

    # -- idempotent appends --------------------------------------------------------------------------

    def _query_id(self) -> str:
        """The query's id, which Spark keeps in the checkpoint: stable across restarts of the same query, new
        for a new checkpoint (whose batch ids start again at 0). Read through Spark, so S3 checkpoints work."""
        if self._id is None:
            metadata = self.spark.read.text(f"{self.cfg.changelog.checkpoint}/metadata").first()
            self._id = json.loads(metadata["value"])["id"]  # type: ignore[index]
        return self._id

    def _append(self, rows: DataFrame, name: str, batch_id: int, report: BatchReport,
                partition_by_source_time: bool = True) -> Appended:
        from pyspark.sql import functions as F

        rows = rows.withColumn("_ingested_at", F.current_timestamp()).withColumn("_batch_id", F.lit(batch_id).cast("long"))
        done = self.appender.append(rows, name, report.writer or self._query_id(), batch_id, partition_by_source_time)
        if done.skipped:
            report.skipped.append(done.table)
        elif done.rows:
            report.tables[done.table] = done.rows
        if self.glue is not None:  # a replayed batch too: a crash between the commit and Glue is repaired
            self.glue.sync(self.cfg.changelog.namespace, name)
        return done


@dataclass
class Stall:
    """Whether the running trigger hangs, and when to probe the services about it.

    Spark's Kafka source does not fail when the broker goes away: its admin client waits out three tries of
    `default.api.timeout.ms` (a minute each) first, and meanwhile the trigger just hangs. A trigger that runs
    for `after_s` with no new progress report is worth a probe (a long batch too; it finds nothing wrong);
    probes back off from one second to a minute apart, so a long outage is not a log line a second.
    """

    after_s: float
    _progress: object = None  # the last progress report seen (its timestamp)
    _since: float | None = None  # when the running trigger was first seen after it; None while none runs
    _next_probe: float = 0.0
    _delay: float = 1.0

    def stalled(self, active: bool, progress: object, now: float) -> bool:
        """Whether the trigger seen running has gone `after_s` without a new progress report; an idle moment or
        a new report starts the wait, and the probes' backoff, again."""
        if not active or progress != self._progress or self._since is None:
            self._progress, self._since = progress, now if active else None
            self._next_probe, self._delay = 0.0, 1.0
            return False
        return now - self._since >= self.after_s

    def probe(self, now: float) -> float | None:
        """When a probe is due now, the seconds until the next one; else None."""
        if now < self._next_probe:
            return None
        delay, self._delay = self._delay, min(60.0, self._delay * 2)
        self._next_probe = now + delay
        return delay


def _found_nothing_new(query: StreamingQuery) -> bool:
    """The last trigger asked the source for new records and found none: the stream is drained."""
    status = query.status
    return (not status["isTriggerActive"] and not status["isDataAvailable"]
            and status["message"] == "Waiting for data to arrive")
