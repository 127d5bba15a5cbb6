"""`pipeline mirror`: changelog tables -> current-state `mirror.<db>_<table>` tables, incrementally.

Each run reads, per table, only the changelog commits after the mirror's watermark, reduces them to the newest
change per key (`cdc/merge.py`) and applies them: in the pending layout (Iceberg's default) it appends them to
the mirror's pending table (`tables/pending.py`), reading nothing of the mirror; in the merge layout (and the
first build, and Delta) it MERGEs them into the table. The watermark (the last changelog commit merged) is
written in the same commit, so a crash before the commit leaves the mirror and its watermark as they were, and
the re-run applies the same changes. Because a change only replaces an older row, applying a change twice
changes nothing either: re-runs, replays after a lost watermark, and concurrent runs are all harmless.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import structlog

from cdc.merge import UNCHANGED, latest_per_key, merge_clauses, prepared, truncated
from cdc.validate import ChangeError, check_changes, check_key_types
from pipeline.config.settings import PipelineConfig
from tables.catalog import keeps_views
from tables.glue_delta import DeltaGlue
from tables.lake import LakeTable, lake_table, merge_join_conf, session_conf, table_names
from tables.names import quote
from tables.pending import (WATERMARK, append_pending, build_base, create_pending, fold, mirror_state, pending_columns,
                            pending_table, with_unchanged)
from tables.views import replace_views, table_views

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = structlog.get_logger(__name__)

POSITION = "_seq.source_major"  # the source's commit position (commit LSN, DMS commit time); 0 for snapshots
# Commit conflicts of optimistic concurrency, by exception class: a concurrent writer won; retrying is safe.
CONFLICTS = ("ValidationException", "CommitFailedException", "AlreadyExistsException", "ConcurrentAppendException",
             "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException", "MetadataChangedException",
             "ConcurrentTransactionException", "ProtocolChangedException", "DELTA_PATH_EXISTS",
             "TABLE_OR_VIEW_ALREADY_EXISTS")


class MirrorError(RuntimeError):
    """The mirror cannot run as configured; the message says what to change."""


class MirrorConflict(MirrorError):
    """Concurrent runs kept winning the commit for a table; nothing was corrupted, run again later."""


@dataclass(frozen=True)
class TableReport:
    table: str
    changes: int  # changelog rows read
    merged: int  # keys merged (one change per key)
    held_back: int  # rows above the common source position (consistent mode), left for the next run
    watermark: int | None  # changelog commit merged through
    seconds: float

    def line(self) -> str:
        if self.changes == 0:
            return f"{self.table}: up to date (changelog commit {self.watermark})"
        held = f", {self.held_back} held back" if self.held_back else ""
        return (f"{self.table}: {self.changes} changes -> {self.merged} keys merged{held} in {self.seconds:.1f} s "
                f"({self.changes / max(self.seconds, 1e-9):,.0f} changes/s), watermark {self.watermark}")


class MirrorStage:
    def __init__(self, cfg: PipelineConfig, spark: SparkSession) -> None:
        self.cfg = cfg
        self.settings = cfg.mirror
        # A private session: commit metadata travels in session settings, which must not leak into other work.
        self.spark = spark.newSession()
        if cfg.lake.format == "iceberg":
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote(cfg.catalog.name, self.settings.namespace)}")

    def tables(self, requested: Iterable[str] = ()) -> list[str]:
        """The changelog tables to mirror: the requested ones, else `mirror.tables`, else all but dead letters."""
        available = [t for t in table_names(self.cfg, self.spark, self.cfg.changelog.namespace)
                     if t != self.cfg.changelog.dead_letter_table]
        wanted = list(requested) or self.settings.tables or available
        missing = sorted(set(wanted) - set(available))
        if missing:
            raise MirrorError(f"no changelog table {', '.join(missing)} in namespace {self.cfg.changelog.namespace!r} "
                              f"(have: {', '.join(available) or 'none'}); run `pipeline changelog` first or fix --tables")
        return wanted

    def run_once(self, requested: Iterable[str] = ()) -> list[TableReport]:
        names = self.tables(requested)
        limit = self.common_position(names) if self.settings.consistent else None
        reports = []
        glue = DeltaGlue.enabled(self.cfg, self.spark)
        for name in names:
            reports.append(self._merge_with_retries(name, limit))
            log.info("mirror.table", summary=reports[-1].line())
            if glue is not None and lake_table(self.cfg, self.spark, self.settings.namespace, name).exists():
                glue.sync(self.settings.namespace, name)  # Athena's entry (table_type=DELTA), kept current
        return reports

    def run_every(self, interval_s: float, requested: Iterable[str] = (),
                  stopping: threading.Event | None = None) -> None:
        """Merge, then wait out the rest of `interval_s`, until `stopping` is set (SIGTERM)."""
        stopping = stopping or threading.Event()
        while not stopping.is_set():
            started = time.monotonic()
            self.run_once(requested)
            stopping.wait(max(0.0, interval_s - (time.monotonic() - started)))

    def common_position(self, names: list[str]) -> int:
        """The highest source position every table's changelog has reached: merging up to it (and no further)
        never shows half of a source transaction across the mirrors. A table that stays quiet holds the
        others back, as with any low watermark; Debezium heartbeats keep quiet tables moving in production."""
        reached = {}
        for name in names:
            row = self._changelog(name).read().selectExpr(f"max({POSITION}) AS position").first()
            reached[name] = int(row["position"] or 0) if row else 0
        position = min(reached.values())
        log.info("mirror.common_position", position=position, reached=reached)
        return position

    # -- one table -----------------------------------------------------------------------------------

    def _merge_with_retries(self, name: str, limit: int | None) -> TableReport:
        for attempt in range(1, self.settings.max_attempts + 1):
            try:
                return self.merge_table(name, limit)
            except Exception as exc:  # noqa: BLE001 - only commit conflicts are retried
                if not any(marker in str(exc) for marker in CONFLICTS):
                    raise
                log.warning("mirror.conflict", table=name, attempt=attempt, error=str(exc).splitlines()[0][:200])
                time.sleep(min(10.0, 0.5 * 2 ** attempt))
        raise MirrorConflict(f"mirror {name}: a concurrent run committed first {self.settings.max_attempts} times; "
                             "the table is intact; run again (or raise mirror.max_attempts)")

    def merge_table(self, name: str, limit: int | None = None) -> TableReport:
        started = time.perf_counter()
        source, target = self._changelog(name), lake_table(self.cfg, self.spark, self.settings.namespace, name)
        keys = table_keys(self.cfg, name, source)
        pending, appends, building = pending_table(self.cfg, self.spark, name), self._appends(), not target.exists()
        if pending is not None and not appends:
            fold(self.cfg, self.spark, name)  # back to the merge layout: the pending changes go in first
            self.spark.sql(f"DROP TABLE {pending.ref}")
            pending = None
        through = source.commit_id()
        after = watermark(target, pending)
        if through is None or after == through:
            return TableReport(name, 0, 0, 0, after, time.perf_counter() - started)
        landed = source.read_appended(after, through)
        held_back = landed.where(f"{POSITION} > {limit}").count() if limit is not None else 0
        changes = landed.where(f"{POSITION} <= {limit}") if limit is not None else landed
        # One pass over the new rows, materialised once for the checks, the count and the write (a lost executor
        # fails the run, and a re-run is safe).
        rows = prepared(changes).localCheckpoint()
        try:
            totals = check_changes(name, rows, keys)
            widen = check_key_types(name, self._key_types(target, keys), {k: t for k, t in rows.dtypes if k in keys})
        except ChangeError as exc:
            raise MirrorError(str(exc)) from None
        if totals.truncates:  # a truncate reads the mirror's live rows: it deletes those older than it
            mirror = mirror_state(self.cfg, self.spark, name) if target.exists() else None
            rows = truncated(latest_per_key(rows, keys), keys, mirror).localCheckpoint()
        # Held-back rows must be read again: the watermark only moves past commits merged in full.
        merged_through = after if held_back else through
        if totals.changes:
            for table in (target, pending) if pending is not None else (target,):
                table.widen_columns(widen)
            reshaped = self._prepare(target, pending, rows, name)
            if pending is None and appends:
                pending, reshaped = create_pending(self.cfg, self.spark, target, rows), True
            if reshaped:
                self._replace_views(name, keys, source)
            metadata = {WATERMARK: str(merged_through)} if merged_through is not None else {}
            if pending is not None and building:
                build_base(self.cfg, self.spark, target, rows, metadata)
            elif pending is not None:  # every change, not one per key: the overlay orders them as the source did
                append_pending(pending, rows, metadata)
            else:
                reduced = rows if totals.truncates else latest_per_key(rows, keys).localCheckpoint()
                with session_conf(self.spark, merge_join_conf(self.cfg, name, keys)):
                    target.merge(reduced, merge_clauses(reduced.columns, keys, self.settings.delete_mode), metadata)
        return TableReport(name, totals.changes, totals.keys, held_back, merged_through, time.perf_counter() - started)

    def _appends(self) -> bool:
        """Whether this run appends to the pending table: the pending layout on Iceberg (the first run creates
        the base, appends its changes and folds them at once)."""
        return self.settings.layout == "pending" and self.cfg.lake.format == "iceberg"

    def _key_types(self, target: LakeTable, keys: list[str]) -> dict[str, str]:
        """The mirror's key column types, to catch a key whose type changed at the source; none before the mirror."""
        if not target.exists():
            return {}
        return {f.name: f.dataType.simpleString() for f in target.fields() if f.name in keys}

    def _changelog(self, name: str) -> LakeTable:
        return lake_table(self.cfg, self.spark, self.cfg.changelog.namespace, name)

    def _prepare(self, target: LakeTable, pending: LakeTable | None, reduced: DataFrame, name: str) -> bool:
        """Create the mirror on first sight, and add the columns the source gained since the last run (to the
        pending table too); True when the table's shape changed (so its views must be replaced). A base of the
        pending layout keeps `_unchanged` (`tables/pending.py`)."""
        reduced = with_unchanged(reduced) if self._appends() else reduced.drop(UNCHANGED)
        if not target.exists():
            target.create(reduced, self.settings.partition_fields(name), self.settings.write_mode)
            return True
        present = {f.name for f in target.fields()}
        new = [f for f in reduced.schema.fields if f.name not in present]
        if new:
            for table in (target, pending) if pending is not None else (target,):
                table.add_columns(new)
            log.info("mirror.columns_added", table=target.ref, columns=[f.name for f in new])
        return bool(new)

    def _replace_views(self, name: str, keys: list[str], source: LakeTable) -> None:
        """The table's views, in catalogs that keep views (Delta path tables get theirs per query session)."""
        if self.cfg.lake.format != "iceberg" or not keeps_views(self.cfg.catalog):
            return
        columns = [f.name for f in source.fields()]
        views = table_views(self.cfg, name, keys, columns, pending_columns(self.cfg, self.spark, name))
        replace_views(self.spark, self.cfg.catalog.name, views)


def table_keys(cfg: PipelineConfig, name: str, table: LakeTable) -> list[str]:
    """The key columns of `name` (`mirror.keys.<name>`), checked against the table's columns."""
    keys = cfg.mirror.key_columns(name)
    if not keys:
        raise MirrorError(f"table {name} has no key columns: set mirror.keys.{name} = '<column>[,<column>…]' "
                          f"(e.g. --set mirror.keys.{name}=id)")
    columns = {f.name for f in table.fields()}
    unknown = [k for k in keys if k not in columns]
    if unknown:
        raise MirrorError(f"mirror.keys.{name} names {', '.join(unknown)}, which {table.ref} does not have "
                          f"(columns: {', '.join(sorted(c for c in columns if not c.startswith('_')))})")
    return keys


def watermark(mirror: LakeTable, pending: LakeTable | None = None) -> int | None:
    """The changelog commit a mirror has merged through; None before its first merge. In the pending layout the
    pending table's commits carry it once the base is built."""
    for table in (pending, mirror):
        found = table.commit_metadata(WATERMARK) if table is not None and table.exists() else None
        if found:
            return int(found[1])
    return None
