"""The pending layout of an Iceberg mirror: a base table, folded now and then, and the changes merged since.

A MERGE into a mirror reads the mirror to find the rows its changes replace, so its cost grows with the
table: with keys spread at random, a few changes touch every file. In this layout a mirror run reads none of
the mirror: it appends its changes (every one, not one per key) to `<mirror.pending_namespace>.<table>`
(cost: the changes), with the watermark in the same commit. The current state is the overlay of the two
(`cdc.merge.overlay_sql`), which the mirror's views and every reader of `mirror_state` see; `fold` (run by
`pipeline maintain`) writes the overlay of the pending keys into the base and removes them from pending, so the
overlay stays small. A table is in this layout when its pending table exists. Its base has one more column,
`_unchanged`: the columns whose value no change has carried yet (TOAST placeholders, a delete of a key never
seen), so a late change can still supply them. The design and its measurements: docs/mirror.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from cdc.merge import (BASE_SEQ, LEAST_KNOWN, UNCHANGED, Relations, fold_clauses, key_fold_clauses, key_foldable,
                       least_known, overlay_sql, pending_resolved_sql)
from pipeline.config.settings import PipelineConfig
from tables.history import history_state, overlaid_history, write_versions
from tables.lake import (IcebergLakeTable, LakeTable, lake_table, merge_join_conf, session_conf,
                         snapshot_properties)
from tables.names import quote, sql_string

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField

log = structlog.get_logger(__name__)

WATERMARK = "pipeline.mirror.changelog-commit"  # commit metadata: the changelog commit a mirror merged through
# The fold's MERGE writes position deletes and the new rows, not every file a pending change touches: with keys
# spread at random that was the whole base each fold. An SCD2 fold's MERGE then reads only its keys and
# `_seq_from` (every value comes from the rebuilt versions). `pipeline maintain` compacts right after (docs/mirror.md).
FOLD_MERGE = {"write.merge.mode": "merge-on-read"}


def pending_table(cfg: PipelineConfig, spark: SparkSession, name: str) -> IcebergLakeTable | None:
    """The pending table of mirror `name`, when the mirror is in the pending layout (Iceberg only)."""
    if cfg.lake.format != "iceberg":
        return None
    table = IcebergLakeTable(spark, name, cfg.mirror.pending_namespace, cfg)
    return table if table.exists() else None


def pending_columns(cfg: PipelineConfig, spark: SparkSession, name: str) -> list[str] | None:
    """The columns of mirror `name` when it is in the pending layout (what its overlay lists), else None."""
    if pending_table(cfg, spark, name) is None:
        return None
    return state_columns(lake_table(cfg, spark, cfg.mirror.namespace, name))


def overlay_keys(cfg: PipelineConfig, name: str) -> list[str]:
    """The key columns the overlay of mirror `name` matches rows by; an error naming the setting when unset."""
    keys = cfg.mirror.key_columns(name)
    if not keys:
        raise ValueError(f"mirror {name} is in the pending layout and its state is resolved by key: set "
                         f"mirror.keys.{name} = '<column>[,<column>…]'")
    return keys


def state_columns(base: LakeTable) -> list[str]:
    """The columns of a mirror's state: the base's, without `_unchanged` (what the overlay resolves)."""
    return [f.name for f in base.fields() if f.name != UNCHANGED]


def create_pending(cfg: PipelineConfig, spark: SparkSession, base: LakeTable, like: DataFrame) -> IcebergLakeTable:
    """An empty pending table with the base's columns and `_unchanged` (and its namespace, when missing).
    Unpartitioned: an append writes one file per task instead of shuffling the changes into the base's partitions,
    and a lookup reads a few small files."""
    table = IcebergLakeTable(spark, base.name, cfg.mirror.pending_namespace, cfg)
    table.create(with_unchanged(like), [], "copy-on-write")
    return table


def with_unchanged(changes: DataFrame) -> DataFrame:
    """`changes` with an `_unchanged` column (null: every column carried), as the pending table has it."""
    from pyspark.sql import functions as F

    return changes if UNCHANGED in changes.columns else changes.withColumn(UNCHANGED, F.lit(None).cast("array<string>"))


def append_pending(pending: IcebergLakeTable, changes: DataFrame, metadata: dict[str, str]) -> None:
    """Append changes to a pending table (`aligned` to its columns), with `metadata` in the same commit."""
    with session_conf(pending.spark, snapshot_properties(metadata)):
        aligned(changes, pending.fields()).writeTo(pending.ref).append()


def aligned(changes: DataFrame, fields: list[StructField]) -> DataFrame:
    """`changes` with exactly the columns `fields` name: one they lack (the source no longer sends it) is null
    and listed in `_unchanged`, so the row keeps its last value."""
    from pyspark.sql import functions as F

    changes = with_unchanged(changes)
    present = set(changes.columns)
    missing = [f for f in fields if f.name not in present]
    if missing:
        known = F.coalesce(F.col(UNCHANGED), F.array().cast("array<string>"))
        listed = F.array_union(known, F.array(*[F.lit(f.name) for f in missing]))
        changes = changes.withColumns({UNCHANGED: listed, **{f.name: F.lit(None).cast(f.dataType) for f in missing}})
    return changes.selectExpr(*[quote(f.name) for f in fields])


def overlay_refs(base: LakeTable, pending: LakeTable) -> Relations:
    """The relations `overlay_sql` reads."""
    return Relations(base.ref, pending.ref)


def mirror_state(cfg: PipelineConfig, spark: SparkSession, name: str) -> DataFrame:
    """The current state of mirror `name`, soft-deleted rows included, whatever its layout; of an SCD2 mirror,
    every version (`tables/history.py`)."""
    base = lake_table(cfg, spark, cfg.mirror.namespace, name)
    pending = pending_table(cfg, spark, name)
    if cfg.mirror.scd_type_of(name) == 2:  # every version of every key
        return history_state(cfg, spark, base, pending.ref if pending is not None else None)
    if pending is None:
        return base.read()
    if pending.is_empty():  # nothing pending (a first build, a fold): the base is the state, no overlay to plan
        return base.read().drop(UNCHANGED)
    return spark.sql(overlay_sql(state_columns(base), overlay_keys(cfg, name), cfg.mirror.delete_mode,
                                 overlay_refs(base, pending)))


def state_as_of_commit(cfg: PipelineConfig, spark: SparkSession, name: str, as_of: str) -> DataFrame:
    """The state of mirror `name` at a lake commit: a snapshot id of its base or pending table, or a
    timestamp. Both tables are read as of that time (the commit's time for an id), so the overlay is the
    one readers saw then."""
    base, pending = lake_table(cfg, spark, cfg.mirror.namespace, name), pending_table(cfg, spark, name)
    assert isinstance(base, IcebergLakeTable) and pending is not None
    moment = as_of
    if as_of.isdigit():
        found = base.commit_time(int(as_of)) or pending.commit_time(int(as_of))
        if found is None:
            raise ValueError(f"no commit {as_of} in {base.ref} or {pending.ref}: use one of their snapshot ids "
                             "(`SELECT * FROM <table>.snapshots`) or a timestamp")
        moment = found
    pinned = f"TIMESTAMP AS OF {sql_string(moment)}"
    if not pending.has_commit_by(moment):  # the mirror took this layout later: its base alone was the state
        return base.read(moment).drop(UNCHANGED)
    refs = Relations(f"{base.ref} {pinned}", f"{pending.ref} {pinned}")
    if cfg.mirror.scd_type_of(name) == 2:
        return overlaid_history(cfg, spark, base, refs)
    return spark.sql(overlay_sql(state_columns(base), overlay_keys(cfg, name), cfg.mirror.delete_mode, refs))


def fold(cfg: PipelineConfig, spark: SparkSession, name: str, full: bool = False) -> int:
    """Write the pending changes of mirror `name` into its base and remove them from pending; the number of keys
    folded. A key whose row needs its base row's values (`cdc.merge.key_foldable`: a soft delete, a TOAST
    placeholder) stays pending, so that the MERGE reads of the base only its keys; unless `full`, or such keys are
    more than half of those pending: then every key is folded, reading the base's values (docs/mirror.md).
    Safe to repeat and to crash in: a change left in pending after its fold resolves to the same row."""
    from pyspark.sql import functions as F

    base, pending = lake_table(cfg, spark, cfg.mirror.namespace, name), pending_table(cfg, spark, name)
    if pending is None:
        return 0
    # Read before the commit it is carried past: a change appended in between is folded by the next fold.
    merged = pending.commit_metadata(WATERMARK)
    through = pending.commit_id()
    if through is None:
        return 0
    keys, columns = overlay_keys(cfg, name), state_columns(base)
    changes = f"{pending.ref} VERSION AS OF {through}"  # the pending changes as of the commit folded
    if any(base.properties().get(key) != value for key, value in FOLD_MERGE.items()):
        base.set_properties(FOLD_MERGE)  # a base made before the fold merged on read
    watermark = {WATERMARK: merged[1]} if merged else {}
    if cfg.mirror.scd_type_of(name) == 2:
        count = write_versions(cfg, spark, base, changes, watermark)
        pending.remove_files_of(through)
        log.info("mirror.folded", table=base.ref, versions=count, pending_commit=through)
        return count
    # The changes resolved among themselves; the MERGE finishes the rule against the base rows.
    resolved = spark.sql(pending_resolved_sql(columns, keys, changes)).localCheckpoint()
    total = resolved.count()
    kept = None if full else _kept_keys(cfg, spark, name, base, resolved, keys, columns)
    staying = 0 if kept is None else kept.count()
    if staying * 2 > total:  # a fold by key would keep most keys: fold them all
        kept, staying = None, 0
    folded = resolved.join(F.broadcast(kept), keys, "left_anti").localCheckpoint() if staying else resolved
    count = folded.count() if staying else total
    if count:
        # The base carries the watermark too, for the day the pending table goes (`mirror.layout = merge`).
        clauses = (fold_clauses if kept is None else key_fold_clauses)([*columns, UNCHANGED], keys,
                                                                       cfg.mirror.delete_mode)
        with session_conf(spark, merge_join_conf(cfg, name, keys)):
            base.merge(folded, clauses, watermark)
    if staying:  # appended before the folded files go: a crash in between leaves both, which resolve alike
        append_pending(pending, spark.sql(f"SELECT * FROM {changes}").join(F.broadcast(kept), keys, "left_semi"), {})
    if count or staying:
        pending.remove_files_of(through)
    log.info("mirror.folded", table=base.ref, keys=count, kept=staying, pending_commit=through)
    return count


def _kept_keys(cfg: PipelineConfig, spark: SparkSession, name: str, base: LakeTable, resolved: DataFrame,
               keys: list[str], columns: list[str]) -> DataFrame:
    """The `keys` of `resolved` (materialised) whose rows need their base rows' values (not `key_foldable`), found
    by one read of the base's keys and `_seq`; materialised. `columns`: the base's state columns."""
    from pyspark.sql import functions as F

    on_base = base.read().select(*[F.col(quote(k)) for k in keys], F.col("_seq").alias(BASE_SEQ))
    pending = resolved.select(*[F.col(quote(k)) for k in keys], "_seq", "_is_deleted",
                              F.expr(least_known(columns, keys)).alias(LEAST_KNOWN))
    with session_conf(spark, merge_join_conf(cfg, name, keys)):  # a plan of one join, its source materialised
        return (on_base.join(pending, keys).where(~F.expr(key_foldable(cfg.mirror.delete_mode)))
                .select(*[F.col(quote(k)) for k in keys]).localCheckpoint())
