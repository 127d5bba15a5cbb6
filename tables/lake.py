"""One table of the lakehouse, in Iceberg or Delta, behind one small interface the stages share.

The stages never branch on the format: they read a table (now, as of a commit, or only the rows appended
between two commits), evolve its columns, and MERGE into it with commit metadata that lands atomically in the
same commit. A *commit id* is an Iceberg snapshot id or a Delta version.
- Iceberg tables live in the catalog as `<catalog>.<namespace>.<name>` (`ref` is that identifier quoted, for
  SQL text, since a name may start with a digit or be a reserved word); commit metadata goes into the snapshot
  summary (`spark.sql.iceberg.snapshot-property.*` on the table's private Spark session).
- Delta tables are path tables under `<lake.delta_root>/<namespace>/<name>`; commit metadata goes into the
  commit's `userMetadata`, and incremental reads use the change data feed, which Delta tables here enable.
"""

from __future__ import annotations

import functools
import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Protocol

import structlog

from cdc.merge import MergeClauses, merge_sql
from pipeline.config.settings import PipelineConfig
from tables import delta_log
from tables.append import COMMIT_PROPERTY, RECORD_HINTS, nullable
from tables.names import property_list, quote, sql_string
from tables.partitioning import PartitionField

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameWriterV2, SparkSession
    from pyspark.sql.types import StructField

log = structlog.get_logger(__name__)

ICEBERG_PROPERTY_CONF = "spark.sql.iceberg.snapshot-property."
# Storage-partitioned join, for an Iceberg table bucketed by the join key: the scan keeps its files grouped by
# bucket and Spark shuffles only the other side into those buckets, so a MERGE of a few changes into a large
# mirror never shuffles the mirror.
STORAGE_PARTITIONED_JOIN = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.sources.v2.bucketing.shuffle.enabled": "true",
    "spark.sql.iceberg.planning.preserve-data-grouping": "true",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
}


def merge_join_conf(cfg: PipelineConfig, name: str, keys: list[str]) -> dict[str, str]:
    """A storage-partitioned join for an Iceberg mirror bucketed by a key column; Spark's defaults else
    (grouping the files of a mirror partitioned by anything else would only cut the scan's parallelism).

    Only around a MERGE whose source is materialised (`localCheckpoint`), a plan of one join: with the one-side
    shuffle on, Spark drops matches of storage-partitioned joins in plans of several joins, projections that
    drop a key, or UNION ALL (SPARK-59050, apache/spark PR 58339; 4.1.x up to 4.1.3), the shapes of the SCD2
    rebuild and of the fold's resolution, which therefore run with Spark's defaults."""
    bucketed = any(f.transform == "bucket" and f.column in keys for f in cfg.mirror.partition_fields(name))
    return STORAGE_PARTITIONED_JOIN if bucketed and cfg.lake.format == "iceberg" else {}


def _merge_rows_metrics_race(exc: Exception) -> bool:
    """Spark 4.1's `MergeRowsExec` makes its metrics lazily from the driver's session; a copy of the operator
    that reaches a task before anything on the driver read them fails there with a NullPointerException
    (`SparkPlan.session()` is null on an executor). Copy-on-write MERGEs count copied rows through it, so one
    may fail at random; the failed job commits nothing, and running the statement again plans it anew."""
    text = str(exc)
    return "NullPointerException" in text and "MergeRowsExec" in text


DELTA_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


class LakeTable(Protocol):
    name: str  # the table's short name, e.g. moma_artists
    ref: str  # the catalog identifier or path, for messages

    def exists(self) -> bool: ...
    def commit_id(self) -> int | None: ...
    def read(self, as_of: int | str | None = None) -> DataFrame: ...
    def read_appended(self, after: int | None, through: int) -> DataFrame: ...
    def read_key(self, key: dict[str, str]) -> DataFrame: ...
    def read_with_commits(self, key: dict[str, str]) -> DataFrame: ...
    def commit_metadata(self, key: str) -> tuple[int, str] | None: ...
    def fields(self) -> list[StructField]: ...
    def properties(self) -> dict[str, str]: ...
    def set_properties(self, properties: dict[str, str]) -> None: ...
    def add_columns(self, fields: list[StructField]) -> None: ...
    def widen_columns(self, types: dict[str, str]) -> None: ...
    def create(self, like: DataFrame, partition_by: list[PartitionField], write_mode: str) -> None: ...
    def merge(self, source: DataFrame, clauses: MergeClauses, metadata: dict[str, str]) -> None: ...


def lake_table(cfg: PipelineConfig, spark: SparkSession, namespace: str, name: str) -> LakeTable:
    if cfg.lake.format == "delta":
        return DeltaLakeTable(spark, name, f"{cfg.lake.delta_root}/{namespace}/{name}")
    return IcebergLakeTable(spark, name, namespace, cfg)


def create_namespace(spark: SparkSession, catalog: str, namespace: str) -> None:
    """Create `catalog.namespace` unless it exists, also when another session creates it at the same moment: the
    JDBC catalog checks, then inserts, so of two sessions that both find it missing, the second insert fails
    (tables merged at once meet here). A namespace that exists once the create has failed is what was asked."""
    where = quote(catalog, namespace)
    try:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {where}")
    except Exception:
        if not spark.catalog.databaseExists(where):
            raise


def table_names(cfg: PipelineConfig, spark: SparkSession, namespace: str) -> list[str]:
    """The tables of one namespace, sorted; none when the namespace does not exist yet."""
    if cfg.lake.format == "delta":
        jvm = spark._jvm  # type: ignore[attr-defined]
        root = jvm.org.apache.hadoop.fs.Path(f"{cfg.lake.delta_root}/{namespace}")
        fs = root.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
        if not fs.exists(root):
            return []
        return sorted(status.getPath().getName() for status in fs.listStatus(root)
                      if fs.exists(jvm.org.apache.hadoop.fs.Path(status.getPath(), "_delta_log")))
    where = quote(cfg.catalog.name, namespace)
    if not spark.catalog.databaseExists(where):
        return []
    return sorted(row["tableName"] for row in spark.sql(f"SHOW TABLES IN {where}").collect())


@dataclass(frozen=True)
class IcebergLakeTable:
    spark: SparkSession
    name: str
    namespace: str
    cfg: PipelineConfig  # its catalog

    @property
    def ref(self) -> str:
        return quote(self.cfg.catalog.name, self.namespace, self.name)

    def exists(self) -> bool:
        return self.spark.catalog.tableExists(self.ref)

    def commit_id(self) -> int | None:
        """None for a table without commits, or without the table."""
        current = self._current_snapshot()
        return int(current.snapshotId()) if current is not None else None

    def read(self, as_of: int | str | None = None) -> DataFrame:
        return _read(self.spark, "iceberg", self.ref, as_of)

    def read_appended(self, after: int | None, through: int) -> DataFrame:
        if after is None:
            return self.read(through)
        if not self._has_snapshot(after):
            log.warning("lake.watermark_expired", table=self.ref, snapshot=after,
                        action="reading the whole table; merging is idempotent, so only time is lost")
            return self.read(through)
        return (self.spark.read.format("iceberg").option("start-snapshot-id", after)
                .option("end-snapshot-id", through).load(self.ref))

    def read_key(self, key: dict[str, str]) -> DataFrame:
        """The rows of one key (column -> value as text), read by pyiceberg and handed to Spark.

        Iceberg's Spark reader decodes row by row once a struct column is projected (apache/iceberg#521), and
        changelog rows carry three (`_seq`, `_source`, `_transport`): one key's rows would cost decoding every
        row of the row groups the key falls in, a million or more in a large table. pyiceberg prunes the same
        files and row groups by their statistics, decodes them column by column with Arrow and keeps the
        key's rows only: the same snapshot and delete files, several times faster.
        """
        from pyiceberg.expressions import And, EqualTo

        from tables.catalog import load_pyiceberg_catalog

        table = load_pyiceberg_catalog(self.cfg.catalog, self.cfg.aws).load_table((self.namespace, self.name))
        condition = functools.reduce(And, [EqualTo(column, value) for column, value in key.items()])
        return self.spark.createDataFrame(table.scan(row_filter=condition).to_arrow(), schema=self.read().schema)

    def read_with_commits(self, key: dict[str, str]) -> DataFrame:
        """The rows of one key, each with the snapshot that added it (`_commit`): the first snapshot tagged
        with the row's `_batch_id` (`tables.append`) committed after the row was ingested. Null once that
        snapshot has expired."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        commits = self.spark.sql(
            f"SELECT snapshot_id AS _commit, committed_at AS _committed_at, "
            f"CAST(substring_index(summary['{COMMIT_PROPERTY}'], ':', -1) AS BIGINT) AS _commit_batch "
            f"FROM {self.ref}.snapshots WHERE summary['{COMMIT_PROPERTY}'] IS NOT NULL")
        rows = self.read_key(key)
        first = Window.partitionBy("_transport").orderBy(F.col("_committed_at").asc_nulls_last())
        return (rows.join(commits, (rows["_batch_id"] == commits["_commit_batch"])
                          & (commits["_committed_at"] >= rows["_ingested_at"]), "left")
                .withColumn("_rank", F.row_number().over(first)).where("_rank = 1")
                .drop("_rank", "_committed_at", "_commit_batch"))

    def commit_metadata(self, key: str) -> tuple[int, str] | None:
        """The newest commit carrying metadata `key`, and the value: (commit id, value)."""
        found = java_class(self.spark, "cdc.spark.IcebergTables").carried(self._metadata(), key)
        if found is None:
            return None
        commit, value = json.loads(found)
        return int(commit), str(value)

    def fields(self) -> list[StructField]:
        return list(self.spark.table(self.ref).schema.fields)

    def properties(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self._document().get("properties", {}).items()}

    def set_properties(self, properties: dict[str, str]) -> None:
        self.spark.sql(f"ALTER TABLE {self.ref} SET TBLPROPERTIES ({property_list(properties)})")

    def add_columns(self, fields: list[StructField]) -> None:
        columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in fields)
        self.spark.sql(f"ALTER TABLE {self.ref} ADD COLUMNS ({columns})")

    def widen_columns(self, types: dict[str, str]) -> None:
        """Promote columns to a wider type (int -> bigint, float -> double), as Iceberg allows in place."""
        for column, kind in types.items():
            self.spark.sql(f"ALTER TABLE {self.ref} ALTER COLUMN {quote(column)} TYPE {kind}")

    def create(self, like: DataFrame, partition_by: list[PartitionField], write_mode: str) -> None:
        """An empty table shaped like `like`; `write_mode` (copy-on-write / merge-on-read) for row-level writes.
        Unpartitioned, created with its first snapshot, an empty commit (the table's first state, as time travel
        sees it), in one catalog commit (`ManyTables.createEmpty`; its namespace too, when missing), without a
        create-as-select's analysis and job: a quarter of a second a table, when a run makes hundreds."""
        if partition_by:
            _creating(like.limit(0).writeTo(self.ref), partition_by, write_mode).create()
            return
        java_class(self.spark, "cdc.spark.ManyTables").createEmpty(
            self.spark._jsparkSession, self.ref, nullable(like.schema).json(),  # type: ignore[attr-defined]
            _created_properties(write_mode))

    def build(self, rows: DataFrame, partition_by: list[PartitionField], write_mode: str, metadata: dict[str, str],
              *, spread: bool) -> None:
        """`rows` as the first data of the table, with `metadata`, in one commit: a table that does not exist yet
        is created by that commit (a failed write leaves none behind); an empty one (another run may have created
        it, `MirrorStage.merge_together`) takes them only if no commit added data since it was seen empty, else
        the write fails with Iceberg's `ValidationException`, a conflict the stage retries. `spread`: the
        caller's tasks hold whole partitions already, one after another (a bucket of the key in one task, its rows
        together), so the rows are written as they come, one file open at a time, with no shuffle into the
        partitions and no sort by partition; else Iceberg distributes them as any write."""
        from pyspark.sql import functions as F

        writer = rows.writeTo(self.ref)
        if spread:  # Iceberg's clustered writer asks Spark for a sort by partition, which Spark cannot see the rows
            # meet already (it sorted every row again): the table's distribution and ordering are left out instead
            writer = writer.options(**{"use-table-distribution-and-ordering": "false", "fanout-enabled": "false"})
        with session_conf(self.spark, snapshot_properties(metadata)):
            if not self.exists():
                _creating(writer, partition_by, write_mode).create()
                return
            seen = self.commit_id()  # an overwrite of nothing, validated as one: no data added since `seen`
            writer = writer.option("isolation-level", "serializable")
            if seen is not None:
                writer = writer.option("validate-from-snapshot-id", str(seen))
            writer.overwrite(F.lit(True))

    def is_empty(self) -> bool:
        """No rows (or no table): from the current snapshot's summary, without a scan. A summary without the
        totals (a writer that does not keep them) counts as rows: the incremental path is right for any table."""
        current = self._current_snapshot()
        return current is None or current.summary().get("total-records") == "0"

    def records_added(self, after: int | None, through: int) -> int | None:
        """The rows the table gained after commit `after` (None: its first) through commit `through`, from their
        snapshots' summaries; None when one of them is gone (expired) or has no totals."""
        metadata = self._metadata()

        def total(commit: int) -> int | None:
            found = metadata.snapshot(commit)
            held = found.summary().get("total-records") if found is not None else None
            return int(held) if held is not None else None

        now, before = total(through), (total(after) if after is not None else 0)
        return now - before if now is not None and before is not None else None

    def merge(self, source: DataFrame, clauses: MergeClauses, metadata: dict[str, str]) -> None:
        """`source` must be materialised (`localCheckpoint`): Spark 4.1 fails to plan a MERGE whose source
        still reads an Iceberg table of the same catalog ("No plan for TableReference")."""
        view = f"changes_{self.name}"
        source.createOrReplaceTempView(view)
        with session_conf(self.spark, snapshot_properties(metadata)):
            statement = merge_sql(self.ref, quote(view), clauses)
            try:
                self.spark.sql(statement)
            except Exception as exc:  # noqa: BLE001 - only the one upstream failure below is retried
                if not _merge_rows_metrics_race(exc):
                    raise
                log.warning("lake.merge_retried", table=self.ref, reason="Spark MergeRowsExec metrics race",
                            hint="a copy-on-write MERGE task read the operator's metrics before the driver had "
                                 "made them; the job failed before its commit, so it runs again")
                self.spark.sql(statement)
        self.spark.catalog.dropTempView(view)

    def commit_time(self, commit: int) -> str | None:
        """When commit `commit` of this table was made (UTC, milliseconds, as `TIMESTAMP AS OF` takes it)."""
        from datetime import datetime, timezone

        snapshot = self._metadata().snapshot(commit)
        if snapshot is None:
            return None
        moment = datetime.fromtimestamp(snapshot.timestampMillis() / 1000, tz=timezone.utc)
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    def has_commit_by(self, moment: str) -> bool:
        """Whether the table had a commit at or before `moment` (a UTC timestamp)."""
        from datetime import datetime, timezone

        millis = datetime.fromisoformat(moment).replace(tzinfo=timezone.utc).timestamp() * 1000
        return any(s.timestampMillis() <= millis for s in self._metadata().snapshots().iterator())

    def commits_before(self, millis: float) -> list[int]:
        """The ids of the commits made before `millis` (epoch milliseconds), from the metadata file."""
        return [int(snapshot["snapshot-id"]) for snapshot in self._document().get("snapshots", [])
                if snapshot["timestamp-ms"] < millis]

    def holds_file_before(self, millis: float, at_most: int) -> bool:
        """Whether a file under the table's location was written before `millis`, listed through the table's
        FileIO up to the first such file; True when that takes more than `at_most` files (three py4j calls a
        file) or the FileIO cannot list by prefix, as a caller that must not miss one needs."""
        from py4j.protocol import Py4JError

        table = self._metadata()
        try:
            files = table.io().listPrefix(table.location()).iterator()
            for _ in range(at_most):
                if not files.hasNext():
                    return False
                if files.next().createdAtMillis() < millis:
                    return True
        except Py4JError:  # no listPrefix, or a ResolvingFileIO whose delegate has none
            return True
        return True

    def remove_files_of(self, commit: int) -> int:
        """Remove every data file the table had at `commit` in one commit, and none added after it; how many.
        For rows that were moved elsewhere: no row is read, and a concurrent append keeps its files."""
        table = self._metadata()
        tasks = table.newScan().useSnapshot(commit).planFiles()
        delete, removed = table.newDelete(), 0
        try:
            files = tasks.iterator()
            while files.hasNext():
                delete.deleteFile(files.next().file())
                removed += 1
        finally:
            tasks.close()
        if removed:
            delete.commit()
        return removed

    def _current_snapshot(self):  # type: ignore[no-untyped-def]  # a py4j proxy of org.apache.iceberg.Snapshot
        """The table's current snapshot; None without commits or without the table: callers ask of tables they
        know, so a missing one is told by the load's exception, not by asking Spark's catalog first (a lookup
        more on every call)."""
        from py4j.protocol import Py4JJavaError

        try:
            return self._metadata().currentSnapshot()
        except Py4JJavaError as exc:
            if "NoSuchTableException" not in str(exc):
                raise
            return None

    def _has_snapshot(self, snapshot_id: int) -> bool:
        return self._metadata().snapshot(snapshot_id) is not None

    def _document(self) -> dict[str, Any]:
        """The table's metadata as its metadata file has it (snapshots with their summaries, properties), in one
        py4j call: reading a Java map or walking the snapshots over py4j costs calls an entry (a table's
        properties took 50 ms, its snapshots three calls each)."""
        parser = java_class(self.spark, "org.apache.iceberg.TableMetadataParser")
        return json.loads(parser.toJson(self._metadata().operations().current()))

    def _metadata(self):  # type: ignore[no-untyped-def]  # a py4j proxy of org.apache.iceberg.Table
        """The table's metadata through Iceberg's Java API, loaded from the catalog itself in one call (jvm/cdc
        `IcebergTables.load`, with this table's session active: see there why)."""
        return java_class(self.spark, "cdc.spark.IcebergTables").load(
            self.spark._jsparkSession, self.cfg.catalog.name, self.namespace, self.name)  # type: ignore[attr-defined]


def java_class(spark: SparkSession, name: str) -> Any:
    """The Java class `name` (fully qualified) for py4j calls, made without a call: `spark._jvm.a.b.C` asks the
    JVM about each dotted segment, a round trip each, which cost more than the calls on the class."""
    from py4j.java_gateway import JavaClass

    return JavaClass(name, spark.sparkContext._gateway._gateway_client)  # type: ignore[attr-defined]


def empty_frame(spark: SparkSession, schema: Any) -> DataFrame:
    """An empty frame of `schema`, a py4j Spark `StructType`, made in the JVM: `spark.createDataFrame([], ...)`
    ships its (empty) rows through an RDD of pickled Python rows, a dozen round trips and a closure cleaned."""
    from pyspark.sql import DataFrame

    no_rows = java_class(spark, "java.util.List").of()
    return DataFrame(spark._jsparkSession.createDataFrame(no_rows, schema), spark)  # type: ignore[attr-defined]


def _creating(writer: DataFrameWriterV2, partition_by: list[PartitionField], write_mode: str) -> DataFrameWriterV2:
    """`writer` creating an Iceberg v2 table partitioned by `partition_by`, whose row-level writes use `write_mode`."""
    writer = writer.using("iceberg")
    for key, value in _created_properties(write_mode).items():
        writer = writer.tableProperty(key, value)
    if partition_by:
        writer = writer.partitionedBy(*[field.expression() for field in partition_by])
    return writer


def _created_properties(write_mode: str) -> dict[str, str]:
    """A new mirror table's properties: Iceberg format v2 (Athena reads no v3), row-level writes in `write_mode`,
    the change record's columns written as in the changelog (`RECORD_HINTS`)."""
    modes = {f"write.{operation}.mode": write_mode for operation in ("merge", "update", "delete")}
    return {"format-version": "2", **modes, **RECORD_HINTS}


def snapshot_properties(metadata: dict[str, str]) -> dict[str, str]:
    """Session settings that put `metadata` into the summary of the session's next Iceberg commit."""
    return {ICEBERG_PROPERTY_CONF + key: value for key, value in metadata.items()}


@contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """Session settings for the statements inside the block only; the values from before come back after it.

    Commit metadata travels through session settings, so a stage gives each table its own session
    (`SparkSession.newSession()`): two stages in one process never see each other's metadata.
    """
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@dataclass(frozen=True)
class DeltaLakeTable:
    spark: SparkSession
    name: str
    ref: str  # the table's path

    def exists(self) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self.spark, self.ref)

    def commit_id(self) -> int | None:
        return delta_log.version(self.spark, self.ref)

    def read(self, as_of: int | str | None = None) -> DataFrame:
        return _read(self.spark, "delta", self.ref, as_of)

    def read_appended(self, after: int | None, through: int) -> DataFrame:
        if after is None:
            return self.read(through)
        if not self._change_feed():
            log.warning("lake.no_change_feed", table=self.ref,
                        action="reading the whole table; set delta.enableChangeDataFeed = true on it to read increments")
            return self.read(through)
        if after == through:
            return self.read(through).limit(0)
        return (self._feed(after + 1, through).where("_change_type = 'insert'").drop(*CDF_COLUMNS))

    def read_key(self, key: dict[str, str]) -> DataFrame:
        return self.read().where(key_predicate(self.fields(), key))

    def read_with_commits(self, key: dict[str, str]) -> DataFrame:
        return (self._feed(0, None).where("_change_type = 'insert'").where(key_predicate(self.fields(), key))
                .withColumnRenamed("_commit_version", "_commit").drop("_change_type", "_commit_timestamp"))

    def commit_metadata(self, key: str) -> tuple[int, str] | None:
        for commit, info in delta_log.commit_infos(self.spark, self.ref):
            value = json.loads(info["userMetadata"]).get(key) if info.get("userMetadata") else None
            if value is not None:
                return commit, str(value)
        return None

    def fields(self) -> list[StructField]:
        return list(self.read().schema.fields)

    def properties(self) -> dict[str, str]:
        # Delta resolves `delta.<path>` in ALTER TABLE itself; SHOW needs the session catalog named (the default
        # catalog is the Iceberg one)
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {quote('spark_catalog', 'delta', self.ref)}").collect()
        return {row["key"]: row["value"] for row in rows}

    def set_properties(self, properties: dict[str, str]) -> None:
        self.spark.sql(f"ALTER TABLE delta.{quote(self.ref)} SET TBLPROPERTIES ({property_list(properties)})")

    def add_columns(self, fields: list[StructField]) -> None:
        columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in fields)
        self.spark.sql(f"ALTER TABLE delta.{quote(self.ref)} ADD COLUMNS ({columns})")

    def widen_columns(self, types: dict[str, str]) -> None:
        """Promote columns to a wider type with Delta's type widening (enabled on the table first)."""
        if types:
            self.spark.sql(f"ALTER TABLE delta.{quote(self.ref)} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
        for column, kind in types.items():
            self.spark.sql(f"ALTER TABLE delta.{quote(self.ref)} ALTER COLUMN {quote(column)} TYPE {kind}")

    def create(self, like: DataFrame, partition_by: list[PartitionField], write_mode: str) -> None:
        """Delta's merge-on-read is deletion vectors: a MERGE marks replaced rows instead of rewriting files.
        Delta partitions by columns only (checked by the configuration)."""
        writer = like.limit(0).write.format("delta")  # the change data feed is on by default (pipeline/runtime/spark.py)
        if write_mode == "merge-on-read":
            writer = writer.option("delta.enableDeletionVectors", "true")
        writer.partitionBy(*[field.column for field in partition_by]).save(self.ref)

    def merge(self, source: DataFrame, clauses: MergeClauses, metadata: dict[str, str]) -> None:
        from delta.tables import DeltaTable

        builder = DeltaTable.forPath(self.spark, self.ref).alias("t").merge(source.alias("s"), clauses.on)
        for clause in clauses.matched:
            if clause.kind == "delete":
                builder = builder.whenMatchedDelete(clause.condition)
            else:
                builder = builder.whenMatchedUpdate(clause.condition, clause.assignments)
        for clause in clauses.not_matched:
            builder = builder.whenNotMatchedInsert(clause.condition, clause.assignments)
        with session_conf(self.spark, {DELTA_METADATA_CONF: json.dumps(metadata)}):
            builder.execute()

    def _change_feed(self) -> bool:
        from delta.tables import DeltaTable

        properties = DeltaTable.forPath(self.spark, self.ref).detail().first()["properties"]  # type: ignore[index]
        return str(properties.get("delta.enableChangeDataFeed", "false")).lower() == "true"

    def _feed(self, start: int, end: int | None) -> DataFrame:
        reader = self.spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start)
        if end is not None:
            reader = reader.option("endingVersion", end)
        return reader.load(self.ref)


def key_predicate(fields: list[StructField], key: dict[str, str]) -> str:
    """Spark SQL matching one key given as text per column, each value cast to its column's type."""
    types = {f.name: f.dataType.simpleString() for f in fields}
    return " AND ".join(f"{quote(column)} = CAST({sql_string(value)} AS {types[column]})"
                        for column, value in key.items())


def _read(spark: SparkSession, fmt: str, ref: str, as_of: int | str | None) -> DataFrame:
    """The table now, or as of a commit id or a timestamp: Spark's own time-travel options, for both formats."""
    reader = spark.read.format(fmt)
    if isinstance(as_of, int):
        reader = reader.option("versionAsOf", as_of)
    elif as_of is not None:
        reader = reader.option("timestampAsOf", as_of)
    return reader.load(ref)
