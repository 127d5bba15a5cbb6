"""The first build of a current-state mirror in one pass over its changes.

An incremental run materialises its changes, checks them with two aggregations (`cdc/validate.py`), then
reduces them (`latest_per_key`, or the pending layout's `resolved_sql`, a GROUP BY of `max_by` per column) and
writes them: for a first build, which reads a whole table's changelog, that is four passes over every change and
three shuffles, five times a plain rebuild at 10M rows (docs/benchmarks.md). Here one shuffle brings each key's
changes together, one sort orders them by `_seq`, and one window pass checks them, resolves each column and keeps
the newest row per key, which is written as it comes out.

The rows are those of the incremental path, by the same rules: the newest change by `_seq` wins, and each data
column comes from the newest change that knows it (`resolved_sql`'s rule in the pending layout, where a soft
delete knows none; `latest_per_key`'s in the merge layout, where only a TOAST placeholder does not), the columns no
change knew listed in `_unchanged`; a truncate deletes the keys whose change is older (`truncated`).
The checks are those of `check_changes`, raised from the pass itself (`raise_error`), so a failing check fails
the write's job and nothing is committed; the caller then runs `check_changes` for its message and counts.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING

from cdc.columns import is_pipeline_column
from cdc.merge import TOMBSTONE, TRUNCATE, UNCHANGED, data_columns, prepared
from tables.names import column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CHECK_FAILED = "first build: a change failed a check"  # raise_error's message, told apart from other failures


def built(changes: DataFrame, keys: list[str], *, deletes_know_values: bool, spread: list[Column]) -> DataFrame:
    """One row per key of canonical `changes` (the truncates keep one row without a key: `truncated` applies
    them), resolved and checked in one window over the key's changes in `_seq` order. `deletes_know_values`: the
    merge layout's rule (a delete's own values stand); else the pending layout's (a soft delete keeps the last
    values). `spread`: what the changes are shuffled by, functions of the key (the mirror's key buckets, so each
    bucket's rows are written by one task); none: by the key.

    A window aggregate per column would cost a rebuild's time again, so the window keeps two: the newest change
    that knows every column (`_whole`), and the list of newer changes that know only some (TOAST placeholders;
    empty for almost every key). A column's value is the newest of those that knows it, else the key's newest
    change's own (`resolved_sql`'s rule); the list is searched only where it is not empty."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = prepared(changes)
    if UNCHANGED not in rows.columns:
        rows = rows.withColumn(UNCHANGED, F.lit(None).cast("array<string>"))
    # The window is partitioned by the spread too, so the shuffle that spreads the rows is the window's own.
    spreads = [f"_spread{i}" for i in range(len(spread))]
    shuffled = (rows.select("*", *[s.alias(n) for s, n in zip(spread, spreads)]).repartition(*spreads) if spread
                else rows)
    by_key = Window.partitionBy(*spreads, *[column(k) for k in keys]).orderBy(F.col("_seq").asc())
    so_far = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    data = data_columns(rows.columns, keys)
    carried = [c for c in rows.columns if c not in keys and c not in TOMBSTONE and c != UNCHANGED]
    knows_values = F.lit(True) if deletes_know_values else ~F.col("_is_deleted")
    placeholders = F.coalesce(F.array_size(UNCHANGED), F.lit(0)) > 0
    whole = F.last(F.when(knows_values & ~placeholders, F.struct("_seq", *map(column, carried))),
                   ignorenulls=True).over(so_far)
    # collect_list leaves out nulls, so the list holds the changes that know some columns and not others
    partial = F.collect_list(F.when(knows_values & placeholders, F.struct("_seq", UNCHANGED, *map(column, carried))
                                    )).over(so_far)
    content = F.hash(*[column(c) for c in rows.columns if not is_pipeline_column(c) or c in ("_op", "_is_deleted")])
    failed = (functools.reduce(operator.or_, [column(k).isNull() for k in keys]) & (F.col("_op") != TRUNCATE)
              | F.col("_seq.source_major").isNull()
              | ((F.lead("_seq").over(by_key) == F.col("_seq")) & (F.lead(content).over(by_key) != content)))
    newest = shuffled.select(
        *[column(c) for c in rows.columns if c != UNCHANGED], (knows_values & ~placeholders).alias("_complete"),
        whole.alias("_whole"), partial.alias("_partial"),
        F.lead(F.lit(1)).over(by_key).isNull().alias("_newest"),
        F.when(failed, F.raise_error(F.lit(CHECK_FAILED))).alias("_failed"))
    newest = newest.where(F.col("_failed").isNull()).where("_newest")

    def knowing(name: str) -> Column:  # the newer changes than `_whole` that know column `name`, oldest first
        return F.filter("_partial", lambda p: (F.col("_whole").isNull() | (p["_seq"] > F.col("_whole._seq")))
                        & ~F.coalesce(F.array_contains(p[UNCHANGED], name), F.lit(False)))

    # The newest change knows every column (almost every key): its own values, nothing to search.
    complete = F.col("_complete")

    def value(name: str) -> Column:
        settled = F.when(F.col("_whole").isNull(), column(name)).otherwise(F.col("_whole")[name])
        found = knowing(name)
        return (F.when(complete, column(name)).when(F.size("_partial") == 0, settled)
                .when(F.size(found) > 0, F.element_at(found, -1)[name]).otherwise(settled).alias(name))

    def unknown(name: str) -> Column:
        known = F.col("_whole").isNotNull() | ((F.size("_partial") > 0) & (F.size(knowing(name)) > 0))
        return F.when(~known, F.lit(name))

    none = F.array().cast("array<string>")
    listed = F.when(complete, none).otherwise(F.array_compact(F.array(*map(unknown, data)))) if data else none
    return newest.select(*[value(c) if c in carried else column(c) for c in rows.columns if c != UNCHANGED],
                         listed.alias(UNCHANGED))


def check_failed(error: Exception) -> bool:
    """`error` is a check of `built` failing (a Spark job aborted by its `raise_error`)."""
    return CHECK_FAILED in str(error)
