"""One micro-batch into the changelog: decode -> normalise -> route -> idempotent append -> dead letters.

The rows are in the shape Spark's Kafka source gives (key, value, topic, partition, offset, timestamp, and
transport columns such as Kafka's headers or Kinesis's sequence number); a transport puts its records in it.
Values are registry-framed Avro (`registry.wire_format`: Confluent, Apicurio legacy or Glue, or Apicurio's
header ids), decoded on the JVM with one `from_avro` per writer schema (the subject's latest version as the
reader schema), or DMS JSON through a variant (`cdc/decode.py`), and normalised into the canonical change record
(`cdc/normalize.py`); Debezium envelopes of the row types it reads (plain and semantic) are decoded straight
into that record by the pipeline's own Spark function instead (`cdc/native.py`). Changes are routed by topic `<db>.<schema>.<table>` to
`<catalog>.changelog.<db>_<table>` (Iceberg) or `<lake.delta_root>/changelog/<db>_<table>` (Delta), as
`names.*` names it, unless that table holds another source table (`tables/owners.py`); DMS JSON by the table its
metadata names, whatever the topic, and DMS control records are counted, their table-def kept with the table
(`cdc/dms_tables.py`). A new table keeps its key (`tables/keys.py`): a Debezium record key's fields, a DMS
table-def's primary key. Records
that cannot be decoded, or must not land, go with their raw bytes and the reason to the `dead_letters` table
beside them; they never block a partition.

Two ways to land a topic's rows:
- one pass (`land_topics`): the topic's rows are decoded and appended as they are read, the writers being every
  version of the topic's subject, asked of the registry; what that does not cover is counted on the way and,
  unless it is all dead letters, only then read again and planned. This is how Kafka batches land; their quiet topics'
  appends are one Spark job, each table committed through Iceberg's Java API (`tables/append.py`,
  `ManyTablesAppender`).
- planned (`land`): one job reads and caches the rows to find their topics, kinds and schema ids, then each
  topic is decoded from the cache. This is how dead letters replayed land, and a Kinesis batch of tables whose
  row types are not known yet.
- learned (`land_learned`): DMS JSON rows of many tables in one stream (Kinesis), of tables whose row types
  earlier batches found: each table's rows are decoded and appended as they are read (the first table's job
  reads the batch, the next ones its cache); what those types do not cover exactly is counted on the way and
  then landed the planned way A record whose shape an earlier batch found to fit its
  table's type is let through without the fit check's regular expression.

Every append is idempotent per (writer id, batch id) (`tables/append.py`), so a batch replayed after a crash
skips the tables it already wrote.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Collection, Generator, Mapping, Protocol, Sequence, TypeVar

import structlog

from cdc import decode, dms_tables, framing, native
from cdc.columns import lake_column
from cdc.control import control_kind
from cdc.framing import Framing, Kind
from cdc.normalize import TRANSPORT_EXTRAS, any_rejection, detect_format, normalize, read_schema, rejections
from pipeline.stages.changelog import quiet
from pipeline.stages.changelog.quiet import QuietTopic
from pipeline.stages.changelog.report import BatchReport
from pipeline.config.settings import PipelineConfig
from pipeline.runtime.hadoop_files import read_text, write_text
from registry.ids import UnresolvedSchemaId
from registry.resolver import resolver_from_settings
from tables.append import (BATCH_STARTED, SOURCE_PROPERTY, Appended, Appender, Created, DeltaAppender,
                           IcebergAppender, ManyTablesAppender, RECORD_HINTS, Staged)
from tables.glue_delta import DeltaGlue
from tables.keys import DMS_TABLE_DEF_PROPERTY, keys_property, stored_keys
from tables.lake import create_namespace, lake_table, table_names
from tables.names import SourceTable, UnmappableName
from tables.owners import Owners

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = structlog.get_logger(__name__)

FITS = "_fits"  # a row that `land_learned` lands with its topic's learned row type
SHAPE = "_shape"  # the record's own type (`decode.row_shape`), which decides whether it fits
KNOWN = "_known_shape"  # its shape is one an earlier batch found to fit (`land_learned`'s `shapes`)
CARRIED = ("headers",)  # Kafka headers (registry ids may travel there): kept with a dead letter, for its replay
KEYED_BY_RECORD = frozenset({"debezium", "debezium-unwrapped", native.FORMAT})  # the Kafka key is the table's key
DEFINITIONS = "dms-table-defs"  # checkpoint folder: DMS table definitions of tables not created yet
STAMPS = {"_ingested_at": "timestamp", "_batch_id": "long"}  # the columns `stamped` adds, and their types
MALFORMED = ("MalformedAvro", "the body does not decode with the schema its header names")  # error class, message
WIRE_FORMAT = "WireFormatError"  # the error class of a record that is not in the transport's format
NOT_DMS_JSON = (WIRE_FORMAT, "starts like JSON but is not a DMS JSON record: a JSON object with data and "
                "metadata (an operation and a timestamp)")


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
    fitting: bool = False  # the DMS JSON rows fit `row_type` exactly (`decode.fits`): `decode.dms_json_fitting`
    control: dict[str, int] = field(default_factory=dict)  # DMS control records by operation
    table_def: str | None = None  # the newest DMS `table-def` among them (`cdc/dms_tables.py`)

    def add(self, kind: Kind, schema_id: str | None, rows: int, row_type: str | None, compressed: int,
            operations: Sequence[str] = (), table_def: str | None = None) -> None:
        self.rows += rows
        self.compressed += compressed
        if kind is Kind.TOMBSTONE:
            self.tombstones += rows
        elif kind is Kind.CONTROL:
            for name in operations:
                self.control[name] = self.control.get(name, 0) + 1
            self.table_def = table_def
        elif kind is Kind.UNFRAMED:
            self.unframed += rows
        elif kind is Kind.JSON:
            self.json_rows, self.row_type = rows, row_type
        else:
            self.framed[str(schema_id)] = rows


class BatchTopics(Protocol):
    """A batch's topics for `Landing.land_topics` (`kafka_offsets.BatchReads`): each topic's records, read by
    themselves or several topics' by one read, and which topics bring a few records each."""

    @property
    def names(self) -> list[str]: ...

    @property
    def quiet(self) -> frozenset[str]: ...

    def read(self, topic: str) -> DataFrame: ...

    def together(self, topics: Collection[str]) -> DataFrame: ...


@dataclass(frozen=True)
class Request:
    """The append a topic's landing asks for (`_topic_steps`): its change rows, not stamped yet, and its table."""

    rows: DataFrame
    name: str
    source: SourceTable


T = TypeVar("T")
# A topic's landing as steps: it yields the append it needs, is sent the append done, and returns what it found.
# Driven by `_driven` (each append its own write), or stopped at its append for the one job (`land_topics`).
Steps = Generator[Request, Appended, T]


@dataclass(frozen=True)
class Waiting:
    """A quiet topic's landing stopped at its append, staged for the batch's one job (`land_topics`); `staged`
    None: the job does not take the table (`ManyTablesAppender.stage`), the append is a write of its own."""

    steps: Steps[list[DataFrame]]
    request: Request
    staged: Staged | None


@dataclass(frozen=True)
class Learned:
    """What `land_learned` saw: rows landed with their topic's learned row type, and the plan of the rest."""

    landed: dict[str, int]
    rest: dict[str, TopicPlan]
    shapes: dict[str, list[str]] = field(default_factory=dict)  # topic -> shapes found to fit, not known before


@dataclass(frozen=True)
class Leftover:
    """What one pass of a topic did not decode (`rest` records, tombstones aside): of it, records sure to be dead
    letters (`stray`) and uncompressed envelopes of ids of no writer it knew (`unlisted`, of `unlisted_ids`)."""

    rest: int
    stray: int
    unlisted: int
    unlisted_ids: Sequence[str]


class Landing:
    def __init__(self, cfg: PipelineConfig, spark: SparkSession) -> None:
        self.cfg = cfg
        self.spark = spark
        self.resolver = resolver_from_settings(cfg.registry, cfg.aws)
        self.framing = Framing.of(cfg.registry.wire_format)
        self.namespace = f"{cfg.catalog.name}.{cfg.changelog.namespace}"
        delta_root = f"{cfg.lake.delta_root}/{cfg.changelog.namespace}"
        self.target = f"delta tables under {delta_root}" if cfg.lake.format == "delta" else f"iceberg {self.namespace}"
        self.appender: Appender = (DeltaAppender(spark, delta_root) if cfg.lake.format == "delta"
                                   else changelog_appender(cfg, spark))
        self.glue = DeltaGlue.enabled(cfg, spark)  # Delta tables registered in Glue for Athena
        self._has_native: bool | None = None  # the session has `cdc/native.py`'s function (asked once)
        self.owners = changelog_owners(cfg, spark)
        self._keys: dict[str, list[str]] = {}  # table -> the key it keeps (or will keep), asked once a process
        self.many = (ManyTablesAppender(self.appender) if isinstance(self.appender, IcebergAppender)
                     and cfg.changelog.one_job_topics else None)  # the quiet topics' one job (`land_topics`)

    def prepare(self) -> None:
        """Create the changelog namespace (Iceberg) before a first batch needs it."""
        if self.cfg.lake.format == "iceberg":
            create_namespace(self.spark, self.cfg.catalog.name, self.cfg.changelog.namespace)

    def land(self, batch: DataFrame, report: BatchReport, store_dead_letters: bool = True,
             registry_frames: bool = True) -> None:
        """Land Kafka-shaped rows of any topics, planned by reading them (`_planned`); dead letters are appended
        once (unless `store_dead_letters` is off: a replay of stored dead letters only counts what still fails).
        `registry_frames` off: the values are DMS JSON only, so no registry is asked."""
        raw = self._routed(self._classified(batch, registry_frames)).persist()
        try:
            self.append_dead_letters(self._planned(raw, report), report, store_dead_letters)
        finally:
            raw.unpersist()

    def land_topics(self, topics: BatchTopics, report: BatchReport) -> None:
        """Land a batch topic by topic, each topic's records read once (`_one_pass`); dead letters last.

        Up to `changelog.concurrent_topics` topics land at once, each in a thread of its own with a report of
        its own (merged in topic order): a topic's driver work (registry calls, building its plan over py4j,
        the Iceberg commit) is a second or so that would otherwise leave the executors idle.

        The quiet topics (a few records each, `kafka_offsets.ONE_TASK_RECORDS`), on Iceberg with
        `changelog.one_job_topics`, are not written one by one. Those of Debezium envelopes the native decoder
        reads are decoded by one plan and appended by one job (`quiet.py`); each then goes on as after a write
        of its own (its counts, its dead letters and the rest of its records). Each other quiet topic's landing
        stops at its append with its table staged (`ManyTablesAppender.stage`: checked, created if new,
        planned), one Spark job writes every staged table and commits each through Iceberg's Java API, and
        each landing goes on from there. A table neither job takes (new columns, another partitioning) is
        appended by a write of its own."""
        one_job = topics.quiet if topics.quiet and self.many is not None and self._native_session() else frozenset()
        self.owners.claim_first((SourceTable.of_topic(topic) for topic in sorted(topics.names)),
                               self.cfg.changelog.concurrent_topics)
        quiet_topics = [topic for topic in topics.names if topic in one_job]
        headers = self.framing.reads_headers
        listing = self.resolver.group_listing(quiet_topics)  # one search for all, or None

        def prepared(topic: str) -> QuietTopic | None:
            return self._quiet_topic(topic, self.resolver.subject_writers(topic, headers, listing), report)

        together = [found for found in self._in_threads(prepared, [(topic,) for topic in quiet_topics])
                    if found is not None]
        landed: dict[str, tuple[BatchReport, list[DataFrame] | Waiting]] = (
            dict(self._land_together(together, topics, report)) if together else {})

        def one(topic: str) -> tuple[BatchReport, list[DataFrame] | Waiting]:
            part, raw = report.part(), self._classified(topics.read(topic))
            if topic in one_job:
                return part, self._staged(self._one_pass_steps(raw, topic, part), part)
            return part, self._one_pass(raw, topic, part)

        others = [topic for topic in topics.names if topic not in landed]
        landed.update(zip(others, self._in_threads(one, [(topic,) for topic in others])))
        waiting = [topic for topic, (_, found) in landed.items() if isinstance(found, Waiting)]
        if waiting:
            done = self._one_job([landed[topic][1] for topic in waiting], report)  # type: ignore[misc]
            resumed = self._in_threads(self._resumed, [(*landed[topic], appended)
                                                       for topic, appended in zip(waiting, done)])
            landed.update({topic: (landed[topic][0], letters) for topic, letters in zip(waiting, resumed)})
        dead: list[DataFrame] = []
        for topic in topics.names:
            part, letters = landed[topic]
            report.merge(part)
            dead += letters  # type: ignore[arg-type]  # every Waiting was resumed
        self.append_dead_letters(dead, report)

    def _quiet_topic(self, topic: str, writers: dict[str, str], report: BatchReport) -> QuietTopic | None:
        """A quiet topic's driver work for the one plan (`quiet.py`), given its subject's writers
        (`SchemaResolver.subject_writers`): its reader, table and key. None when the plan
        does not take it (not Debezium envelopes the native decoder reads, a name it cannot map, a table whose
        columns the batch changes): it lands as any other quiet topic."""
        by_reader, unresolved = self._by_reader(topic, dict(writers))
        if unresolved or len(by_reader) != 1:
            return None
        [(reader, of_reader)] = by_reader.items()
        if not _lands(reader):
            return None
        schema = json.loads(reader)
        if detect_format(schema) != "debezium" or not self._native("debezium", schema, of_reader, TopicPlan(topic)):
            return None
        source = SourceTable.of_topic(topic)
        try:
            name = self.owners.claim(source)
        except UnmappableName:
            return None  # dead-lettered by the per-topic path, which names why
        keys = self.cfg.mirror.key_columns(name) or self._key(name, topic, {native.FORMAT})
        config = native.config(of_reader, reader)
        assert self.many is not None
        target = self.many.target(quiet.change_record(self.spark, config), name, report.writer, report.batch_id,
                                  created=self._creating(source, name))
        return None if target is None else QuietTopic(topic, name, source, reader, of_reader, config, keys, target)

    def _land_together(self, together: list[QuietTopic], topics: BatchTopics, report: BatchReport
                       ) -> list[tuple[str, tuple[BatchReport, list[DataFrame]]]]:
        """The one plan's topics decoded and appended by one job (`quiet.append`), then each topic's counts, dead
        letters and the rest of its records (`_leftover`), as after a write of its own. Per topic, its report and
        dead letters."""
        from pyspark.sql import functions as F

        rows = self._classified(topics.together([t.topic for t in together])).withColumns(
            {quiet.BODY_OFFSET: self.framing.body_offset(), quiet.STRAY: _stray()})
        counted = quiet.append(self.spark, rows, together, report.writer, report.batch_id,
                               stamp_values(report.batch_id), {BATCH_STARTED: str(report.started_ms)},
                               self.cfg.changelog.concurrent_topics)

        def after(topic: QuietTopic, found: quiet.Counted) -> tuple[str, tuple[BatchReport, list[DataFrame]]]:
            part, target = report.part(), topic.target
            done = self._recorded(Appended(target.name, found.written, target.skipped), topic.name, part)
            self._counted(topic.topic, found.rows, found.tombstones, found.ids, done, part)
            part.one_plan.append(topic.topic)
            dead: list[DataFrame] = []
            if found.invalid or found.refused or found.rest:
                raw = self._classified(topics.read(topic.topic))
                handled = _handled(topic.writers)
                if found.invalid or found.refused:
                    decoded = native.decoded(raw.where(handled), self.framing, topic.writers, topic.reader)
                    dead += self._rejected(decoded, *MALFORMED, native.rejections(decoded, topic.reader, topic.keys),
                                           invalid=found.invalid > 0, refused=found.refused > 0)
                if found.rest:
                    leftover = Leftover(found.rest, found.stray, found.unlisted, found.unlisted_ids)
                    dead += self._leftover(raw, ~handled & (F.col("kind") != Kind.TOMBSTONE.value), topic.topic,
                                           leftover, part)
            return topic.topic, (part, dead)

        return self._in_threads(after, list(zip(together, counted)))

    def _in_threads(self, work: Callable[..., T], items: Sequence[tuple]) -> list[T]:
        """`work(*item)` for each item, `changelog.concurrent_topics` at a time, in the items' order."""
        from pyspark import inheritable_thread_target

        workers = min(self.cfg.changelog.concurrent_topics, len(items))
        if workers <= 1:
            return [work(*item) for item in items]
        with ThreadPoolExecutor(workers, thread_name_prefix="land") as pool:
            return list(pool.map(inheritable_thread_target(self.spark)(work), *zip(*items)))

    def _staged(self, steps: Steps[list[DataFrame]], report: BatchReport) -> list[DataFrame] | Waiting:
        """A quiet topic's landing up to its append, its table staged for the one job; or its dead letters, when
        it landed without one (nothing to append, or every record the planned way)."""
        try:
            request = next(steps)
        except StopIteration as stop:
            return stop.value
        assert self.many is not None
        staged = self.many.stage(placeholders(request.rows), request.name, report.writer, report.batch_id,
                                 created=self._creating(request.source, request.name))
        return Waiting(steps, request, staged)

    def _one_job(self, waiting: list[Waiting], report: BatchReport) -> list[Appended | None]:
        """The staged tables written by one Spark job and committed (`ManyTablesAppender.append`); None for a
        table the job does not take."""
        assert self.many is not None
        staged = [found.staged for found in waiting if found.staged is not None]
        if not staged:
            return [None] * len(waiting)
        appended = iter(self.many.append(staged, report.writer, report.batch_id, stamp_values(report.batch_id),
                                         {BATCH_STARTED: str(report.started_ms)}, self.cfg.changelog.concurrent_topics))
        return [next(appended) if found.staged is not None else None for found in waiting]

    def _resumed(self, report: BatchReport, waiting: Waiting, done: Appended | None) -> list[DataFrame]:
        """A quiet topic's landing from its append on, given the one job's append (None: a write of its own)."""
        request = waiting.request
        if done is None:
            done = self.append(request.rows, request.name, report, source=request.source)
        else:
            self._recorded(done, request.name, report)
        try:
            waiting.steps.send(done)
        except StopIteration as stop:
            return stop.value
        raise AssertionError(f"the landing of {request.name} asked for a second append")

    def _driven(self, steps: Steps[T], report: BatchReport) -> T:
        """A landing's steps run to their end, each append it asks for a write of its own (`append`)."""
        try:
            request = next(steps)
            while True:
                request = steps.send(self.append(request.rows, request.name, report, source=request.source))
        except StopIteration as stop:
            return stop.value

    def land_learned(self, batch: DataFrame, row_types: dict[str, str], report: BatchReport,
                     shapes: Mapping[str, Sequence[str]] | None = None) -> Learned:
        """Land DMS JSON rows (no registry frames) of topics whose row types are known before they are read
        (`row_types`, topic -> a `decode.learnable` type, in the order to land them), each topic in one job that
        decodes and appends; the first of those jobs is the one that reads the batch (persisted as it goes
        when there are next topics). What they do not cover exactly (`decode.fits`: another topic, a new key, another
        type; not DMS JSON) is counted on the way and, only when there is some, landed the planned way under a
        writer id of its own, so that a replay given the same `row_types` skips or lands each part once. With
        no row types the batch lands the planned way under the batch's own writer id. Dead letters last.

        `shapes` (topic -> record shapes, `decode.row_shape`, that fit its row type) lets a record of a known shape
        through without `decode.fits`' regular expression, which cost about 6 µs a record (5-10% of the batch's
        CPU); the rows that fit are the same. The shapes found to fit that were not known are returned, for the
        next batch.

        The batch is cached only when something reads it again (the next topics, or the planned way). With one
        learned topic it is not: Spark's adaptive execution turns a cache in a write's plan into a job of its own
        that reads the whole batch into the cache first, so the read and the landing ran one after the other,
        not as one job. The rest, when there is some, is read again from the source (a second read of a batch
        reads exactly its records) and cached by itself."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        shapes = shapes or {}
        shape = F.col(SHAPE)
        fitting = _by_topic([(t, decode.fits(shape, row_type)) for t, row_type in row_types.items()])
        known = _by_topic([(t, shape.isin(*shapes[t])) for t in row_types if shapes.get(t)])
        cache_batch = len(row_types) != 1  # read more than once: by the next topics, or all of it the planned way
        classified = self._classified(batch, registry_frames=False)
        cached = [classified.persist()] if cache_batch else []
        # which rows fit is worked out above the cache (when there is one), which keeps the batch as the planned
        # way caches it
        raw = (classified.withColumn(SHAPE, decode.row_shape(F.col(decode.PARSED)))
               .withColumn(KNOWN, known)
               .withColumn(FITS, (F.col("kind") == Kind.JSON.value) & (F.col(KNOWN) | fitting)))
        try:
            if not row_types:
                planned = self._routed(raw)
                plans = self._plan(planned)
                self.append_dead_letters(self._planned(planned, report, plans), report)
                return Learned({}, plans)
            topics = list(row_types)
            found = F.col(FITS) & ~F.col(KNOWN)
            counts = (F.count_if(~F.col(FITS)).alias("rest"),
                      *(F.count_if(F.col(FITS) & (F.col("topic") == t)).alias(f"t{i}") for i, t in enumerate(topics)),
                      *(F.collect_set(F.when(found & (F.col("topic") == t), shape)).alias(f"s{i}")
                        for i, t in enumerate(topics)))
            seen = Observation(f"learned {report.batch_id}")
            dead, done = self._topic(raw.observe(seen, *counts).where(F.col(FITS) & (F.col("topic") == topics[0])),
                                     TopicPlan(topics[0], json_rows=1, row_type=row_types[topics[0]], fitting=True),
                                     report.batch_id, report)
            observed = raw.agg(*counts).first() if done is None or done.skipped else seen.get  # a replay: count
            landed = {t: observed[f"t{i}"] for i, t in enumerate(topics)}
            new_shapes = {t: sorted(observed[f"s{i}"]) for i, t in enumerate(topics) if observed[f"s{i}"]}
            for topic in topics[1:]:
                if landed[topic]:
                    dead += self._topic(raw.where(F.col(FITS) & (F.col("topic") == topic)),
                                        TopicPlan(topic, json_rows=1, row_type=row_types[topic], fitting=True),
                                        report.batch_id, report)[0]
            report.rows_in += sum(landed.values())  # the rest's rows are counted by its plan
            for topic, n in landed.items():
                report.records[topic] = report.records.get(topic, 0) + n
            plans: dict[str, TopicPlan] = {}
            if observed["rest"]:
                rest, rows = report.rest(), self._routed(raw.where(~F.col(FITS)))
                if not cache_batch:
                    rows = rows.persist()
                    cached.append(rows)
                plans = self._plan(rows)
                dead += self._planned(rows, rest, plans)
                report.merge(rest)
                report.planned += sorted(plans)
            self.append_dead_letters(dead, report)
            return Learned(landed, plans, new_shapes)
        finally:
            for frame in cached:
                frame.unpersist()

    def _classified(self, batch: DataFrame, registry_frames: bool = True) -> DataFrame:
        """The rows with their writer schema id, whether the body is compressed, their kind (`cdc.framing`) and,
        for DMS JSON, the value parsed (`decode.PARSED`: the transport's, when it parsed it already)."""
        from pyspark.sql import functions as F

        schema_id, compressed, kind = frame_columns(self.framing, "headers" in batch.columns, registry_frames)
        transport = [name for name in (*TRANSPORT_EXTRAS, *CARRIED, decode.PARSED) if name in batch.columns]
        raw = batch.select("key", "value", "topic", "partition", "offset", "timestamp", *transport,
                           schema_id.alias("schema_id"), compressed.alias("compressed")).withColumn("kind", kind)
        if decode.PARSED in batch.columns:
            return raw
        return raw.withColumn(decode.PARSED, F.when(F.col("kind") == Kind.JSON.value,
                                                    decode.parsed_json(F.col("value"))))

    @staticmethod
    def _routed(raw: DataFrame) -> DataFrame:
        """`_classified` rows to be planned, DMS JSON going to the table its metadata names whatever the topic, and
        its control records told apart (`cdc/dms_tables.py`). Only rows that are planned: in the projection that
        classifies every record, the four metadata lookups doubled its generated code (12 to 22 kB of bytecode,
        past what HotSpot compiles), and registry-framed rows, which land in one pass, need none of it."""
        from pyspark.sql import functions as F

        parsed = F.col(decode.PARSED)
        return (raw.withColumn("topic", dms_tables.routed_topic(F.col("topic"), parsed))
                .withColumn("kind", F.when(dms_tables.is_control(parsed), F.lit(Kind.CONTROL.value))
                            .otherwise(F.col("kind"))))

    def _one_pass(self, raw: DataFrame, topic: str, report: BatchReport) -> list[DataFrame]:
        """`_one_pass_steps`, each append a write of its own."""
        return self._driven(self._one_pass_steps(raw, topic, report), report)

    def _one_pass_steps(self, raw: DataFrame, topic: str, report: BatchReport) -> Steps[list[DataFrame]]:
        """One topic's records (`_classified`) decoded and appended as they are read, with no pass to plan
        them: the writers are every version of the topic's subject (`SchemaResolver.subject_writers`), asked
        of the registry per batch, which holds every version the batch's records were written with by then.

        What that does not cover is counted on the way (an id of no version of the subject, DMS JSON, unframed
        bytes, a compressed body): when all of it is sure to be dead letters (`_dead_leftover`), it is; else it is
        read again and landed the planned way (`_planned`) under a writer id of its own, so that a replay skips
        or lands each part once. The part is the same on a replay: a batch's ids are versions of the subject or
        not, whenever it is asked."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        writers = self.resolver.subject_writers(topic, self.framing.reads_headers)
        by_reader, _ = self._by_reader(topic, dict(writers))
        if not writers or not all(_lands(reader) for reader in by_reader):
            # no subject the registry can list, or heartbeats: plan by reading
            report.planned.append(topic)
            cached = self._routed(raw).persist()
            try:
                return self._planned(cached, report)
            finally:
                cached.unpersist()
        handled = _handled(writers)
        tombstone = F.col("kind") == Kind.TOMBSTONE.value
        unlisted = ~handled & _unlisted()
        counts = (F.count(F.lit(1)).alias("rows"), F.count_if(tombstone).alias("tombstones"),
                  F.count_if(~handled & ~tombstone).alias("rest"), F.count_if(_stray()).alias("stray"),
                  F.count_if(unlisted).alias("unlisted"),
                  F.collect_set(F.when(handled, F.col("schema_id"))).alias("ids"),
                  F.collect_set(F.when(unlisted, F.col("schema_id"))).alias("unlisted_ids"))
        seen = Observation(f"one pass {topic} {report.batch_id}")
        dead, done = yield from self._topic_steps(raw.observe(seen, *counts).where(handled), TopicPlan(topic),
                                                  report.batch_id, report, grouped=(by_reader, {}))
        observed = raw.agg(*counts).first() if done is None or done.skipped else seen.get  # a replay: count
        self._counted(topic, observed["rows"], observed["tombstones"], observed["ids"], done, report)
        if observed["rest"]:
            leftover = Leftover(observed["rest"], observed["stray"], observed["unlisted"], observed["unlisted_ids"])
            dead += self._leftover(raw, ~handled & ~tombstone, topic, leftover, report)
        return dead

    def _counted(self, topic: str, rows: int, tombstones: int, ids: Sequence[str], done: Appended | None,
                 report: BatchReport) -> None:
        """A topic's records landed in one pass, counted in the report; the writer ids they carried told to the
        resolver (before the rest, whose ids may need the kind they show)."""
        self.resolver.carried(topic, ids)
        report.one_pass[topic] = report.one_pass.get(topic, 0) + (done.rows if done is not None else 0)
        report.rows_in += rows
        report.tombstones += tombstones
        report.records[topic] = report.records.get(topic, 0) + rows - tombstones

    def _leftover(self, raw: DataFrame, rest: Column, topic: str, leftover: Leftover, report: BatchReport
                  ) -> list[DataFrame]:
        """The dead letters of what one pass of a topic (`raw`, `_classified`) did not decode (its rows where
        `rest`): as `_dead_leftover` finds them, or by landing it the planned way (`_rest`)."""
        found = self._dead_leftover(raw, topic, leftover)
        return found if found is not None else self._rest(raw.where(rest), topic, report)

    def _dead_leftover(self, raw: DataFrame, topic: str, leftover: Leftover) -> list[DataFrame] | None:
        """What one pass of a topic did not decode, as dead letters, when all of it is sure to be: records neither
        framed nor DMS records (`_stray`), and envelopes of ids the registry resolves to no writer. They get the
        planned way's errors, in one part (the topic is read once more, with the batch's other dead letters),
        without the jobs that read the topic again to plan and decode it: a topic with a poison record paid them
        every batch. None when the planned way must look: some of it may land (a compressed body, DMS JSON, an id
        the registry resolves), or the topic's table name is refused, which the planned way names."""
        from pyspark.sql import functions as F

        if leftover.rest != leftover.stray + leftover.unlisted:
            return None
        try:  # first, as the planned way does: a refused name asks the registry nothing
            self.owners.claim(SourceTable.of_topic(topic))
        except UnmappableName:
            return None
        by_reader, unresolved = self._by_reader(topic, self.resolver.writers(topic, leftover.unlisted_ids))
        if by_reader:
            return None
        kind = F.col("kind")
        cases = [(kind == Kind.UNFRAMED.value, WIRE_FORMAT, self._unframed_message),
                 ((kind == Kind.JSON.value) & _stray(), *NOT_DMS_JSON)] if leftover.stray else []
        cases += [((kind == Kind.FRAMED.value) & F.col("schema_id").isin(ids), error_class, reason)
                  for (error_class, reason), ids in unresolved.items()]
        rows = raw.where(functools.reduce(operator.or_, [condition for condition, _, _ in cases]))
        return [self._dead(rows, _chosen([(condition, error_class) for condition, error_class, _ in cases]),
                           _chosen([(condition, message) for condition, _, message in cases]))]

    def _rest(self, rows: DataFrame, topic: str, report: BatchReport) -> list[DataFrame]:
        """What one pass of a topic did not cover (`rows`, `_classified`), landed the planned way under a writer id
        of its own (`report.rest()`), so that a replay skips or lands each part once. Returns its dead letters."""
        report.planned.append(topic)
        rest = report.rest()
        cached = self._routed(rows).persist()
        try:
            dead = self._planned(cached, rest)
        finally:
            cached.unpersist()
        for table, n in rest.tables.items():
            report.tables[table] = report.tables.get(table, 0) + n
        report.skipped += rest.skipped
        return dead

    def _planned(self, raw: DataFrame, report: BatchReport, plans: dict[str, TopicPlan] | None = None
                 ) -> list[DataFrame]:
        """One job plans the (`_classified`, cached) rows: rows per topic, kind and schema id, and DMS JSON row
        types (unless given their `plans`); then each topic's rows are decoded and appended. Returns the dead
        letters, gathered from what the plan and the appends' observed counts say is there."""
        from pyspark.sql import functions as F

        plans = self._plan(raw) if plans is None else plans
        batch_rows = self._per_topic_tasks(raw, len(plans))
        report.rows_in += sum(plan.rows for plan in plans.values())
        report.tombstones += sum(plan.tombstones for plan in plans.values())
        for topic, plan in plans.items():
            report.records[topic] = report.records.get(topic, 0) + plan.rows - plan.tombstones
            for name, count in plan.control.items():  # DMS control records: counted, never landed
                report.control[name] = report.control.get(name, 0) + count
        dead = []
        if any(plan.unframed for plan in plans.values()):
            dead.append(self._unframed(batch_rows))
        for topic, plan in sorted(plans.items()):
            dead += self._topic(batch_rows.where(F.col("topic") == topic), plan, report.batch_id, report)[0]
        return dead

    def _per_topic_tasks(self, raw: DataFrame, topics: int) -> DataFrame:
        """The cached batch, read by as many tasks as one topic has partitions (at least one per core).

        Each topic's decode scans the whole cached batch, so with a task per Kafka partition a batch of twelve
        4-partition topics ran 48 mostly empty tasks per topic. A lone topic keeps a task per partition: 2M
        events of one 4-partition topic took 75 s coalesced to 2 cores, 62 s not."""
        cores, partitions = self.spark.sparkContext.defaultParallelism, raw.rdd.getNumPartitions()
        return raw.coalesce(max(cores, math.ceil(partitions / max(topics, 1))))

    def holding(self, report: BatchReport) -> list[str]:
        """The changelog tables (dead letters included) that hold some of the report's batch: appended under its
        writer id, or its rest's."""
        writers = (report.writer, report.rest().writer)
        return [name for name in table_names(self.cfg, self.spark, self.cfg.changelog.namespace)
                if any(self.appender.holds(name, writer, report.batch_id) for writer in writers)]

    def append_dead_letters(self, dead: list[DataFrame], report: BatchReport, store: bool = True) -> None:
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
                done = self.append(letters, self.cfg.changelog.dead_letter_table, report,
                                    partition_by_source_time=False)
                report.dead_letters, report.dead_letters_skipped = done.rows, done.skipped
            else:
                report.dead_letters = sum(sum(classes.values()) for classes in report.dead_by_topic.values())
        finally:
            letters.unpersist()

    def _plan(self, raw: DataFrame) -> dict[str, TopicPlan]:
        from pyspark.sql import functions as F

        json_rows = F.when(F.col("kind") == Kind.JSON.value, F.col(decode.PARSED))
        control = F.when(F.col("kind") == Kind.CONTROL.value, F.col(decode.PARSED))
        definition = dms_tables.table_def(control)
        groups = (raw.groupBy("topic", "kind", "schema_id")
                  .agg(F.count(F.lit(1)).alias("rows"), F.count_if("compressed").alias("compressed"),
                       decode.dms_json_row_type(json_rows).alias("row_type"),
                       F.collect_list(dms_tables.operation(control)).alias("operations"),
                       F.max_by(definition, F.when(definition.isNotNull(), dms_tables.issued_at(control)))
                       .alias("table_def")).collect())
        plans: dict[str, TopicPlan] = {}
        for group in groups:
            plan = plans.setdefault(group["topic"], TopicPlan(group["topic"]))
            plan.add(Kind(group["kind"]), group["schema_id"], group["rows"], group["row_type"], group["compressed"],
                     group["operations"], group["table_def"])
        return plans

    def _by_reader(self, topic: str, writers: dict[str, str | UnresolvedSchemaId]
                   ) -> tuple[dict[str, dict[str, str]], dict[tuple[str, str], list[str]]]:
        """Writers grouped by their reader schema (the subject's latest), and the ids that name no writer,
        grouped by (error class, reason)."""
        unresolved: dict[tuple[str, str], list[str]] = {}
        by_reader: dict[str, dict[str, str]] = {}
        readers = self.resolver.readers(topic, {w for w in writers.values() if not isinstance(w, UnresolvedSchemaId)})
        for schema_id, writer in writers.items():
            if isinstance(writer, UnresolvedSchemaId):
                unresolved.setdefault((writer.error_class, str(writer)), []).append(schema_id)
            else:
                by_reader.setdefault(readers[writer], {})[schema_id] = writer
        return by_reader, unresolved

    def _native(self, fmt: str, reader: dict, writers: dict[str, str], plan: TopicPlan) -> bool:
        """Whether these writers' envelopes are decoded by the pipeline's own function (`cdc/native.py`)."""
        if fmt != "debezium" or plan.compressed or not self.cfg.changelog.native_decode:
            return False
        return self._native_session() and native.reads(reader, [json.loads(w) for w in writers.values()])

    def _native_session(self) -> bool:
        """Whether the session has the pipeline's own jar (jvm/cdc: the native decoder, the quiet topics' one job),
        asked once; warned of once when it has not."""
        if self._has_native is None:
            self._has_native = native.available(self.spark)
            if not self._has_native:
                log.warning("changelog.native_decode_missing", function=native.FUNCTION,
                            fix="run `python -m pipeline setup` (jars/cdc) and, under spark-submit, pass its jar "
                                "with --jars; envelopes are decoded with from_avro and each topic written by "
                                "itself meanwhile")
        return self._has_native

    def _topic(self, rows: DataFrame, plan: TopicPlan, batch_id: int, report: BatchReport
               ) -> tuple[list[DataFrame], Appended | None]:
        """`_topic_steps`, its append a write of its own."""
        return self._driven(self._topic_steps(rows, plan, batch_id, report), report)

    def _topic_steps(self, rows: DataFrame, plan: TopicPlan, batch_id: int, report: BatchReport,
                     grouped: tuple[dict[str, dict[str, str]], dict[tuple[str, str], list[str]]] | None = None
                     ) -> Steps[tuple[list[DataFrame], Appended | None]]:
        """Decode one topic's rows (per writer schema id, and DMS JSON); append; return its dead letters (what
        did not decode, and what decoded but must not land: `cdc.normalize.rejections`) and the append, if
        any. `grouped`: the writers by reader (`_by_reader`), when known without the plan's ids."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        source = SourceTable.of_topic(plan.topic)
        try:
            name = self.owners.claim(source)
        except UnmappableName as exc:  # or TableNameCollision; unframed rows are dead letters already, tombstones
            # carry nothing
            return [self._dead(rows.where(F.col("kind").isin(Kind.FRAMED.value, Kind.JSON.value)), exc.error_class,
                               str(exc))], None
        if plan.table_def is not None:
            self._keep_definition(name, plan.table_def)
        # (format, rows with `v` and `_valid`, dead letter, reader schema text)
        decoded: list[tuple[str, DataFrame, str, str, str | None]] = []
        dead: list[DataFrame] = []
        by_reader, unresolved = grouped or self._by_reader(plan.topic, self.resolver.writers(plan.topic, plan.framed))
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
            of_writers = framed.where(F.col("schema_id").isin(list(writers)))
            if self._native(fmt, schema, writers, plan):
                fmt, part = native.FORMAT, native.decoded(of_writers, self.framing, writers, reader)
            else:
                part = decode.avro(of_writers, self.framing, writers, json.dumps(read_schema(schema, fmt)),
                                   inflate=plan.compressed > 0)
            decoded.append((fmt, part, *MALFORMED, reader))
        if plan.json_rows:
            json_rows = rows.where(F.col("kind") == Kind.JSON.value)
            part = (decode.dms_json_fitting(json_rows, plan.row_type) if plan.fitting and plan.row_type
                    else decode.dms_json(json_rows, plan.row_type))
            decoded.append(("dms-json", part, *NOT_DMS_JSON, None))
        if not decoded:
            return dead, None
        keys = self.cfg.mirror.key_columns(name) or self._key(name, plan.topic, {fmt for fmt, *_ in decoded})
        refused = [native.rejections(part, reader or "", keys) if fmt == native.FORMAT
                   else rejections(part, fmt, reader, keys) for fmt, part, _, _, reader in decoded]
        observations = [Observation(f"invalid {plan.topic} {batch_id} {i}") for i in range(len(decoded))]
        changes = functools.reduce(
            lambda a, b: a.unionByName(b, allowMissingColumns=True),
            [_normalized(part.observe(seen, F.count_if(~F.col(decode.VALID)).alias("n"),
                                      F.count_if(F.col(decode.VALID) & any_rejection(checks)).alias("refused"))
                         .where(F.col(decode.VALID) & ~any_rejection(checks)), fmt, source.db, reader)
             for (fmt, part, _, _, reader), seen, checks in zip(decoded, observations, refused)])
        done = yield Request(changes, name, source)
        for (_, part, error_class, message, _), seen, checks in zip(decoded, observations, refused):
            # a replayed batch observed nothing: look again
            dead += self._rejected(part, error_class, message, checks, invalid=done.skipped or seen.get["n"] > 0,
                                   refused=done.skipped or seen.get["refused"] > 0)
        return dead, done

    def _rejected(self, part: DataFrame, error_class: str, message: str, checks: list[tuple[Column, str, str]],
                  invalid: bool, refused: bool) -> list[DataFrame]:
        """A decoded part's dead letters: with `invalid`, what did not decode (`error_class`, `message`); with
        `refused`, what decoded but must not land, each row once, by the first of `checks` it fails."""
        from pyspark.sql import functions as F

        dead = [self._dead(part.where(~F.col(decode.VALID)), error_class, message)] if invalid else []
        if refused:
            for i, (condition, refusal, reason) in enumerate(checks):
                dead.append(self._dead(part.where(F.col(decode.VALID) & condition & ~any_rejection(checks[:i])),
                                       refusal, reason))
        return dead

    def _unframed(self, rows: DataFrame) -> DataFrame:
        """The dead letters of the rows that are neither registry frames nor JSON."""
        from pyspark.sql import functions as F

        return self._dead(rows.where(F.col("kind") == Kind.UNFRAMED.value), WIRE_FORMAT, self._unframed_message)

    @property
    def _unframed_message(self) -> str:
        return f"neither {self.framing.expected} nor a DMS JSON object"

    @staticmethod
    def _dead(rows: DataFrame, error_class: str | Column, message: str | Column) -> DataFrame:
        from pyspark.sql import functions as F

        transport = [name for name in (*TRANSPORT_EXTRAS, *CARRIED) if name in rows.columns]
        return rows.select("key", "value", "topic", "partition", "offset", "timestamp", *transport,
                           F.col("schema_id").cast("string").alias("schema_id"),
                           (F.lit(error_class) if isinstance(error_class, str) else error_class).alias("error_class"),
                           (F.lit(message) if isinstance(message, str) else message).alias("error_message"))

    # -- keys and DMS table definitions, kept with the tables -----------------------------------------

    def _key(self, name: str, topic: str, formats: set[str]) -> list[str]:
        """The key table `name` keeps (`tables/keys.py`), asked once a process; for a table of Debezium records
        that keeps none (a new one, or one made before keys were kept), its record key's fields from the
        registry (in the lake's names, `cdc/columns.py`), which an existing table records now and a new one when
        the append creates it."""
        if name not in self._keys:
            table = lake_table(self.cfg, self.spark, self.cfg.changelog.namespace, name)
            exists = table.exists()
            keys = stored_keys(table.properties()) if exists else []
            if not keys and formats & KEYED_BY_RECORD:
                keys = [lake_column(k) for k in self.resolver.key_columns(topic)]
                if keys and exists:
                    table.set_properties(keys_property(keys))
            self._keys.setdefault(name, keys)
        return self._keys[name]

    def _keep_definition(self, name: str, text: str) -> None:
        """Keep a DMS control record's `table-def` and the key it names with table `name`: at once when the table
        exists, else in the checkpoint until the append that creates it (`_created`)."""
        try:
            key = [lake_column(k) for k in dms_tables.TableDef.parse(text).primary_key]
        except ValueError as exc:
            log.warning("changelog.dms_table_def_unreadable", table=name, error=str(exc),
                        fix=f"set mirror.keys.{name} for its key")
            return
        properties = {DMS_TABLE_DEF_PROPERTY: text, **keys_property(key)}
        self._keys[name] = key
        table = lake_table(self.cfg, self.spark, self.cfg.changelog.namespace, name)
        if table.exists():
            table.set_properties(properties)
        else:
            write_text(self.spark, self._definition_file(name), json.dumps(properties))

    def _created(self, source: SourceTable, name: str) -> dict[str, str]:
        """The table properties of a changelog table the stage creates: its source table, its DMS definition (if
        one came first) and its key."""
        kept = read_text(self.spark, self._definition_file(name))
        return {SOURCE_PROPERTY: str(source), **(json.loads(kept) if kept else {}),
                **keys_property(self._keys.get(name, []))}

    def _definition_file(self, name: str) -> str:
        return f"{self.cfg.changelog.checkpoint}/{DEFINITIONS}/{name}.json"

    # -- idempotent appends --------------------------------------------------------------------------

    def append(self, rows: DataFrame, name: str, report: BatchReport,
               partition_by_source_time: bool = True, source: SourceTable | None = None) -> Appended:
        """Append once per (`report.writer`, batch id): a replayed batch skips a table that holds it. A table
        the append creates records `source`, the source table it holds (`Owners.claim` claimed it), and its
        key (`_created`)."""
        batch_id = report.batch_id
        done = self.appender.append(stamped(rows, batch_id), name, report.writer, batch_id, partition_by_source_time,
                                    {BATCH_STARTED: str(report.started_ms)}, self._creating(source, name))
        return self._recorded(done, name, report)

    def _creating(self, source: SourceTable | None, name: str) -> Created | None:
        return (lambda: self._created(source, name)) if source is not None else None

    def _recorded(self, done: Appended, name: str, report: BatchReport) -> Appended:
        """An append of table `name` counted in the report (and, for Delta in Glue, the table synced)."""
        if done.skipped:
            report.skipped.append(done.table)
        elif done.rows:
            report.tables[done.table] = done.rows
        if self.glue is not None:  # a replayed batch too: a crash between the commit and Glue is repaired
            self.glue.sync(self.cfg.changelog.namespace, name)
        return done


@functools.lru_cache(maxsize=16)
def frame_columns(frames: Framing, headers: bool, registry_frames: bool) -> tuple[Column, Column, Column]:
    """The schema id, compressed and kind expressions, built once a process: built over py4j call by call, they
    took a quarter of a second each time (a stage's first batch paid it, and each topic landed at once)."""
    from pyspark.sql import functions as F

    if not registry_frames:  # DMS JSON only: no registry frames, no registry lookups
        return F.lit(None).cast("string"), F.lit(False), framing.kind(F.col("schema_id"))
    return frames.schema_id(headers), frames.compressed(), framing.kind(F.col("schema_id"))


def changelog_appender(cfg: PipelineConfig, spark: SparkSession) -> IcebergAppender:
    """Idempotent appends to Iceberg changelog tables, with the change record's Parquet hints."""
    return IcebergAppender(spark, f"{cfg.catalog.name}.{cfg.changelog.namespace}", RECORD_HINTS)


def changelog_owners(cfg: PipelineConfig, spark: SparkSession) -> Owners:
    """Which source table each changelog table holds (the dead letters' table reserved)."""
    return Owners(cfg.names.rule(), lambda name: lake_table(cfg, spark, cfg.changelog.namespace, name),
                  reserved=cfg.changelog.dead_letter_table)


def stamped(rows: DataFrame, batch_id: int) -> DataFrame:
    """The rows with `_ingested_at` (now) and `_batch_id`, joined from a broadcast one-row frame of data rather
    than added as literals. Spark writes a literal number or time into the generated Java code, so with literals
    every batch compiled the whole decode and normalise anew, and the JIT compiled it again from the interpreter up:
    about 2 CPU-s a batch of a single topic. The frame is a local relation whose row is data (`_stamp_frame`), so
    no stage's code depends on the batch: a frame of literal columns is no better (the optimiser propagates them
    through the join into the per-row code, `FoldablePropagation`), and a one-row `range` computed from the batch
    compiled its own stage anew for every batch, twice."""
    from pyspark.sql import functions as F

    return rows.crossJoin(F.broadcast(_stamp_frame(rows.sparkSession, stamp_values(batch_id))))


def _stamp_frame(spark: SparkSession, stamp: Mapping[str, int]) -> DataFrame:
    """A one-row frame of `stamp`'s `_ingested_at` (a time) and `_batch_id`, built in the JVM from one row of
    texts (py4j hands a small number over as an int, a large one as a long: texts are one type whatever the value)
    and cast, a local relation that Spark folds the casts into."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    jvm = spark._jvm  # type: ignore[attr-defined]
    values = spark.sparkContext._gateway.new_array(jvm.java.lang.Object, len(STAMPS))  # type: ignore[union-attr]
    for i, name in enumerate(STAMPS):
        values[i] = str(stamp[name])
    row = jvm.org.apache.spark.sql.RowFactory.create(values)
    texts = jvm.org.apache.spark.sql.types.StructType.fromDDL(", ".join(f"{name} string" for name in STAMPS))
    frame = DataFrame(spark._jsparkSession.createDataFrame(jvm.java.util.List.of(row), texts), spark)  # type: ignore[attr-defined]
    return frame.select(F.timestamp_micros(F.col("_ingested_at").cast("long")).alias("_ingested_at"),
                        F.col("_batch_id").cast("long").alias("_batch_id"))


def placeholders(rows: DataFrame) -> DataFrame:
    """The rows with `stamped`'s columns as typed nulls, which the one job fills (`ManyTablesAppender.append`):
    no per-batch literal in the generated code, and no broadcast job a table."""
    from pyspark.sql import functions as F

    return rows.select("*", *[F.lit(None).cast(kind).alias(name) for name, kind in STAMPS.items()])


def stamp_values(batch_id: int) -> dict[str, int]:
    """What the one job writes in `placeholders`' columns: now (epoch micros, as Spark keeps a time) and the batch."""
    return {"_ingested_at": time.time_ns() // 1000, "_batch_id": batch_id}


def _by_topic(cases: list[tuple[str, Column]]) -> Column:
    """Each row's topic's condition, never null: false for a topic of none (or a null condition)."""
    from pyspark.sql import functions as F

    chosen = functools.reduce(lambda acc, case: acc.when(F.col("topic") == case[0], case[1]), cases[1:],
                              F.when(F.col("topic") == cases[0][0], cases[0][1])) if cases else F.lit(False)
    return F.coalesce(chosen, F.lit(False))


def _handled(writers: Collection[str]) -> Column:
    """Whether a `_classified` row is a framed envelope of one of `writers` (schema ids), uncompressed: what one
    pass of its topic decodes."""
    from pyspark.sql import functions as F

    return (F.col("kind") == Kind.FRAMED.value) & F.col("schema_id").isin(sorted(writers)) & ~F.col("compressed")


def _stray() -> Column:
    """Whether a `_classified` row is a dead letter whatever the registry holds: neither framed nor JSON, or JSON
    with no `metadata` (not a DMS record, nor routed to another table by one). Never null."""
    from pyspark.sql import functions as F

    no_metadata = F.try_variant_get(F.col(decode.PARSED), "$.metadata", "variant").isNull()
    return F.coalesce((F.col("kind") == Kind.UNFRAMED.value) | ((F.col("kind") == Kind.JSON.value) & no_metadata),
                      F.lit(False))


def _unlisted() -> Column:
    """Whether a `_classified` row is an uncompressed frame (which has a schema id): with `~_handled`, one whose id
    is of no writer the one pass knew."""
    from pyspark.sql import functions as F

    return (F.col("kind") == Kind.FRAMED.value) & ~F.col("compressed")


def _chosen(cases: list[tuple[Column, str]]) -> Column:
    """The text of the first case whose condition holds (conditions that exclude each other)."""
    from pyspark.sql import functions as F

    return functools.reduce(lambda acc, case: acc.when(case[0], F.lit(case[1])), cases[1:],
                            F.when(cases[0][0], F.lit(cases[0][1])))


def _lands(reader: str) -> bool:
    """Whether records of this reader schema land in a table (not heartbeats, nor of no known CDC format)."""
    schema = json.loads(reader)
    if control_kind(schema) is not None:
        return False
    try:
        detect_format(schema)
    except ValueError:
        return False
    return True


def _normalized(part: DataFrame, fmt: str, db: str, reader: str | None) -> DataFrame:
    """The change record of a decoded part (`_topic`): the native function's, or `normalize`'s."""
    return native.normalized(part, reader or "") if fmt == native.FORMAT else normalize(part, fmt, db, reader)
