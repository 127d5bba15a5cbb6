"""The first build of a current-state mirror in one pass over its changes.

An incremental run materialises its changes, checks them with an aggregation by key (`cdc/validate.py`), then
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
A small new mirror built with others (`apply_pending_together`) is resolved by the same rules in plain JVM code
(jvm/cdc `MirrorRows`), since planning this window costs more than its rows; a test holds the two to the same rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc.columns import is_pipeline_column
from cdc.merge import TOMBSTONE, TRUNCATE, UNCHANGED, data_columns, prepared
from tables.names import quote, sql_string

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
    rows = prepared(changes)
    if UNCHANGED not in rows.columns:
        rows = rows.selectExpr("*", f"CAST(NULL AS array<string>) AS {UNCHANGED}")
    columns = [c for c in rows.columns if c != UNCHANGED]
    # The window is partitioned by the spread too, so the shuffle that spreads the rows is the window's own.
    spreads = [f"_spread{i}" for i in range(len(spread))]
    shuffled = (rows.select("*", *[s.alias(n) for s, n in zip(spread, spreads)]).repartition(*spreads) if spread
                else rows)
    # SQL text for every projection over the table's columns (`tables/names.py`)
    by_key = f"PARTITION BY {', '.join([*spreads, *map(quote, keys)])} ORDER BY _seq ASC"
    so_far = f"OVER ({by_key} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    data = data_columns(columns, keys)
    carried_columns = [c for c in columns if c not in keys and c not in TOMBSTONE]
    carried = ", ".join(map(quote, carried_columns))
    knows_values = "true" if deletes_know_values else "NOT _is_deleted"
    placeholders = f"coalesce(array_size({UNCHANGED}), 0) > 0"
    # collect_list leaves out nulls, so the list holds the changes that know some columns and not others
    whole = f"last(CASE WHEN {knows_values} AND NOT {placeholders} THEN struct(_seq, {carried}) END, true) {so_far}"
    partial = (f"collect_list(CASE WHEN {knows_values} AND {placeholders} THEN struct(_seq, {UNCHANGED}, "
               f"{carried}) END) {so_far}")
    content = "hash(" + ", ".join(quote(c) for c in columns
                                  if not is_pipeline_column(c) or c in ("_op", "_is_deleted")) + ")"
    null_key = " OR ".join(f"{quote(k)} IS NULL" for k in keys)
    failed = (f"(({null_key}) AND _op != {sql_string(TRUNCATE)}) OR _seq.source_major IS NULL "
              f"OR (lead(_seq) OVER ({by_key}) = _seq AND lead({content}) OVER ({by_key}) != {content})")
    newest = shuffled.selectExpr(
        *map(quote, columns),
        f"{knows_values} AND NOT {placeholders} AS _complete", f"{whole} AS _whole", f"{partial} AS _partial",
        f"lead(1) OVER ({by_key}) IS NULL AS _newest",
        f"CASE WHEN {failed} THEN raise_error({sql_string(CHECK_FAILED)}) END AS _failed")
    newest = newest.where("_failed IS NULL AND _newest")

    def knows(name: str) -> str:  # a change of `_partial` newer than `_whole` that knows column `name`
        return (f"(_whole IS NULL OR change._seq > _whole._seq) "
                f"AND NOT coalesce(array_contains(change.{UNCHANGED}, {sql_string(name)}), false)")

    def value(name: str) -> str:  # the newest change knows every column (almost every key): nothing to search
        own = quote(name)
        settled = f"CASE WHEN _whole IS NULL THEN {own} ELSE _whole.{own} END"
        newest = (f"aggregate(_partial, struct({settled} AS v), (found, change) -> "
                  f"CASE WHEN {knows(name)} THEN struct(change.{own} AS v) ELSE found END).v")
        return f"CASE WHEN _complete THEN {own} ELSE {newest} END AS {own}"

    def unknown(name: str) -> str:
        return f"CASE WHEN _whole IS NULL AND NOT exists(_partial, change -> {knows(name)}) THEN {sql_string(name)} END"

    none = "CAST(array() AS array<string>)"
    listed = (f"CASE WHEN _complete THEN {none} ELSE array_compact(array({', '.join(map(unknown, data))})) END"
              if data else none)
    return newest.selectExpr(*[value(c) if c in carried_columns else quote(c) for c in columns],
                             f"{listed} AS {UNCHANGED}")


def check_failed(error: Exception) -> bool:
    """`error` is a check of `built` failing (a Spark job aborted by its `raise_error`)."""
    return CHECK_FAILED in str(error)
