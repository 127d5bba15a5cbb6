"""SCD2 tables (`mirror.scd_type.<table> = 2`): every version of every key, in the mirror table itself.

The mirror itself holds the versions (not a second `<table>_history` table): one table per source table, as
AUTO CDC's target is, with the current state one filter away (`_is_current AND NOT _is_deleted`, the
`<table>_current` view), and no second copy of the state to keep in step with the first. The version rules
are `cdc/scd2.py`'s. Writing rebuilds the versions of the keys the changes name only
(`write_versions`): a MERGE that deletes those keys' stored versions (matched on the key alone) and inserts the
rebuilt ones, with the watermark in the same commit. In the pending layout a run appends its changes to the
pending table, as for a current-state mirror, and the versions are the overlay of the two (`history_sql`) until
`pipeline maintain` folds them in with `write_versions`.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from cdc.merge import UNCHANGED, Relations
from cdc.scd2 import (VERSION_COLUMNS, history_sql, replaced_sql, touched_sql, tracked, version_clauses,
                       version_rows_sql, versions_of)
from pipeline.config.settings import PipelineConfig
from tables.lake import IcebergLakeTable, LakeTable, lake_table, merge_join_conf, session_conf, snapshot_properties
from tables.names import column, quote

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def with_versions(changes: DataFrame) -> DataFrame:
    """`changes` shaped as an SCD2 table (`_unchanged` and the version columns, null), to create one from."""
    from pyspark.sql import functions as F

    seq = changes.schema["_seq"].dataType
    columns = {"_valid_from": "timestamp", "_valid_to": "timestamp", "_seq_from": seq, "_seq_to": seq,
               "_is_current": "boolean", UNCHANGED: "array<string>"}
    return changes.select(*[column(c) for c in changes.columns if c not in columns],
                          *[F.lit(None).cast(kind).alias(c) for c, kind in columns.items()])


def change_columns(base: LakeTable) -> list[str]:
    """An SCD2 table's columns that a change has too (without `_unchanged` and the version columns)."""
    return [f.name for f in base.fields() if f.name != UNCHANGED and f.name not in VERSION_COLUMNS]


def mirror_history_columns(cfg: PipelineConfig, spark: SparkSession, name: str) -> list[str] | None:
    """The change columns of mirror `name` when it is an SCD2 table (what its views list), else None."""
    base = lake_table(cfg, spark, cfg.mirror.namespace, name)
    return change_columns(base) if cfg.mirror.scd_type_of(name) == 2 and base.exists() else None


def tracked_columns(cfg: PipelineConfig, name: str, columns: list[str]) -> list[str]:
    return tracked(columns, cfg.mirror.key_columns(name), *cfg.mirror.history_columns(name))


def history_state(cfg: PipelineConfig, spark: SparkSession, base: LakeTable, pending_ref: str | None) -> DataFrame:
    """Every version of SCD2 table `base`, with the changes of `pending_ref` (its pending table) applied."""
    if pending_ref is None:
        return base.read().drop(UNCHANGED)
    return overlaid_history(cfg, spark, base, Relations(base.ref, pending_ref))


def overlaid_history(cfg: PipelineConfig, spark: SparkSession, base: LakeTable, refs: Relations) -> DataFrame:
    """`history_sql` of SCD2 table `base` over `refs` (its base and pending table, each maybe pinned)."""
    columns = change_columns(base)
    return spark.sql(history_sql(columns, cfg.mirror.key_columns(base.name), tracked_columns(cfg, base.name, columns),
                                 refs))


def write_versions(cfg: PipelineConfig, spark: SparkSession, base: LakeTable, changes: str | DataFrame,
                   metadata: dict[str, str]) -> int:
    """Rebuild the versions of the keys `changes` (a table identifier, or a DataFrame) names and MERGE them
    into `base`, with `metadata` in the same commit; the number of versions written. Only those keys' versions
    are read and rewritten. Safe to repeat: the same changes rebuild the same versions."""
    keys, columns = cfg.mirror.key_columns(base.name), change_columns(base)
    views = []

    def view(frame: DataFrame) -> str:
        views.append(f"versions_{base.name}_{uuid.uuid4().hex[:8]}")
        frame.createOrReplaceTempView(views[-1])
        return quote(views[-1])

    table = base.ref if isinstance(base, IcebergLakeTable) else view(base.read())  # a Delta table is a path
    pending = changes if isinstance(changes, str) else view(changes)
    # The changed keys' stored versions, read once: the rebuild and the keys whose versions it drops read them.
    stored = view(spark.sql(touched_sql(columns, keys, Relations(table, pending))).localCheckpoint())
    rows = spark.sql(version_rows_sql(columns, keys, Relations(stored, pending)))
    rebuilt = versions_of(rows, keys, tracked_columns(cfg, base.name, columns)).rows.localCheckpoint()
    merged = spark.sql(replaced_sql(columns, keys, stored, view(rebuilt)))
    merged = merged.localCheckpoint()  # Spark 4.1 plans no MERGE whose source reads the target's catalog
    count = rebuilt.count()
    if count:
        with session_conf(spark, merge_join_conf(cfg, base.name, keys)):  # the MERGE's one join (`merge_join_conf`)
            base.merge(merged, version_clauses([*columns, UNCHANGED, *VERSION_COLUMNS], keys), metadata)
    for name in views:
        spark.catalog.dropTempView(name)
    return count


def append_versions(cfg: PipelineConfig, spark: SparkSession, base: LakeTable, changes: DataFrame,
                    metadata: dict[str, str]) -> None:
    """The first build of SCD2 table `base` (empty, Iceberg) from `changes` holding a truncate (made deletes by
    `truncates_as_deletes`): their versions, appended in one commit. Without one, `first_history_build` builds it."""
    keys, columns = cfg.mirror.key_columns(base.name), change_columns(base)
    name = f"building_{base.name}_{uuid.uuid4().hex[:8]}"
    changes.createOrReplaceTempView(name)
    rows = spark.sql(version_rows_sql(columns, keys, Relations(base.ref, quote(name))))
    versions = versions_of(rows, keys, tracked_columns(cfg, base.name, columns)).rows
    with session_conf(spark, snapshot_properties(metadata)):
        versions.writeTo(base.ref).append()
    spark.catalog.dropTempView(name)

