"""Table maintenance for both formats: compaction, snapshot expiry that keeps a time-travel window, and
removal of files no snapshot references.

- Iceberg: the `rewrite_data_files`, `expire_snapshots` and `remove_orphan_files` procedures. The rewrite applies
  position deletes (a fold's, `tables/pending.py`) to the files it rewrites and drops the delete files left
  pointing at none. Expiry spares the snapshots named in `keep` (the commits mirror watermarks point at), so
  incremental reads stay incremental. A table created before the pipeline wrote the change record's columns
  as it does now (`RECORD_HINTS`) is given the hints it lacks first, so its compacted files and its later writes
  are written so too; a hint the table sets otherwise is the user's and stays.
- Delta: `OPTIMIZE` (compaction), then `VACUUM`, which deletes the files of versions older than the window and
  files no version references (Delta keeps the versions' log entries until its own log retention).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import structlog

from pipeline.config.settings import MaintenanceSettings
from tables.append import RECORD_HINTS
from tables.lake import DeltaLakeTable, IcebergLakeTable, LakeTable, session_conf
from tables.names import quote, sql_string

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# VACUUM lists the table's folders in this many tasks; Spark's default (10000) is sized for huge partition
# trees and costs thousands of empty tasks per table on a small cluster.
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
ORPHAN_CHECK_FILES = 1000  # files listed in search of an old one; past that the orphan procedure decides

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class MaintenanceReport:
    table: str
    files_rewritten: int  # data files compaction replaced
    files_added: int  # data files compaction wrote
    snapshots_expired: int  # Iceberg snapshots expired (Delta: 0, see the module docstring)
    files_removed: int | None  # orphan files deleted (Iceberg); None for Delta, whose VACUUM does not report
    seconds: float

    def line(self) -> str:
        removed = "unreported" if self.files_removed is None else str(self.files_removed)
        return (f"{self.table}: compacted {self.files_rewritten} -> {self.files_added} files, "
                f"expired {self.snapshots_expired} snapshots, removed {removed} orphan files in {self.seconds:.1f} s")


def maintain(table: LakeTable, settings: MaintenanceSettings, keep: frozenset[int] = frozenset()) -> MaintenanceReport:
    started = time.perf_counter()
    now = datetime.now(timezone.utc)
    if isinstance(table, IcebergLakeTable):
        counts = _iceberg(table, settings, now - timedelta(hours=settings.retain_hours),
                          now - timedelta(hours=settings.orphan_age_hours), keep)
    elif isinstance(table, DeltaLakeTable):
        counts = _delta(table, settings.retain_hours)
    else:
        raise TypeError(f"no maintenance for {type(table).__name__}")
    return MaintenanceReport(table.name, *counts, seconds=time.perf_counter() - started)


def _iceberg(table: IcebergLakeTable, settings: MaintenanceSettings, cutoff: datetime, orphan_cutoff: datetime,
             keep: frozenset[int]) -> tuple[int, int, int, int | None]:
    spark: SparkSession = table.spark
    _hint(table)
    # the table named with its catalog: a name without one makes Iceberg try its namespace as a catalog first and
    # log that failure, with its stack trace, for every call
    catalog = table.cfg.catalog.name
    system, name = f"{quote(catalog)}.system", sql_string(quote(catalog, table.namespace, table.name))
    rewrite = spark.sql(
        f"CALL {system}.rewrite_data_files(table => {name}, options => map("
        f"'target-file-size-bytes', '{settings.target_file_mb * 1024 * 1024}', 'min-input-files', '2', "
        f"'remove-dangling-deletes', 'true'))").first()
    spared = set(keep) | {table.commit_id()}
    # from the metadata file (one py4j call), not from `<table>.snapshots` (a Spark job a table)
    expired = [snapshot for snapshot in table.commits_before(cutoff.timestamp() * 1000) if snapshot not in spared]
    if expired:
        spark.sql(f"CALL {system}.expire_snapshots(table => {name}, "
                  f"snapshot_ids => array({', '.join(map(str, expired))}))")
    # An orphan the procedure may delete is older than its cutoff: a table with no file that old (one made within
    # `maintenance.orphan_age_hours`: a new table, a new environment's hundreds) skips its Spark jobs (the listing,
    # every snapshot's files, a join), about 2.5 CPU-seconds a table however few its files.
    orphans = 0
    if table.holds_file_before(orphan_cutoff.timestamp() * 1000, ORPHAN_CHECK_FILES):
        orphans = spark.sql(f"CALL {system}.remove_orphan_files(table => {name}, "
                            f"older_than => TIMESTAMP '{_sql_time(orphan_cutoff)}')").count()
    return (int(rewrite["rewritten_data_files_count"]) if rewrite else 0,
            int(rewrite["added_data_files_count"]) if rewrite else 0, len(expired), orphans)


def _hint(table: IcebergLakeTable) -> None:
    """Give `table` the `RECORD_HINTS` it has no value for (one read of its metadata; a change only when some
    are missing)."""
    held = table.properties()
    missing = {key: value for key, value in RECORD_HINTS.items() if key not in held}
    if missing:
        table.set_properties(missing)
        log.info("maintain.hinted", table=table.name, properties=len(missing))


def _delta(table: DeltaLakeTable, retain_hours: float) -> tuple[int, int, int, int | None]:
    from delta.tables import DeltaTable

    spark: SparkSession = table.spark
    delta = DeltaTable.forPath(spark, table.ref)
    metrics = delta.optimize().executeCompaction().first()["metrics"]  # type: ignore[index]
    with session_conf(spark, {DELTA_RETENTION_CHECK: "false",  # a window shorter than Delta's 7 days is deliberate
                              LISTING_PARALLELISM: str(spark.sparkContext.defaultParallelism)}):
        delta.vacuum(retain_hours)
    return int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]), 0, None


def _sql_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")
