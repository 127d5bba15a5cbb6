"""Idempotent appends to a lakehouse table, in Iceberg or Delta: a (writer id, batch id) pair commits once.

A streaming batch that a crash makes Spark replay asks to append the same rows again; the table itself
remembers which batches it holds, so the replay is skipped table by table.
- Iceberg: each commit carries the snapshot property `pipeline.commit = <writer id>:<batch id>`.
- Delta: Delta's own idempotent writes, `txnAppId = <writer id>`, `txnVersion = <batch id>`.
Tables are created on first sight (partitioned by the day of `_source_ts` when asked), recording the source
table they hold (`pipeline.source`, `tables/owners.py`) and its key (`tables/keys.py`), and take new columns.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence

from cdc.normalize import CONSTANT_TEXTS, POSITIONS, UNBOUNDED
from tables import delta_log
from tables.names import property_list, quote, sql_string

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

COMMIT_PROPERTY = "pipeline.commit"
BATCH_STARTED = "pipeline.batch-started"  # epoch ms: with the commit time, how long the batch took
ANCESTRY_LOOKUP = 32  # snapshots walked back for a writer's own commit before looking in all of them
SOURCE_PROPERTY = "pipeline.source"  # table property: the source table `<db>.<schema>.<table>` the table holds
CREATED = {"write.spark.accept-any-schema": "true", "format-version": "2"}  # the properties every new table gets
TASKS_PER_CORE = 2  # a job over many small inputs (tables, Kafka ranges): tasks a unit of the session's parallelism


Created = Callable[[], Mapping[str, str]]  # the table properties a new table records (`SOURCE_PROPERTY`, its key)


@dataclass(frozen=True)
class Appended:
    table: str  # the table's name (not quoted) or path, for reports
    rows: int  # rows this call added (0 when it skipped)
    skipped: bool  # the table already held this batch


class Appender(Protocol):
    def append(self, rows: DataFrame, name: str, writer_id: str, batch_id: int,
               partition_by_source_time: bool = True, properties: Mapping[str, str] | None = None,
               created: Created | None = None) -> Appended:
        """`properties` go into the commit (Iceberg snapshot summary; Delta `userMetadata`, as JSON); a table
        created by the append records `created()`'s table properties (asked only then: learning them may cost
        a registry call)."""

    def holds(self, name: str, writer_id: str, batch_id: int) -> bool:
        """Whether table `name` holds batch `batch_id` of `writer_id` (an append of it would be skipped)."""


def parquet_hints(plain: Iterable[str], unbounded: Iterable[str]) -> dict[str, str]:
    """Iceberg table properties that write columns `plain` without a dictionary and `unbounded` without min/max
    statistics (nested fields by their dotted path; a column the table lacks is ignored). Why: a dictionary of
    values unique to a row is tried on every value and given up, and bounds of a text that is the same in every
    row prune nothing; both are work per value and column."""
    return {**{f"write.parquet.dict-encoding-enabled.column.{name}": "false" for name in plain},
            **{f"write.parquet.stats-enabled.column.{name}": "false" for name in unbounded}}


# The change record's columns as every Iceberg table that holds them writes them: a changelog table, a mirror, its
# pending table.
RECORD_HINTS = parquet_hints((*POSITIONS, *CONSTANT_TEXTS), UNBOUNDED)


@dataclass(frozen=True)
class IcebergAppender:
    spark: SparkSession
    namespace: str  # <catalog>.<namespace> (each a plain identifier: the configuration checks them)
    table_properties: Mapping[str, str] = field(default_factory=dict)  # beside `CREATED`, every table it creates gets

    def append(self, rows: DataFrame, name: str, writer_id: str, batch_id: int,
               partition_by_source_time: bool = True, properties: Mapping[str, str] | None = None,
               created: Created | None = None) -> Appended:
        """The rows are written as they come, without a shuffle: fanout writers take any mix of partitions
        (a batch spans few source days), and the row count is observed on the write, not queried after it.
        A new table is created by the write itself (create-as-select, one commit): creating it empty first
        cost two seconds a table, more than writing a batch to it."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        from pyspark.sql.functions import partitioning

        table, tag = quote(*self.namespace.split("."), name), f"{writer_id}:{batch_id}"
        loaded = _loaded(self.spark, table)  # loaded once: whether it holds the batch, and its columns
        exists = loaded is not None
        if exists and self.committed(table, loaded, writer_id, batch_id):
            return Appended(f"{self.namespace}.{name}", 0, skipped=True)
        written = Observation(f"rows {table} {tag}")
        ordered = _in_table_order(rows, spark_schema(self.spark, loaded)) if exists else rows
        writer = (ordered.observe(written, F.count(F.lit(1)).alias("rows")).writeTo(table)
                  .option("mergeSchema", "true").option("distribution-mode", "none").option("fanout-enabled", "true"))
        for key, value in {**(properties or {}), COMMIT_PROPERTY: tag}.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        if exists:
            writer.append()
        else:
            create = writer.using("iceberg")
            for key, value in self.creating(created).items():
                create = create.tableProperty(key, value)
            if partition_by_source_time:
                create = create.partitionedBy(partitioning.days("_source_ts"))
            try:
                create.create()
            except Exception:
                if _loaded(self.spark, table) is None:
                    raise
                # another writer created the table meanwhile: append to it (or skip, if it holds this batch)
                return self.append(rows, name, writer_id, batch_id, partition_by_source_time, properties, created)
        return Appended(f"{self.namespace}.{name}", int(written.get["rows"]), skipped=False)

    def creating(self, created: Created | None) -> dict[str, str]:
        """The properties of a table an append creates: `CREATED`, the appender's, then `created()`'s."""
        return {**CREATED, **self.table_properties, **(created() if created is not None else {})}

    def holds(self, name: str, writer_id: str, batch_id: int) -> bool:
        table = quote(*self.namespace.split("."), name)
        loaded = _loaded(self.spark, table)
        return loaded is not None and self.committed(table, loaded, writer_id, batch_id)

    def committed(self, table: str, metadata, writer_id: str, batch_id: int) -> bool:  # type: ignore[no-untyped-def]
        """Whether the table (`metadata`: its Iceberg Java table, `_loaded`) holds batch `batch_id` of `writer_id`:
        a snapshot among the table's current ancestry carries its commit tag.

        A writer commits its batches to a table in order, so the walk from the newest snapshot stops at the
        first of the writer's snapshots: this batch, or an earlier one (then this batch is not there). That
        is a few snapshots through Iceberg's Java API, not a Spark job over `<table>.snapshots` (0.4 to 2 s a
        table and batch). A table whose recent history holds none of the writer's commits (a new writer, or
        maintenance since) is looked up in all its snapshots, as before."""
        current = metadata.currentSnapshot()
        for _ in range(ANCESTRY_LOOKUP):
            if current is None:
                return False
            tag = current.summary().get(COMMIT_PROPERTY)
            writer, _, batch = (tag or "").rpartition(":")
            if writer == writer_id and batch.isdigit() and int(batch) <= batch_id:
                return int(batch) == batch_id
            parent = current.parentId()
            current = metadata.snapshot(parent) if parent is not None else None
        tag = sql_string(f"{writer_id}:{batch_id}")
        return bool(self.spark.sql(f"SELECT 1 FROM {table}.snapshots "
                                   f"WHERE summary['{COMMIT_PROPERTY}'] = {tag} LIMIT 1").collect())


@dataclass(frozen=True)
class Staged:
    """One table's part of a many-table append (`ManyTablesAppender.stage`): its rows in the table's column order
    and types, planned, and its Iceberg table; or, `skipped`, a table that holds the batch already. A `target`
    has no rows: its caller writes them."""

    name: str
    rows: DataFrame | None
    table: Any  # a py4j org.apache.iceberg.Table
    skipped: bool = False


class ManyTablesAppender:
    """Idempotent appends of many small tables in one Spark job (jvm/cdc `cdc.spark.ManyTables`), each table
    committed through Iceberg's Java API with the same snapshot properties `IcebergAppender` gives a commit.

    Why: a batch of a whole database is mostly quiet tables, and a write through Spark's DataFrameWriterV2 costs a
    table its own job and commit, about a second of driver and Spark work (docs/benchmarks.md). `stage` does a
    table's driver work (the idempotence check, creating it, planning its rows), safe to call from several
    threads; `append` writes and commits the staged tables together. A table that holds the batch is skipped, as
    `IcebergAppender.append` skips it; a new table is created through the Spark catalog call a create-as-select
    makes, with the same properties, partitioning and format version. `stage` refuses (None) a table whose columns
    the rows would change, or whose partitioning the job does not write: those land through `IcebergAppender`."""

    def __init__(self, appender: IcebergAppender) -> None:
        self.appender = appender
        self.spark = appender.spark

    @functools.cached_property
    def many(self) -> Any:  # the py4j class cdc.spark.ManyTables, named once
        from tables.lake import java_class  # tables.lake imports this module

        return java_class(self.spark, "cdc.spark.ManyTables")

    def stage(self, rows: DataFrame, name: str, writer_id: str, batch_id: int,
              partition_by_source_time: bool = True, created: Created | None = None) -> Staged | None:
        """`rows` hold placeholders (typed nulls) for the columns `append`'s stamps fill."""
        target = self.target(rows.schema, name, writer_id, batch_id, partition_by_source_time, created)
        if target is None or target.skipped:
            return target
        ordered = planned(_in_table_order(rows, spark_schema(self.spark, target.table)))
        return Staged(target.name, ordered, target.table)

    def target(self, schema: StructType, name: str, writer_id: str, batch_id: int,
               partition_by_source_time: bool = True, created: Created | None = None) -> Staged | None:
        """The table rows of `schema` are appended to, without its rows (`Staged.rows` None): loaded, or created as
        a create-as-select of them creates it; `skipped` when it holds the batch; None when the rows would change
        its columns or types, or the job does not write its partitioning."""
        namespace = self.appender.namespace
        table = quote(*namespace.split("."), name)
        loaded = _loaded(self.spark, table)
        if loaded is not None and self.appender.committed(table, loaded, writer_id, batch_id):
            return Staged(f"{namespace}.{name}", None, loaded, skipped=True)
        if loaded is None:
            try:
                session = self.spark._jsparkSession  # type: ignore[attr-defined]
                loaded = self.many.create(session, table, nullable(schema).json(),
                                          "_source_ts" if partition_by_source_time else None,
                                          self.appender.creating(created))
            except Exception:
                if _loaded(self.spark, table) is None:
                    raise
                # another writer created it meanwhile: append to it (or skip, if it holds the batch)
                return self.target(schema, name, writer_id, batch_id, partition_by_source_time, created)
        if not self.many.writable(loaded) or not fits(schema, spark_schema(self.spark, loaded)):
            return None  # new columns or types, or a partitioning the job does not write
        return Staged(f"{namespace}.{name}", None, loaded)

    def append(self, staged: Sequence[Staged], writer_id: str, batch_id: int, stamps: Mapping[str, int],
               properties: Mapping[str, str] | None = None, threads: int = 4) -> list[Appended]:
        """Writes the staged tables' rows in one Spark job (`TASKS_PER_CORE` tasks) and commits each table with
        `properties` and the commit tag, `threads` at a time; `stamps` (column -> a long: micros for a time) fill
        the rows' placeholders. In `staged`'s order."""
        written = [part for part in staged if not part.skipped]
        snapshot = {**(properties or {}), COMMIT_PROPERTY: f"{writer_id}:{batch_id}"}
        rows = append_together(self.spark, [part.rows for part in written],  # type: ignore[misc]
                               [part.table for part in written], [snapshot] * len(written), threads, stamps)
        counts = iter(rows)
        return [Appended(part.name, 0 if part.skipped else int(next(counts)), part.skipped) for part in staged]


def append_together(spark: SparkSession, frames: Sequence[DataFrame], tables: Sequence[Any],
                    snapshots: Sequence[Mapping[str, str]], threads: int = 4, stamps: Mapping[str, int] | None = None,
                    guarded: Sequence[bool] | None = None, mirrors: Sequence[Any] | None = None) -> list[int]:
    """Each frame's rows appended to its Iceberg table (`tables`: py4j `org.apache.iceberg.Table`s, each
    `ManyTables.writable`; the frames in their table's column order and types, `fits`) in one Spark job of
    `TASKS_PER_CORE` tasks a core, then each table committed with its snapshot properties (`snapshots`), `threads`
    at a time; `stamps` (column -> a long: micros for a time) fill placeholders. A `guarded` table takes the rows
    only if no other commit added data to it since the snapshot it was loaded at. A frame with a `mirrors` entry (a
    py4j `cdc.spark.MirrorRows`; None: none) holds a mirror's changelog rows, which its task makes into the rows
    written. The rows each table gained, -1 for a guarded table another commit wrote first, -2 for a table a
    `MirrorRows` left to be merged alone (`MirrorRows.outcome`)."""
    from tables.lake import java_class  # tables.lake imports this module

    if not frames:
        return []
    tasks = TASKS_PER_CORE * spark.sparkContext.defaultParallelism
    return list(java_class(spark, "cdc.spark.ManyTables").append(
        [frame._jdf for frame in frames], list(tables), dict(stamps or {}), [dict(s) for s in snapshots],
        list(guarded or [False] * len(frames)), list(mirrors or [None] * len(frames)), tasks, threads))


def planned(frame: DataFrame) -> DataFrame:
    """`frame`, its physical plan made now in the calling thread (`queryExecution.toRdd` keeps it), so that many
    tables' frames are planned in threads, not one after another by the job that runs them together."""
    frame._jdf.queryExecution().toRdd()
    return frame


def fits(schema: StructType, table: StructType) -> bool:
    """Whether rows of `schema` append to a table of columns `table` as they are: each of their columns is one of
    the table's, of the same type (nullability aside). The table's other columns are left null."""
    columns = {f.name: f for f in nullable(table).fields}
    return all(columns.get(f.name) == f for f in nullable(schema).fields)


def nullable(schema: StructType) -> StructType:
    """The schema with every field, element and value nullable, as a create-as-select makes its table's columns."""
    from pyspark.sql.types import StructType

    def loose(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: True if key in ("nullable", "containsNull", "valueContainsNull") else loose(value)
                    for key, value in node.items() if key != "metadata"}
        return [loose(item) for item in node] if isinstance(node, list) else node

    return StructType.fromJson(loose(schema.jsonValue()))


def _loaded(spark: SparkSession, ref: str):  # type: ignore[no-untyped-def]  # an org.apache.iceberg.Table or None
    """An Iceberg table through Iceberg's Java API, or None when there is no such table: one catalog load
    (`ManyTables.loaded`), current since the pipeline's catalogs cache no table. Asked from Python, a missing
    table's exception, converted by PySpark over py4j, took 144 ms against 27 ms for asking whether it exists,
    which is itself a load (bench/database.py, loaded machine)."""
    from tables.lake import java_class  # tables.lake imports this module

    return java_class(spark, "cdc.spark.ManyTables").loaded(spark._jsparkSession, ref)  # type: ignore[attr-defined]


def spark_schema(spark: SparkSession, metadata) -> StructType:  # type: ignore[no-untyped-def]
    """The Spark columns of an Iceberg table, as `spark.table(...).schema` gives them (Iceberg's Spark table
    converts its schema the same way), without planning a read of it."""
    from pyspark.sql.types import StructType

    from tables.lake import java_class  # tables.lake imports this module

    converted = java_class(spark, "org.apache.iceberg.spark.SparkSchemaUtil").convert(metadata.schema())
    return StructType.fromJson(json.loads(converted.json()))


def iceberg_table(spark: SparkSession, ref: str):  # type: ignore[no-untyped-def]  # a py4j org.apache.iceberg.Table
    """An Iceberg table through Iceberg's Java API, refreshed: its snapshots and their summaries read without a
    Spark job per question."""
    from tables.lake import java_class  # tables.lake imports this module

    table = java_class(spark, "org.apache.iceberg.spark.Spark3Util").loadIcebergTable(
        spark._jsparkSession, ref)  # type: ignore[attr-defined]
    table.refresh()
    return table


def _in_table_order(rows: DataFrame, table: StructType) -> DataFrame:
    """Iceberg matches a write's columns by position: the table's columns in its order (null where the rows
    lack one, e.g. a transport column only another source fills), then the rows' new columns, which the
    write adds. (Delta matches columns by name.)"""
    from pyspark.sql import functions as F

    present, known = set(rows.columns), set(table.fieldNames())
    return rows.select(*[F.col(f.name) if f.name in present else F.lit(None).cast(f.dataType).alias(f.name)
                         for f in table.fields],
                       *[c for c in rows.columns if c not in known])


@dataclass(frozen=True)
class DeltaAppender:
    spark: SparkSession
    root: str  # <lake.delta_root>/<namespace>; each table is a folder below it

    def append(self, rows: DataFrame, name: str, writer_id: str, batch_id: int,
               partition_by_source_time: bool = True, properties: Mapping[str, str] | None = None,
               created: Created | None = None) -> Appended:
        """Path tables (the session's default catalog is the Iceberg one); Delta partitions by a column,
        so a `_source_date` column carries the day of `_source_ts`. Delta takes only `delta.*` table
        properties with a write, so the new table's properties (`created`) are set right after the write that
        creates it (a crash in between leaves a table with none: its source adopts it again, `tables/owners.py`,
        and the stage learns its key again)."""
        from pyspark.sql import functions as F

        path = f"{self.root}/{name}"
        before = delta_log.version(self.spark, path)
        exists = before is not None
        if partition_by_source_time:
            rows = rows.withColumn("_source_date", F.to_date("_source_ts"))
        writer = (rows.write.format("delta").mode("append").option("mergeSchema", "true")
                  .option("txnAppId", writer_id).option("txnVersion", str(batch_id)))
        if properties:
            writer = writer.option("userMetadata", json.dumps(dict(properties)))
        if partition_by_source_time and not exists:
            writer = writer.partitionBy("_source_date")
        writer.save(path)
        last = delta_log.version(self.spark, path)
        new_properties = created() if created is not None and not exists else {}
        if new_properties:
            self.spark.sql(f"ALTER TABLE delta.{quote(path)} SET TBLPROPERTIES ({property_list(new_properties)})")
        if last == before or last is None:
            return Appended(path, 0, skipped=True)  # Delta already held (writer id, batch id)
        info = delta_log.commit_info(self.spark, path, last) or {}
        return Appended(path, int(info.get("operationMetrics", {}).get("numOutputRows", 0)), skipped=False)

    def holds(self, name: str, writer_id: str, batch_id: int) -> bool:
        """Delta keeps, per `txnAppId`, the last `txnVersion` written, in the log's `txn` actions."""
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        path = f"{self.root}/{name}"
        if not DeltaTable.isDeltaTable(self.spark, path):
            return False
        txn = F.from_json("value", "txn struct<appId: string, version: bigint>")["txn"]
        versions = (self.spark.read.text(f"{path}/_delta_log/*.json").select(txn.alias("txn"))
                    .where(F.col("txn.appId") == writer_id).agg(F.max("txn.version")).first())
        return versions is not None and versions[0] is not None and versions[0] >= batch_id
