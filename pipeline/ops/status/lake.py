"""What the lake's own commit histories say of each table, without reading a data file.

Iceberg is read through pyiceberg (the catalog and the table metadata: no Spark session, so `status` answers
in about a second); Delta through Spark (its commit log). Each commit's newest source time comes from the
column statistics the writers keep (Iceberg manifests' upper bounds, Delta's `add.stats`), not from the rows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pipeline.ops.status.model import Commit, MirrorState
from tables.append import BATCH_STARTED
from tables.names import LakeNames, UnmappableName
from tables.pending import WATERMARK

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from pipeline.config.settings import PipelineConfig

COMPACTIONS = {"replace", "OPTIMIZE"}  # Iceberg's rewrite_data_files, Delta's OPTIMIZE


@dataclass(frozen=True)
class CommitFacts:
    id: int  # Iceberg snapshot id, Delta version
    at: datetime
    operation: str
    rows_added: int
    newest_source_ts: datetime | None
    watermark: int | None = None  # mirror commits: the changelog commit merged through
    batch_started: datetime | None = None  # changelog commits: when the stage's batch began


@dataclass(frozen=True)
class TableFacts:
    name: str
    rows: int
    commits: list[CommitFacts]  # oldest first


def changelog_history(table: TableFacts) -> list[Commit]:
    """The changelog's appends, oldest first, with how far behind the source each was."""
    return [Commit(c.at, c.rows_added, (c.at - c.newest_source_ts).total_seconds() if c.newest_source_ts else None,
                   (c.at - c.batch_started).total_seconds() if c.batch_started else None)
            for c in table.commits if c.operation in {"append", "WRITE", "STREAMING UPDATE"} and c.rows_added]


def mirror_state(changelog: TableFacts, mirror: TableFacts | None, now: datetime,
                 pending: TableFacts | None = None) -> MirrorState | None:
    """How far the mirror has merged the changelog: its watermark, and the age of what waits to be merged. In
    the pending layout (`pending`: its pending table) runs put the watermark on the pending table and folds on
    the mirror: the newest of either counts."""
    marks = [c.watermark for table in (mirror, pending) if table for c in table.commits if c.watermark is not None]
    if not marks:
        return None
    position = {c.id: i for i, c in enumerate(changelog.commits)}
    mark = max(marks, key=lambda m: position.get(m, -1))
    through = position.get(mark)
    waiting = [c for c in changelog.commits[(through + 1 if through is not None else 0):] if c.rows_added]
    return MirrorState(watermark=mark,
                       merged_at=changelog.commits[through].at if through is not None else None,
                       pending_commits=len(waiting),
                       lag_seconds=(now - waiting[0].at).total_seconds() if waiting else 0.0)


def last_compaction(*tables: TableFacts | None) -> datetime | None:
    found = [c.at for t in tables if t for c in t.commits if c.operation in COMPACTIONS]
    return max(found) if found else None


def dead_letters_by_table(rows: list[tuple[str, str, int]], names: LakeNames) -> dict[str, dict[str, int]]:
    """(topic, reason, count) rows -> table (as `names` names it) -> reason -> count; a topic that names no table
    counts under it."""
    found: dict[str, dict[str, int]] = {}
    for topic, reason, count in rows:
        try:
            table = names.of_topic(topic)
        except UnmappableName:
            table = topic
        by_reason = found.setdefault(table, {})
        by_reason[reason] = by_reason.get(reason, 0) + count
    return found


class IcebergLake:
    """The lake's tables through pyiceberg: catalog and metadata files only. Each thread has a catalog of its
    own: `status` reads tables from several threads, and pyiceberg's Hive catalog holds one connection."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self._local = threading.local()

    @property
    def catalog(self) -> Catalog:
        if not hasattr(self._local, "catalog"):
            from tables.catalog import load_pyiceberg_catalog

            self._local.catalog = load_pyiceberg_catalog(self.cfg.catalog, self.cfg.aws)
        return self._local.catalog

    def names(self, namespace: str) -> list[str]:
        from pyiceberg.exceptions import NoSuchNamespaceError

        try:
            return sorted(name for _, name in self.catalog.list_tables(namespace))
        except NoSuchNamespaceError:
            return []

    def facts(self, namespace: str, name: str) -> TableFacts | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = self.catalog.load_table((namespace, name))
        except NoSuchTableError:
            return None
        newest = _newest_source_ts(table)
        commits = []
        for snapshot in table.metadata.snapshots:
            summary = snapshot.summary
            mark = summary.get(WATERMARK) if summary else None
            commits.append(CommitFacts(
                id=snapshot.snapshot_id, at=datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC),
                operation=summary.operation.value if summary else "",
                rows_added=int(summary.get("added-records") or 0) if summary else 0,
                newest_source_ts=newest.get(snapshot.snapshot_id), watermark=int(mark) if mark else None,
                batch_started=_epoch_ms(summary.get(BATCH_STARTED) if summary else None)))
        current = table.current_snapshot()
        rows = int(current.summary.get("total-records") or 0) if current and current.summary else 0
        return TableFacts(name, rows, commits)

    def dead_letters(self, namespace: str, name: str) -> list[tuple[str, str, int]]:
        """(topic, reason, count) of the dead-letter table; none when it does not exist."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = self.catalog.load_table((namespace, name))
        except NoSuchTableError:
            return []
        counted = (table.scan(selected_fields=("topic", "error_class")).to_arrow()
                   .group_by(["topic", "error_class"]).aggregate([("topic", "count")]))
        return list(zip(*(counted.column(c).to_pylist() for c in ("topic", "error_class", "topic_count")), strict=True))


def _epoch_ms(value: str | None) -> datetime | None:
    return datetime.fromtimestamp(int(value) / 1000, UTC) if value else None


def _newest_source_ts(table: Table) -> dict[int, datetime]:
    """Snapshot id -> the newest `_source_ts` of the live data files it added: the column's upper bound in the
    current snapshot's manifests, decoded for that one column (`inspect.entries()` decodes every column's
    bounds, most of a wide table's status)."""
    from pyiceberg.conversions import from_bytes

    snapshot = table.current_snapshot()
    if snapshot is None or "_source_ts" not in table.schema().column_names:
        return {}
    column = table.schema().find_field("_source_ts")
    newest: dict[int, int] = {}
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            bound = (entry.data_file.upper_bounds or {}).get(column.field_id)
            if bound is not None and entry.snapshot_id is not None:
                micros = from_bytes(column.field_type, bound)
                newest[entry.snapshot_id] = max(micros, newest.get(entry.snapshot_id, micros))
    return {snapshot_id: datetime.fromtimestamp(micros / 1_000_000, UTC) for snapshot_id, micros in newest.items()}


class DeltaLake:
    """The lake's tables through Spark: Delta's commit log (its history and its `add` actions' statistics)."""

    def __init__(self, cfg: PipelineConfig, spark: SparkSession) -> None:
        self.cfg, self.spark = cfg, spark

    def names(self, namespace: str) -> list[str]:
        from tables.lake import table_names

        return table_names(self.cfg, self.spark, namespace)

    def _path(self, namespace: str, name: str) -> str:
        return f"{self.cfg.lake.delta_root}/{namespace}/{name}"

    def facts(self, namespace: str, name: str) -> TableFacts | None:
        import json

        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        path = self._path(namespace, name)
        if not DeltaTable.isDeltaTable(self.spark, path):
            return None
        history = (DeltaTable.forPath(self.spark, path).history()
                   .select("version", "timestamp", "operation", "operationMetrics", "userMetadata").collect())
        log = self.spark.read.json(f"{path}/_delta_log/*.json").where("add IS NOT NULL")
        stats = (log.select(F.regexp_extract(F.input_file_name(), r"(\d+)\.json$", 1).cast("long").alias("version"),
                            F.get_json_object("add.stats", "$.maxValues._source_ts").alias("ts"),
                            F.get_json_object("add.stats", "$.numRecords").cast("long").alias("n"))
                 .groupBy("version").agg(F.max(F.to_timestamp("ts")).alias("ts"), F.sum("n").alias("n")).collect())
        newest = {r["version"]: r["ts"].replace(tzinfo=UTC) if r["ts"] else None for r in stats}
        commits = []
        for row in sorted(history, key=lambda r: r["version"]):
            metrics = row["operationMetrics"] or {}
            metadata = json.loads(row["userMetadata"]) if row["userMetadata"] else {}
            mark = metadata.get(WATERMARK)
            commits.append(CommitFacts(
                id=row["version"], at=row["timestamp"].replace(tzinfo=UTC), operation=row["operation"],
                rows_added=int(metrics.get("numOutputRows", 0)), newest_source_ts=newest.get(row["version"]),
                watermark=int(mark) if mark else None, batch_started=_epoch_ms(metadata.get(BATCH_STARTED))))
        rows = int(self.spark.read.format("delta").load(path).count())
        return TableFacts(name, rows, commits)

    def dead_letters(self, namespace: str, name: str) -> list[tuple[str, str, int]]:
        from delta.tables import DeltaTable

        path = self._path(namespace, name)
        if not DeltaTable.isDeltaTable(self.spark, path):
            return []
        counted = self.spark.read.format("delta").load(path).groupBy("topic", "error_class").count().collect()
        return [(r["topic"], r["error_class"], r["count"]) for r in counted]
