"""`pipeline maintain`: compaction, snapshot expiry and orphan cleanup over every changelog and mirror table.

A mirror in the pending layout is folded first (its pending changes written into its base, `tables/pending.py`),
so its overlay stays small and reads stay fast. Expiry keeps what incremental merging needs: each mirror's
watermark commit, and the changelog commit that watermark names, so the next `pipeline mirror` still reads only
new rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import structlog

from pipeline.config.settings import PipelineConfig
from pipeline.runtime.sessions import SessionPool
from pipeline.stages.mirror import WATERMARK, with_table_keys
from tables.lake import lake_table, table_names
from tables.maintenance import MaintenanceReport, maintain
from tables.pending import fold, pending_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)


def maintain_lake(cfg: PipelineConfig, spark: SparkSession, tables: Sequence[str] = ()) -> list[MaintenanceReport]:
    """Every table's reports (its changelog, then its pending table and mirror), tables in order; up to
    `maintenance.concurrent_tables` tables at once, each in a thread and session of its own."""
    sessions = SessionPool(spark)
    names = list(tables or table_names(cfg, spark, cfg.changelog.namespace))
    cfg, _ = with_table_keys(cfg, spark, names)  # the fold resolves by key
    per_table = sessions.map(lambda name: _maintain_table(cfg, sessions.current, name), names,
                             cfg.maintenance.concurrent_tables, "maintain")
    reports = [report for found in per_table for report in found]
    for report in reports:
        log.info("maintain.table", summary=report.line())
    return reports


def _maintain_table(cfg: PipelineConfig, spark: SparkSession, name: str) -> list[MaintenanceReport]:
    mirror, pending = lake_table(cfg, spark, cfg.mirror.namespace, name), pending_table(cfg, spark, name)
    if pending is not None and cfg.mirror.key_columns(name):
        fold(cfg, spark, name)
    elif pending is not None:
        log.warning("maintain.not_folded", table=name, fix=f"set mirror.keys.{name} (the fold resolves by key)")
    # The watermark is in the pending table's commits once it has one, else in the mirror's.
    marked = [(table, table.commit_metadata(WATERMARK)) for table in (pending, mirror)
              if table is not None and table.exists()]
    newest = next((found for _, found in marked if found), None)
    changelog = lake_table(cfg, spark, cfg.changelog.namespace, name)
    reports = []
    if changelog.exists():
        reports.append(maintain(changelog, cfg.maintenance, frozenset({int(newest[1])} if newest else ())))
    for table, found in reversed(marked):
        reports.append(maintain(table, cfg.maintenance, frozenset({found[0]} if found else ())))
    return reports
