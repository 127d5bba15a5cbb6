"""The first build of an Iceberg mirror (the table does not exist yet; a current-state one also when empty): its
changes resolved (`cdc/build.py`), or an SCD2 mirror's made versions (`cdc/scd2.py` `versions_of`), in one pass
and written as they come out, in one commit with the watermark.

Why not the incremental path: a first build reads a whole table's changelog, and the incremental path's
materialisation, the check aggregation, reduce and shuffle into the buckets are each a pass over all of it
(docs/mirror.md, "The first build"). Here the only shuffle is the one that brings each key's changes together, by
the mirror's key buckets when it is bucketed by key, so the write needs none. Then the mirror continues
incrementally from the watermark, as after any run; in the pending layout its (empty) pending table is created
after the base. A backfill's snapshot landed in one pass has each key once (`keys_once`): its rows are written as
they are read, with no shuffle by key at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc.build import CHECK_FAILED, as_stored, built, check_failed, in_buckets
from cdc.merge import UNCHANGED, prepared, truncated, truncates
from cdc.scd2 import FROM_BASE, versions_of
from cdc.validate import check_changes
from pipeline.config.settings import PipelineConfig
from tables.history import tracked_columns, with_versions
from tables.lake import IcebergLakeTable
from tables.names import column, quote
from tables.partitioning import PartitionField
from tables.pending import aligned, create_pending, pending_table, with_unchanged

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def is_first_build(target: IcebergLakeTable, pending: IcebergLakeTable | None) -> bool:
    """The mirror (`target`, with its `pending` table when it has one) has no rows and no pending changes: its
    state is empty, so its changes alone make it. A metadata load or two, no scan."""
    return target.is_empty() and (pending is None or pending.is_empty())


def first_build(cfg: PipelineConfig, spark: SparkSession, target: IcebergLakeTable, changes: DataFrame,
                keys: list[str], sequence_by: str, metadata: dict[str, str], keys_once: bool = False) -> tuple[int, int]:
    """Build mirror `target` from canonical `changes` with `metadata` (its watermark) in the same commit; the
    changes read and the keys written. A change that fails a check stops it with `check_changes`' message, and
    nothing is committed. `keys_once`: the caller knows each key has one change, knowing every column (a
    backfill's snapshot landed in one pass, `tables/backfill_state.py`): that change is the key's row, written as
    it is read, without the shuffle by key, the sort and the pass."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    name, settings = target.name, cfg.mirror
    pending_layout = settings.layout == "pending"
    written = Observation(f"written_{name}")
    buckets = _key_buckets(cfg, name, keys)
    spread = _spread(cfg, buckets)
    if keys_once:
        rows, made = in_buckets(as_stored(changes), spread=spread, spread_values=_spread_values(buckets)), None
    else:
        made = built(changes, keys, deletes_know_values=not pending_layout, spread=spread,
                     spread_values=_spread_values(buckets))
        rows = made.rows
        at = truncates(changes, keys)
        if at.first()["_truncates"]:  # one job; with no truncate, the scan's statistics leave it no file to read
            rows = truncated(rows, keys, None, at.localCheckpoint())
    rows = rows.observe(written, F.count(F.lit(1)).alias("rows"))  # keys, the truncate's row left out
    if settings.delete_mode == "hard":
        rows = rows.where("NOT _is_deleted")
    if not pending_layout:
        rows = rows.drop(UNCHANGED)
    if target.exists():  # empty: it takes the columns the source gained, and the rows take its order
        present = {f.name for f in target.fields()}
        gained = [f for f in rows.schema.fields if f.name not in present]
        if gained:
            target.add_columns(gained)
        rows = aligned(rows, target.fields()) if pending_layout else rows.select(*[f.name for f in target.fields()])
    _build(cfg, target, rows, spread, metadata, changes, keys, sequence_by, history=False)
    if pending_layout and pending_table(cfg, spark, name) is None:
        create_pending(cfg, spark, target, target.read())
    keys_written = int(written.get["rows"])
    return (made.changes_read() if made is not None else keys_written), keys_written


def first_history_build(cfg: PipelineConfig, spark: SparkSession, target: IcebergLakeTable, changes: DataFrame,
                        keys: list[str], sequence_by: str, metadata: dict[str, str]) -> tuple[int, int] | None:
    """Build SCD2 mirror `target` (not there yet) from canonical `changes` with `metadata` in the same commit: each
    key's versions made in one pass over its changes (jvm/cdc `Versions`, which checks them as `FirstBuild` does),
    shuffled by the key buckets and written as they come out; the changes read and the keys written. None, and
    nothing done, when the changes hold a truncate: the incremental path turns it into the deletes of the keys
    live before it (`cdc.scd2.truncates_as_deletes`). Why: that path materialises the changes, checks them in an
    aggregation and shuffles the versions twice: 109 s for a 10M-row SCD2 mirror, against 36 s here
    (docs/benchmarks.md)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if truncates(changes, keys).first()["_truncates"]:
        return None
    name, settings = target.name, cfg.mirror
    rows = with_unchanged(prepared(changes))
    columns = [c for c in rows.columns if c != UNCHANGED]
    written = Observation(f"written_{name}")
    buckets = _key_buckets(cfg, name, keys)
    spread = _spread(cfg, buckets)
    made = versions_of(rows.withColumn(FROM_BASE, F.lit(0)), keys, tracked_columns(cfg, name, columns),
                       failure=CHECK_FAILED, spread=spread, spread_values=_spread_values(buckets))
    versions = made.rows.select(*[column(c) for c in with_versions(rows).columns])
    versions = versions.observe(written, F.count_if(F.col("_is_current")).alias("keys"))
    _build(cfg, target, versions, spread, metadata, changes, keys, sequence_by, history=True)
    if settings.layout == "pending" and pending_table(cfg, spark, name) is None:
        create_pending(cfg, spark, target, rows)
    return made.changes_read(), int(written.get["keys"])


def _build(cfg: PipelineConfig, target: IcebergLakeTable, rows: DataFrame, spread: list[Column],
           metadata: dict[str, str], changes: DataFrame, keys: list[str], sequence_by: str, *, history: bool) -> None:
    """Write a pass's `rows` as `target`'s first data, with `metadata`, in one commit. A change that failed the
    pass's checks failed the write: `check_changes` over `changes` then raises the `ChangeError` naming it."""
    partitions = cfg.mirror.partition_fields(target.name)
    try:
        target.build(rows, partitions, cfg.mirror.write_mode, metadata, spread=len(spread) == len(partitions))
    except Exception as exc:  # noqa: BLE001 - a failed check is told by its message, then explained
        if check_failed(exc):
            check_changes(target.name, prepared(changes), keys, sequence_by, history)
        raise


def _key_buckets(cfg: PipelineConfig, name: str, keys: list[str]) -> list[PartitionField]:
    """The mirror's partition fields that bucket a key column: what the changes can be shuffled by."""
    return [field for field in cfg.mirror.partition_fields(name) if field.transform == "bucket" and field.column in keys]


def _spread_values(buckets: list[PartitionField]) -> int:
    """How many values `_spread`'s one column takes (its buckets), for one task each; 0 for several columns."""
    return (buckets[0].buckets or 0) if len(buckets) == 1 else 0


def _spread(cfg: PipelineConfig, buckets: list[PartitionField]) -> list[Column]:
    """What to shuffle the changes by: the mirror's `buckets` of key columns (so a bucket is one task's and one
    file), else nothing (the window's shuffle by key)."""
    from pyspark.sql import functions as F

    bucket = f"{quote(cfg.catalog.name)}.system.bucket"  # Iceberg's own bucket function, as its writes use it
    return [F.call_function(bucket, F.lit(field.buckets), column(field.column)) for field in buckets]
