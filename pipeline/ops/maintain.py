"""`pipeline maintain`: compaction, snapshot expiry and orphan cleanup over every changelog and mirror table.

Expiry keeps what incremental merging needs: each mirror's watermark commit, and the changelog commit that
watermark names, so the next `pipeline mirror` still reads only new rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import structlog

from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import WATERMARK
from tables.lake import lake_table, table_names
from tables.maintenance import MaintenanceReport, maintain

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)


def maintain_lake(cfg: PipelineConfig, spark: SparkSession, tables: Sequence[str] = ()) -> list[MaintenanceReport]:
    reports = []
    for name in tables or table_names(cfg, spark, cfg.changelog.namespace):
        mirror = lake_table(cfg, spark, cfg.mirror.namespace, name)
        marked = mirror.commit_metadata(WATERMARK) if mirror.exists() else None
        changelog = lake_table(cfg, spark, cfg.changelog.namespace, name)
        if changelog.exists():
            reports.append(maintain(changelog, cfg.maintenance, frozenset({int(marked[1])} if marked else ())))
        if mirror.exists():
            reports.append(maintain(mirror, cfg.maintenance, frozenset({marked[0]} if marked else ())))
    for report in reports:
        log.info("maintain.table", summary=report.line())
    return reports
