"""Gather one `LakeStatus`: the lake's facts table by table, joined with the transport's lag."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pipeline.config.kafka import KafkaUnavailable
from pipeline.ops.status.lake import (
    DeltaLake,
    IcebergLake,
    changelog_history,
    dead_letters_by_table,
    last_compaction,
    mirror_state,
)
from pipeline.ops.status.model import LakeStatus, SourceLag, TableStatus
from pipeline.ops.status.transport import source_lags
from tables.names import LakeNames, UnmappableName

if TYPE_CHECKING:
    from pipeline.config.settings import PipelineConfig


def collect(cfg: PipelineConfig, now: datetime | None = None) -> LakeStatus:
    """Every changelog table's status. Iceberg needs no Spark session; Delta starts one."""
    now = now or datetime.now(UTC)
    if cfg.lake.format == "delta":
        from pipeline.runtime.spark import get_spark

        lake: IcebergLake | DeltaLake = DeltaLake(cfg, get_spark(cfg))
    else:
        lake = IcebergLake(cfg)
    changelog_ns, mirror_ns = cfg.changelog.namespace, cfg.mirror.namespace
    names = cfg.names.rule()
    dead = dead_letters_by_table(lake.dead_letters(changelog_ns, cfg.changelog.dead_letter_table), names)
    unreachable: list[str] = []
    try:
        sources = source_lags(cfg)
    except KafkaUnavailable as exc:  # the lake's own facts still answer
        sources, unreachable = [], [str(exc)]
    mirrors = set(lake.names(mirror_ns))
    pendings = set(lake.names(cfg.mirror.pending_namespace)) if cfg.lake.format == "iceberg" else set()

    def table_status(name: str) -> TableStatus | None:
        changelog = lake.facts(changelog_ns, name)
        if changelog is None:
            return None
        mirror = lake.facts(mirror_ns, name) if name in mirrors else None
        pending = lake.facts(cfg.mirror.pending_namespace, name) if name in pendings else None
        history = changelog_history(changelog)
        last = history[-1] if history else None
        return TableStatus(
            table=name, changelog_rows=changelog.rows,
            last_batch_at=last.at if last else None, last_batch_rows=last.rows if last else 0,
            last_batch_rate=last.rows / last.seconds if last and last.seconds else None, history=history,
            transport=_transport_of(name, sources, names), mirror=mirror_state(changelog, mirror, now, pending),
            dead_letters=dead.get(name, {}), last_maintenance=last_compaction(changelog, mirror))

    # A table's facts are a few catalog and metadata reads: tables read at once overlap their waits
    with ThreadPoolExecutor(cfg.status.concurrent_tables, thread_name_prefix="status") as pool:
        found = pool.map(table_status, [n for n in lake.names(changelog_ns) if n != cfg.changelog.dead_letter_table])
        tables = [table for table in found if table is not None]
    listed = {t.table for t in tables}
    elsewhere = {name: reasons for name, reasons in dead.items() if name not in listed}
    return LakeStatus(now, tables, sources, cfg.status.max_lag, unreachable, elsewhere)


def _transport_of(table: str, sources: list[SourceLag], names: LakeNames) -> SourceLag | None:
    """The lag that reaches a table: its Kafka topic's (a topic lands in the table its name gives), or the one
    stream's or queue's that every table of the stage shares; with several topics of one table, the oldest."""
    def lands_here(source: SourceLag) -> bool:
        if source.transport != "kafka":
            return True
        try:
            return names.of_topic(source.source) == table
        except UnmappableName:
            return False

    mine = [s for s in sources if lands_here(s)]
    if not mine:
        return None
    return max(mine, key=lambda s: (s.seconds is not None, s.seconds or 0.0))
