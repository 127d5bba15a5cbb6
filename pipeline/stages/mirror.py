"""`pipeline mirror`: changelog tables -> current-state `mirror.<db>_<table>` tables, incrementally.

Each run reads, per table, only the changelog commits after the mirror's watermark and applies them with
`apply_changes` (`pipeline/api/apply.py`, the public API's one code path): in the pending layout (Iceberg's
default) it appends them to the mirror's pending table (`tables/pending.py`), reading nothing of the mirror; in
the merge layout (and Delta) it MERGEs the newest change per key (`cdc/merge.py`), or for an SCD2 mirror the
rebuilt versions of the keys changed (`tables/history.py`); an Iceberg mirror's first build is one pass over its
changes (`tables/first_build.py`). The watermark (the last changelog commit merged) is
written in the same commit, so a crash before the commit leaves the mirror and its watermark as they were, and
the re-run applies the same changes. Because a change only replaces an older row, applying a change twice
changes nothing either: re-runs, replays after a lost watermark, and concurrent runs are all harmless.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import structlog

from cdc.columns import source_columns
from cdc.merge import UNCHANGED
from cdc.validate import ChangeError
from pipeline.api.apply import PendingAppend, apply_changes, apply_pending_together, pending_append
from pipeline.config.settings import PipelineConfig
from pipeline.runtime.sessions import SessionPool
from tables.append import spark_schema
from tables.backfill_state import backfill_running, keys_once
from tables.catalog import keeps_views
from tables.glue_delta import DeltaGlue
from tables.history import mirror_history_columns
from tables.keys import table_key
from tables.lake import IcebergLakeTable, LakeTable, create_namespace, java_class, lake_table, table_names
from tables.names import quote
from tables.pending import WATERMARK, pending_columns, pending_table
from tables.views import replace_views, table_views

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


class MissingKeys(MirrorError):
    """Tables with no key from any source, all named in one message with the setting to add; `reports` are
    the other tables, which were mirrored."""

    def __init__(self, tables: list[str], reports: list[TableReport] | None = None) -> None:
        settings = " ".join(f"--set mirror.keys.{name}=<column>[,<column>…]" for name in tables)
        mirrored = f"; the other {len(reports)} table(s) were mirrored" if reports else ""
        super().__init__(f"{len(tables)} table(s) have no key: {', '.join(tables)}. Their source names none (a "
                         "table without a primary key, DMS files on S3, or DMS without IncludeControlDetails): "
                         f"set mirror.keys.<table> for each ({settings}){mirrored}")
        self.tables = tables
        self.reports = reports or []


@dataclass(frozen=True)
class Position:
    """Where a table's mirror stands: the changelog's current commit (`through`, None before its first), the
    commit the mirror merged through (`merged`, its watermark), whether it has a `pending` table, and the
    seconds the lookup took."""

    through: int | None
    merged: int | None
    pending: bool
    seconds: float


@dataclass(frozen=True)
class TableReport:
    table: str
    changes: int  # changelog rows read
    merged: int  # keys merged (one change per key)
    held_back: int  # rows above the common source position (consistent mode), left for the next run
    watermark: int | None  # changelog commit merged through
    seconds: float  # of the table's merge; of all of them, for tables merged together
    together: int = 1  # the tables merged in the same jobs (`MirrorStage.merge_together`)

    def line(self) -> str:
        if self.changes == 0:
            return f"{self.table}: up to date (changelog commit {self.watermark})"
        held = f", {self.held_back} held back" if self.held_back else ""
        if self.together > 1:
            return (f"{self.table}: {self.changes} changes -> {self.merged} keys merged, with {self.together - 1} "
                    f"other table(s) in {self.seconds:.1f} s, watermark {self.watermark}")
        return (f"{self.table}: {self.changes} changes -> {self.merged} keys merged{held} in {self.seconds:.1f} s "
                f"({self.changes / max(self.seconds, 1e-9):,.0f} changes/s), watermark {self.watermark}")


class MirrorStage:
    def __init__(self, cfg: PipelineConfig, spark: SparkSession) -> None:
        self.cfg = cfg
        self.settings = cfg.mirror
        # A private session: commit metadata travels in session settings, which must not leak into other work,
        # nor into the tables merged beside it (each worker of `run_once` borrows a session of its own)
        self._sessions = SessionPool(spark.newSession())
        if cfg.lake.format == "iceberg":
            create_namespace(self.spark, cfg.catalog.name, self.settings.namespace)

    @property
    def spark(self) -> SparkSession:
        """The calling thread's session: the stage's own, or the one a worker of `run_once` borrowed."""
        return self._sessions.current

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
        """Merge each table once. The tables with nothing new are found first (`positions`) and only reported;
        those whose changes only append to their pending table are merged together (`merge_together`); the
        others one by one, up to `mirror.concurrent_tables` at a time, each in a thread and session of its own:
        one table's driver work (reading its watermark, planning the merge, the commit) is about half of a small
        table's merge, and would otherwise leave the executors idle. Every table is tried; a failure is raised
        (the first, in table order) once the others are done."""
        names = self.tables(requested)
        positions = self.positions(names)
        quiet = {name: TableReport(name, 0, 0, 0, at.merged, at.seconds) for name, at in positions.items()
                 if at is not None and at.through is not None and at.merged == at.through}
        log.info("mirror.up_to_date", tables=len(quiet), of=len(names))
        backfilling = self.backfilling([name for name in names if name not in quiet])
        if backfilling:
            log.warning("mirror.backfill_running", tables=sorted(backfilling),
                        hint="`pipeline backfill` mirrors them once their snapshot has landed")
            names = [name for name in names if name not in backfilling]
        self.cfg, keyless = with_table_keys(self.cfg, self.spark, [name for name in names if name not in quiet])
        self.settings = self.cfg.mirror
        names = [name for name in names if name not in keyless]
        limit = self.common_position(names) if self.settings.consistent and names else None
        glue = DeltaGlue.enabled(self.cfg, self.spark)
        together = self.merge_together([name for name in names if name not in quiet], positions) if limit is None else {}
        done = {**quiet, **together}

        def merge(name: str) -> TableReport:
            report = done[name] if name in done else self._merge_with_retries(name, limit)
            log.info("mirror.table", summary=report.line())
            if glue is not None and lake_table(self.cfg, self.spark, self.settings.namespace, name).exists():
                glue.sync(self.settings.namespace, name)  # Athena's entry (table_type=DELTA), kept current
            return report

        merged = {name: merge(name) for name in names if name in done}  # reported before the others start
        busy = [name for name in names if name not in done]
        merged.update(zip(busy, self._sessions.map(merge, busy, self.settings.concurrent_tables, "mirror"),
                          strict=True))
        reports = [merged[name] for name in names]
        if keyless:
            raise MissingKeys(keyless, reports)
        return reports

    def positions(self, names: list[str]) -> dict[str, Position | None]:
        """Each table's current changelog commit and its mirror's watermark (None for a table never merged),
        read from the tables' metadata without a Spark job, `mirror.concurrent_lookups` tables at a time (Iceberg's
        in the JVM, by one call: jvm/cdc `Positions`). The mirror and pending namespaces are listed once, so a
        table without a mirror costs no lookup of one. A table whose mirror has merged its changelog's current
        commit is then only reported: no key lookup, no schema, no merge planning."""
        mirrors = set(table_names(self.cfg, self.spark, self.settings.namespace))
        if self.cfg.lake.format == "iceberg":
            return self._iceberg_positions(names, mirrors)

        def look(name: str) -> Position | None:
            if name not in mirrors:
                return None  # never merged
            started = time.perf_counter()
            through = self._changelog(name).commit_id()
            merged = watermark(lake_table(self.cfg, self.spark, self.settings.namespace, name))
            return Position(through, merged, False, time.perf_counter() - started)

        return dict(zip(names, self._sessions.map(look, names, self.settings.concurrent_lookups, "mirror-lookup"),
                        strict=True))

    def _iceberg_positions(self, names: list[str], mirrors: set[str]) -> dict[str, Position | None]:
        """`positions` of Iceberg tables, the ones with a mirror looked up in the JVM by one call."""
        pending = set(table_names(self.cfg, self.spark, self.settings.pending_namespace))
        listed = [name for name in names if name in mirrors]
        found = json.loads(java_class(self.spark, "cdc.spark.Positions").of(
            self.spark._jsparkSession, self.cfg.catalog.name, self.cfg.changelog.namespace,  # type: ignore[attr-defined]
            self.settings.namespace, self.settings.pending_namespace, listed, [name in pending for name in listed],
            WATERMARK, self.settings.concurrent_lookups)) if listed else []
        positions: dict[str, Position | None] = dict.fromkeys(names)
        for name, at in zip(listed, found, strict=True):
            merged = int(at["merged"]) if at["merged"] is not None else None
            positions[name] = Position(at["through"], merged, name in pending, at["seconds"])
        return positions

    def backfilling(self, names: list[str]) -> set[str]:
        """The tables of `names` whose snapshot `pipeline backfill` is landing (`tables/backfill_state.py`): they
        are left alone until it is done. A table property each, `mirror.concurrent_lookups` tables at a time."""
        def running(name: str) -> bool:
            table = self._changelog(name)
            return table.exists() and backfill_running(table.properties())

        found = self._sessions.map(running, names, self.settings.concurrent_lookups, "mirror-backfill")
        return {name for name, is_running in zip(names, found, strict=True) if is_running}

    def merge_together(self, names: list[str], positions: dict[str, Position | None]) -> dict[str, TableReport]:
        """The tables of `names` whose new changes only append to their mirror's pending table (an Iceberg mirror
        in the pending layout, SCD type 1, built already or new, a small batch: `pending_append`), merged
        together: each table's reading and planning in a thread, then one Spark job whose tasks check each table's
        changes and write them (`apply_pending_together`), each table committed with its watermark, then the
        views of the mirrors created. A batch of a whole database is mostly tables with a few changes each, and a
        job, a plan and a commit a table cost far more than their rows. Returns the reports of the tables merged;
        the others (a large batch or first build, new columns, a truncate, changes that fail a check) are left to
        `merge_table`."""
        if self.cfg.lake.format != "iceberg" or self.settings.layout != "pending" or not names:
            return {}
        started, spark = time.perf_counter(), self._sessions.root  # the frames of one job share a session

        def plan(name: str) -> PendingAppend | None:
            at, keys = positions.get(name), self.settings.key_columns(name)
            source = lake_table(self.cfg, spark, self.cfg.changelog.namespace, name)
            through = at.through if at is not None else source.commit_id()
            if through is None or not keys or not isinstance(source, IcebergLakeTable):
                return None
            after = at.merged if at is not None else None
            appending = at is not None and at.pending and after is not None
            try:
                return pending_append(self.cfg, spark, name, source.read_appended(after, through), keys,
                                      {WATERMARK: str(through)}, appending=appending,
                                      rows=source.records_added(after, through))
            except Exception as exc:  # noqa: BLE001 - a concurrent run created the mirror: it goes alone, retried
                if not any(marker in str(exc) for marker in CONFLICTS):
                    raise
                return None

        planned = [part for part in self._sessions.map(plan, names, self.settings.concurrent_lookups, "mirror-plan")
                   if part is not None]
        log.info("mirror.together_planned", tables=len(planned), of=len(names),
                 seconds=round(time.perf_counter() - started, 2))  # the write and the commits follow
        results = apply_pending_together(spark, planned, self.settings.concurrent_lookups)
        merged = [(part, result) for part, result in zip(planned, results, strict=True) if result is not None]
        self._sessions.map(self._replace_built_views, [part for part, result in merged if result.reshaped],
                           self.settings.concurrent_tables, "mirror-views")
        seconds = time.perf_counter() - started
        reports = {part.name: TableReport(part.name, result.changes, result.keys, 0, int(part.metadata[WATERMARK]),
                                          seconds, len(merged)) for part, result in merged}
        log.info("mirror.together", tables=len(reports), alone=len(planned) - len(reports), of=len(names),
                 seconds=round(seconds, 2))
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
        through = source.commit_id()
        after = watermark(target if target.exists() else None, pending_table(self.cfg, self.spark, name))
        if through is None or after == through:
            return TableReport(name, 0, 0, 0, after, time.perf_counter() - started)
        landed = source.read_appended(after, through)
        held_back = landed.where(f"{POSITION} > {limit}").count() if limit is not None else 0
        changes = landed.where(f"{POSITION} <= {limit}") if limit is not None else landed
        # Held-back rows must be read again: the watermark only moves past commits merged in full.
        merged_through = after if held_back else through
        tracked, untracked = self.settings.history_columns(name)
        iceberg = self.cfg.lake.format == "iceberg"
        once = after is None and keys_once(source.properties(), through)  # a first build of one backfill pass
        try:
            applied = apply_changes(
                self.spark, f"{self.cfg.catalog.name}.{self.settings.namespace}.{name}" if iceberg else target.ref,
                changes, keys, "_seq", apply_as_deletes="_is_deleted", stored_as_scd_type=self.settings.scd_type_of(name),
                track_history_column_list=tracked, track_history_except_column_list=untracked,
                delete_mode=self.settings.delete_mode, layout=self.settings.layout, config=self.cfg,
                commit_metadata={WATERMARK: str(merged_through)} if merged_through is not None else {},
                keys_once=once)
        except ChangeError as exc:
            raise MirrorError(str(exc)) from None
        if applied.reshaped:
            self._replace_views(name, keys, source)
        return TableReport(name, applied.changes, applied.keys, held_back, merged_through,
                           time.perf_counter() - started)

    def _changelog(self, name: str) -> LakeTable:
        return lake_table(self.cfg, self.spark, self.cfg.changelog.namespace, name)

    def _replace_built_views(self, part: PendingAppend) -> None:
        """The views of a mirror `merge_together` built, from the columns its planning had: the changelog read's and
        the base's (the table it created; its pending table has them and `_unchanged`). Looking the three tables up
        again cost more than replacing the views, a run building hundreds of mirrors paid it for each."""
        if not keeps_views(self.cfg.catalog):
            return
        catalog, changelog, base = self.cfg.catalog.name, part.rows.schema, spark_schema(self.spark, part.table)
        views = table_views(self.cfg, part.name, part.keys, changelog.fieldNames(),
                            [f.name for f in base.fields if f.name != UNCHANGED])
        replace_views(self.spark, catalog, views, {quote(catalog, self.cfg.changelog.namespace, part.name): changelog,
                                                   quote(catalog, self.settings.namespace, part.name): base})

    def _replace_views(self, name: str, keys: list[str], source: LakeTable) -> None:
        """The table's views, in catalogs that keep views (Delta path tables get theirs per query session)."""
        if self.cfg.lake.format != "iceberg" or not keeps_views(self.cfg.catalog):
            return
        columns = [f.name for f in source.fields()]
        views = table_views(self.cfg, name, keys, columns, pending_columns(self.cfg, self.spark, name),
                            mirror_history_columns(self.cfg, self.spark, name))
        replace_views(self.spark, self.cfg.catalog.name, views)


def with_table_keys(cfg: PipelineConfig, spark: SparkSession, names: list[str]) -> tuple[PipelineConfig, list[str]]:
    """The configuration with `mirror.keys` holding the key of each of the changelog tables `names` that the
    table keeps (`tables/keys.py`: Debezium's record key, a DMS table-def's primary key) where no setting names
    one, so everything downstream (merge, views, fold) sees one key per table; and the tables with no key. The
    tables' properties are read `mirror.concurrent_lookups` at a time (a catalog load and a metadata file each)."""
    from concurrent.futures import ThreadPoolExecutor

    def kept(name: str) -> list[str]:
        table = lake_table(cfg, spark, cfg.changelog.namespace, name)
        return table_key([], table.properties()) if table.exists() else []

    unset = [name for name in names if name not in cfg.mirror.keys]
    with ThreadPoolExecutor(cfg.mirror.concurrent_lookups, thread_name_prefix="mirror-keys") as pool:
        found = dict(zip(unset, pool.map(kept, unset), strict=True))
    keys = {**cfg.mirror.keys, **{name: ",".join(key) for name, key in found.items() if key}}
    keyless = [name for name, key in found.items() if not key]
    return cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"keys": keys})}), keyless


def table_keys(cfg: PipelineConfig, name: str, table: LakeTable) -> list[str]:
    """The key columns of `name`: `mirror.keys.<name>`, else the key the changelog table `table` keeps;
    checked against the table's columns."""
    configured = cfg.mirror.key_columns(name)  # `run_once` sets the keys tables keep: no lookup of them again
    keys = table_key(configured, table.properties() if not configured and table.exists() else {})
    if not keys:
        raise MissingKeys([name])
    columns = {f.name for f in table.fields()}
    unknown = [k for k in keys if k not in columns]
    if unknown:
        raise MirrorError(f"mirror.keys.{name} names {', '.join(unknown)}, which {table.ref} does not have "
                          f"(columns: {', '.join(sorted(source_columns(columns)))})")
    return keys


def watermark(mirror: LakeTable | None, pending: LakeTable | None = None) -> int | None:
    """The changelog commit a mirror has merged through; None before its first merge (`mirror` None: no mirror
    yet). In the pending layout the pending table's commits carry it once the base is built. Both tables, when
    given, exist (a lookup of a missing table costs an exception over py4j)."""
    for table in (pending, mirror):
        found = table.commit_metadata(WATERMARK) if table is not None else None
        if found:
            return int(found[1])
    return None
