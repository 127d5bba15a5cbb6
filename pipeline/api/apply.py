"""`apply_changes`: a DataFrame of changes applied to an Iceberg or Delta table, SCD type 1 or 2, in any Spark job.

Its parameters are AUTO CDC's (`create_auto_cdc_flow`), and it is the mirror stage's own step:
`python -m pipeline mirror` reads each changelog's new commits and calls it with the changelog's columns
(`sequence_by="_seq"`, `apply_as_deletes="_is_deleted"`). The changes are first made canonical (`_seq`,
`_is_deleted`, `_op`, `_source_ts`, `_unchanged`, as the changelog has them), checked (`cdc/validate.py`: nothing
is written when a check fails), then applied as the table's layout and SCD type say: MERGEd (`cdc/merge.py`),
appended to the pending table (`tables/pending.py`), or rebuilt into versions (`tables/history.py`). A new
Iceberg table (a current-state one also when empty; an SCD2 one when its changes hold no truncate) is built in one
pass instead (`tables/first_build.py`, which checks as it writes).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog

from cdc.columns import is_pipeline_column, source_columns
from cdc.merge import (CHANGELOG_ONLY, TOMBSTONE, TRUNCATE, UNCHANGED, is_truncate, latest_per_key, merge_clauses,
                       prepared, truncated, truncates)
from cdc.scd2 import VERSION_COLUMNS, is_history, truncates_as_deletes
from cdc.validate import ChangeError, check_changes, check_columns, check_key_types
from pipeline.config.settings import LakeSettings, MirrorSettings, PipelineConfig
from tables.history import append_versions, with_versions, write_versions
from tables.append import append_together, fits, iceberg_table, planned, spark_schema
from tables.first_build import first_build, first_history_build, is_first_build
from tables.lake import (IcebergLakeTable, LakeTable, empty_frame, java_class, lake_table, merge_join_conf,
                         session_conf)
from tables.names import quote, sql_string
from tables.pending import aligned, append_pending, create_pending, fold, mirror_state, pending_table, with_unchanged

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = structlog.get_logger(__name__)

CANONICAL_SEQUENCE = "_seq"  # the changelog's order: struct(source_major, source_minor, transport_partition, …)


@dataclass(frozen=True)
class Applied:
    """What one call applied: changes read, keys changed, and whether the table was created or gained columns
    (its views then need replacing)."""

    changes: int
    keys: int
    reshaped: bool


def apply_changes(spark: SparkSession, target: str, source: DataFrame, keys: list[str], sequence_by: str, *,
                  apply_as_deletes: str | None = None, source_time: str | None = None,
                  column_list: list[str] | None = None, except_column_list: list[str] | None = None,
                  stored_as_scd_type: int = 1, track_history_column_list: list[str] | None = None,
                  track_history_except_column_list: list[str] | None = None, ignore_null_updates: bool = False,
                  ignore_null_updates_column_list: list[str] | None = None,
                  delete_mode: Literal["soft", "hard"] = "soft", layout: Literal["merge", "pending"] = "merge",
                  config: PipelineConfig | None = None, commit_metadata: dict[str, str] | None = None,
                  keys_once: bool = False) -> Applied:
    """Apply `source` (one row per change) to `target` and return what was applied.

    `target`: `catalog.namespace.table` (Iceberg) or the path of a Delta table; created on first use.
    `keys`, `sequence_by` (a number, a timestamp, or the changelog's `_seq`), `apply_as_deletes` (a SQL
    condition), `column_list` / `except_column_list`, `stored_as_scd_type`, `track_history_column_list` /
    `track_history_except_column_list`, `ignore_null_updates` / `ignore_null_updates_column_list`: as in AUTO
    CDC. `source_time`: the column with each change's source commit time (SCD2 dates versions by it; default
    `_source_ts`, else `sequence_by` when it is a timestamp). `delete_mode`: `soft` keeps a deleted row
    (`_is_deleted`), `hard` removes it (SCD1 only). `layout`: `pending` (Iceberg) appends the changes for
    the mirror's views to overlay (`tables/pending.py`). `config`: the pipeline's configuration (the CLI's);
    `commit_metadata` lands in the same commit (the mirror's watermark). `keys_once`: `source` has one change a
    key, knowing every column (an initial load landed once): a new current-state Iceberg mirror takes them as
    they are, without ordering each key's changes (a key given twice would then be written twice).
    """
    where = _target(target)
    name = where.name
    check_columns(name, source.columns, keys, sequence_by)
    tracked, untracked = track_history_column_list, track_history_except_column_list
    if sequence_by != CANONICAL_SEQUENCE and not tracked:  # it changes with every change: no reason for a version
        untracked = [*(untracked or []), sequence_by]
    cfg = _config(config, where, keys, stored_as_scd_type, tracked, untracked, delete_mode, layout)
    changes = _canonical(name, source, keys, sequence_by, apply_as_deletes, source_time, column_list,
                         except_column_list, ignore_null_updates, ignore_null_updates_column_list)
    return _apply(cfg, spark, name, changes, keys, sequence_by, commit_metadata or {}, keys_once)


@dataclass(frozen=True)
class _Target:
    """Where `apply_changes` writes: an Iceberg table of a catalog, or a Delta table `<root>/<namespace>/<name>`
    (its name is the last folder whole, dots and all)."""

    lake: LakeSettings
    namespace: str
    name: str
    catalog: str | None = None  # Iceberg's; None for a Delta path


def _target(target: str) -> _Target:
    if target.startswith("delta.`") and target.endswith("`"):
        target = target[len("delta.`"):-1]
    if "/" in target:
        root, namespace, name = target.rstrip("/").rsplit("/", 2)
        return _Target(LakeSettings(format="delta", delta_root=root), namespace, name)
    parts = [p.strip("`") for p in target.split(".")]
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"target {target!r}: name an Iceberg table as catalog.namespace.table, or a Delta table by "
                         "its path (/data/lake/mirror/orders, s3://bucket/lake/mirror/orders)")
    return _Target(LakeSettings(format="iceberg"), parts[1], parts[2], parts[0])


def _config(config: PipelineConfig | None, where: _Target, keys: list[str], scd_type: int,
            tracked: list[str] | None, untracked: list[str] | None, delete_mode: str, layout: str) -> PipelineConfig:
    """The configuration the stage's code reads, for one table: `config`'s (the CLI's), else the defaults,
    with the target's catalog, namespace and format and the call's CDC rules, validated as settings are."""
    cfg = config or PipelineConfig()
    name, namespace, lake = where.name, where.namespace, where.lake
    mirror = cfg.mirror.model_dump()
    if namespace != cfg.mirror.namespace:
        mirror.update(namespace=namespace, pending_namespace=f"{namespace}_pending")
    listed = {"track_history_columns": tracked, "track_history_except_columns": untracked}
    mirror.update(keys={**mirror["keys"], name: ",".join(keys)}, scd_type={**mirror["scd_type"], name: scd_type},
                  delete_mode=delete_mode, layout=layout,
                  **{setting: {**{t: v for t, v in mirror[setting].items() if t != name},
                               **({name: ",".join(columns)} if columns else {})} for setting, columns in listed.items()})
    lake_settings = cfg.lake.model_copy(update={"format": lake.format})
    if lake.format == "delta":
        lake_settings = lake_settings.model_copy(update={"delta_root": lake.delta_root})
    catalog = cfg.catalog.model_copy(update={"name": where.catalog}) if where.catalog else cfg.catalog
    return cfg.model_copy(update={"mirror": MirrorSettings.model_validate(mirror), "lake": lake_settings,
                                  "catalog": catalog})


def _canonical(name: str, source: DataFrame, keys: list[str], sequence_by: str, apply_as_deletes: str | None,
               source_time: str | None, column_list: list[str] | None, except_column_list: list[str] | None,
               ignore_null_updates: bool, ignore_columns: list[str] | None) -> DataFrame:
    """The changes with the changelog's columns: `_seq` (from `sequence_by`), `_is_deleted`, `_op`,
    `_source_ts` and `_unchanged` (a null in an ignore-null-updates column keeps the row's value). One
    projection, as SQL text (`tables/names.py`)."""
    from pyspark.sql.types import DateType, NumericType, StructType, TimestampNTZType, TimestampType

    types = {f.name: f.dataType for f in source.schema.fields}
    kind, by = types[sequence_by], quote(sequence_by)
    times = (TimestampType, TimestampNTZType, DateType)
    if isinstance(kind, StructType) and sequence_by == CANONICAL_SEQUENCE:
        seq = by
    elif isinstance(kind, (NumericType, *times)):
        major = f"unix_micros(CAST({by} AS TIMESTAMP))" if isinstance(kind, times) else by
        seq = (f"named_struct('source_major', CAST({major} AS BIGINT), 'source_minor', CAST(0 AS BIGINT), "
               "'transport_partition', 0, 'transport_offset', CAST(0 AS BIGINT))")
    else:
        raise ChangeError(f"{name}: sequence_by column {sequence_by} is {kind.simpleString()}; use a number or a "
                          "timestamp that orders each key's changes")
    data = [c for c in source_columns(list(types)) if c not in keys and c != sequence_by]
    kept = [c for c in data if (column_list is None or c in column_list) and c not in (except_column_list or [])]
    deleted = (f"coalesce(({apply_as_deletes}), false)" if apply_as_deletes
               else "coalesce(_is_deleted, false)" if "_is_deleted" in types else "false")
    if source_time:
        time = f"CAST({quote(source_time)} AS TIMESTAMP)"
    elif "_source_ts" in types:
        time = "_source_ts"
    else:
        time = f"CAST({by} AS TIMESTAMP)" if isinstance(kind, times) else "CAST(NULL AS TIMESTAMP)"
    ignored = kept if ignore_null_updates else [c for c in kept if c in (ignore_columns or [])]
    none = "CAST(array() AS ARRAY<STRING>)"
    unchanged = UNCHANGED if UNCHANGED in types else none
    if ignored:
        nulls = ", ".join(f"CASE WHEN {quote(c)} IS NULL THEN {sql_string(c)} END" for c in ignored)
        unchanged = (f"CASE WHEN {deleted} THEN {unchanged} "
                     f"ELSE array_union(coalesce({unchanged}, {none}), array_compact(array({nulls}))) END")
    canonical = {"_op": "_op" if "_op" in types else f"CASE WHEN {deleted} THEN 'd' ELSE 'u' END",
                 "_is_deleted": deleted, "_source_ts": time, "_seq": seq, UNCHANGED: unchanged}
    wanted = {*keys, *kept, sequence_by} - {CANONICAL_SEQUENCE}
    # The source's column order, the canonical columns where the source has them, else at the end; each canonical
    # column computed from the source's columns as they are.
    columns = [*[c for c in types if c in wanted or is_pipeline_column(c)], *[c for c in canonical if c not in types]]
    return source.selectExpr(*[f"{canonical[c]} AS {quote(c)}" if c in canonical else quote(c) for c in columns])


def _apply(cfg: PipelineConfig, spark: SparkSession, name: str, changes: DataFrame, keys: list[str],
           sequence_by: str, metadata: dict[str, str], keys_once: bool = False) -> Applied:
    """Check canonical `changes` and write them to mirror `name` of `cfg` as its layout and SCD type say
    (`keys_once` as `apply_changes` takes it)."""
    from pyspark.sql import functions as F

    settings, history = cfg.mirror, cfg.mirror.scd_type_of(name) == 2
    target, pending = lake_table(cfg, spark, settings.namespace, name), pending_table(cfg, spark, name)
    appends = settings.layout == "pending" and cfg.lake.format == "iceberg"
    building = not target.exists()
    fields = [] if building else target.fields()  # read once: each read is a catalog load and a schema over py4j
    if not building and is_history(f.name for f in fields) != history:
        raise ChangeError(f"{name}: {target.ref} is SCD type {1 if history else 2}, mirror.scd_type.{name} says "
                          f"{2 if history else 1}: drop it (and its pending table) and run again to rebuild it")
    if pending is not None and not appends:
        fold(cfg, spark, name, full=True)  # back to the merge layout: every pending change goes in first
        spark.sql(f"DROP TABLE {pending.ref}")
        pending = None
    if isinstance(target, IcebergLakeTable) and not history and (building or is_first_build(target, pending)):
        read, written = first_build(cfg, spark, target, changes, keys, sequence_by, metadata, keys_once)
        return Applied(read, written, True)
    if isinstance(target, IcebergLakeTable) and history and building:
        made = first_history_build(cfg, spark, target, changes, keys, sequence_by, metadata)
        if made is not None:  # else it holds a truncate: the path below makes its deletes
            return Applied(*made, True)
    # One pass over the new rows, materialised once for the checks, the count and the write (a lost executor
    # fails the run, and a re-run is safe).
    rows = prepared(changes).localCheckpoint()
    totals = check_changes(name, rows, keys, sequence_by, history)
    # the mirror's key types, to catch a key whose type changed at the source
    held = {f.name: f.dataType.simpleString() for f in fields if f.name in keys}
    widen = check_key_types(name, held, {k: t for k, t in rows.dtypes if k in keys})
    if totals.truncates and history:  # a truncate deletes each key live before it, one delete per key
        rows = truncates_as_deletes(rows, keys, None if building else mirror_state(cfg, spark, name)).localCheckpoint()
    elif totals.truncates:  # a truncate reads the mirror's live rows: it deletes those older than it
        mirror = mirror_state(cfg, spark, name) if not building else None
        deleted = truncated(latest_per_key(rows, keys), keys, mirror, truncates(rows, keys))
        # The pending layout keeps every change and adds the truncates' deletes: a change before a truncate still
        # gives the deleted row its values, as in a first build of the same changes (`tables/first_build.py`).
        rows = (rows.where(~is_truncate(keys)).unionByName(deleted.where(F.col("_op") == TRUNCATE)) if appends
                else deleted).localCheckpoint()
    reshaped = False
    if totals.changes:
        for table in (target, pending) if pending is not None else (target,):
            table.widen_columns(widen)
        reshaped = _shape(cfg, target, None if building else {f.name for f in fields}, pending, rows, name,
                          appends or history)
        if pending is None and appends:
            pending, reshaped = create_pending(cfg, spark, target, rows), True
        if pending is not None and building:  # an SCD2 first build with a truncate (else `first_history_build`)
            append_versions(cfg, spark, target, with_unchanged(rows), metadata)
        elif pending is not None:  # every change, not one per key: the overlay orders them as the source did
            append_pending(pending, rows, metadata)
        elif history:
            fields = [f for f in target.fields() if f.name not in VERSION_COLUMNS]
            write_versions(cfg, spark, target, aligned(rows, fields).localCheckpoint(), metadata)
        else:
            reduced = rows if totals.truncates else latest_per_key(rows, keys).localCheckpoint()
            with session_conf(spark, merge_join_conf(cfg, name, keys)):
                target.merge(reduced, merge_clauses(reduced.columns, keys, settings.delete_mode), metadata)
    return Applied(totals.changes, totals.keys, reshaped)


@dataclass(frozen=True)
class PendingAppend:
    """One mirror's changes, ready for `apply_pending_together`: its changelog rows (`rows`, planned) and what the
    task that reads them makes of them for `table` (the Iceberg Java table): `mirror`, a py4j
    `cdc.spark.MirrorRows`, which checks them and gives either the changes, for the pending table, or a new
    mirror's first build (`created`: its views are then made, and the commit is guarded against another run's
    first build), for its base. Its `keys`, and the commit's `metadata`."""

    name: str
    rows: DataFrame
    table: Any  # a py4j org.apache.iceberg.Table
    mirror: Any  # a py4j cdc.spark.MirrorRows
    keys: list[str]
    metadata: dict[str, str]
    created: bool


def pending_append(cfg: PipelineConfig, spark: SparkSession, name: str, source: DataFrame, keys: list[str],
                   metadata: dict[str, str], *, appending: bool, rows: int | None) -> PendingAppend | None:
    """Changelog rows `source` of mirror `name` (`rows` of them, when known) planned as `apply_changes` applies them
    in the pending layout with the mirror stage's arguments (`_seq`, `_is_deleted`, the changelog's columns),
    without a job and without a Spark plan beyond `source`'s: the rows the task writes are made by
    `cdc.spark.MirrorRows`, from `prepared`'s and `cdc/build.py`'s rules.
    - `appending`: the caller knows the mirror is built and has its pending table (its watermark is there): the
      changes are appended to the pending table, whose schema is all that is looked up.
    - Else a new unpartitioned mirror (none yet, or one with no rows and no pending changes) is created empty,
      with its pending table, and its first build is what is written, to its base.
    None when the mirror needs more, which `apply_changes` then does alone: more than `mirror.pending_build_rows`
    rows (or a number unknown), not the pending layout, SCD2, another kind of mirror, or changes that lack a key
    column, add columns, or change a column's type."""
    from pyspark.sql.types import StructType

    settings = cfg.mirror
    if cfg.lake.format != "iceberg" or settings.layout != "pending" or settings.scd_type_of(name) == 2:
        return None
    if rows is None or rows > settings.pending_build_rows:
        return None
    if any(k not in source.columns for k in (*keys, CANONICAL_SEQUENCE)):
        return None
    base = lake_table(cfg, spark, settings.namespace, name)
    if not appending:
        if settings.partition_fields(name):
            return None
        pending = pending_table(cfg, spark, name)
        assert isinstance(base, IcebergLakeTable)
        exists = base.exists()
        if exists and (pending is None or not is_first_build(base, pending)):
            return None  # built already (its watermark lost), or of the merge layout: alone (`_apply`)
    made = java_class(spark, "cdc.spark.MirrorRows")
    prepared = made.prepared(source._jdf.schema(), list(CHANGELOG_ONLY))
    changes = StructType.fromJson(json.loads(prepared.json()))
    if appending:
        table = iceberg_table(spark, quote(cfg.catalog.name, settings.pending_namespace, name))
    else:
        like = empty_frame(spark, prepared)
        if not exists:
            _shape(cfg, base, None, None, like, name, unchanged=True)
        if pending is None:
            create_pending(cfg, spark, base, like)
        table = iceberg_table(spark, base.ref)
    if not fits(changes, spark_schema(spark, table)):
        return None
    mirror = made(source._jdf.schema(), table, keys, not appending, settings.delete_mode == "hard",
                  list(CHANGELOG_ONLY), list(TOMBSTONE), time.time_ns() // 1000)
    return PendingAppend(name, planned(source), table, mirror, keys, metadata, created=not appending)


def apply_pending_together(spark: SparkSession, appends: list[PendingAppend], threads: int = 4
                           ) -> list[Applied | None]:
    """What `apply_changes` does to each of `appends`' mirrors, in one Spark job in all instead of two or three a
    table: each table's rows read, checked and made by one task (`MirrorRows`) and written
    (`tables/append.py`, `append_together`), then each table committed with its metadata. Each table's
    `Applied`, or None for what `apply_changes` must apply alone, where the check that fails names the
    problem: changes that fail a check (nothing of them is written), changes with a truncate, which reads the
    mirror's rows, and a first build another run committed first."""
    if not appends:
        return []
    written = append_together(spark, [part.rows for part in appends], [part.table for part in appends],
                              [part.metadata for part in appends], threads,
                              guarded=[part.created for part in appends], mirrors=[part.mirror for part in appends])
    results: list[Applied | None] = []
    for part, rows in zip(appends, written, strict=True):
        outcome = part.mirror.outcome()
        results.append(None if rows < 0 else Applied(outcome.changes(), outcome.keys(), reshaped=part.created))
    return results


def _shape(cfg: PipelineConfig, target: LakeTable, present: set[str] | None, pending: LakeTable | None,
           changes: DataFrame, name: str, unchanged: bool) -> bool:
    """Create the mirror on first sight (`present`, its columns, None), and add the columns the source gained since
    the last run (to the pending table too); True when the table's shape changed (so its views must be replaced).
    A base of the pending layout, and an SCD2 table, keep `_unchanged`; an SCD2 table has its version columns."""
    changes = with_unchanged(changes) if unchanged else changes.drop(UNCHANGED)
    if present is None:
        like = with_versions(changes) if cfg.mirror.scd_type_of(name) == 2 else changes
        target.create(like, cfg.mirror.partition_fields(name), cfg.mirror.write_mode)
        return True
    new = [f for f in changes.schema.fields if f.name not in present]
    if new:
        for table in (target, pending) if pending is not None else (target,):
            table.add_columns(new)
        log.info("mirror.columns_added", table=target.ref, columns=[f.name for f in new])
    return bool(new)

