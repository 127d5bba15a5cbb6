"""SCD type 2: a key's changes become versions, one row per version, rebuilt per key from what is known.

A version is a run of a key's changes (in `_seq` order) whose tracked columns and deletion flag stay the same:
a change of a tracked column opens a new version, a change of an untracked one updates the version in place
(the row holds its newest values), a delete opens a deleted version (`_is_deleted`, the last values kept), and
a later insert opens a live one again. Each version row has:
- `_seq_from` / `_seq_to`: the `_seq` of its first change and of the next version's (null while current);
- `_valid_from` / `_valid_to`: those changes' source commit times (`_source_ts`);
- `_is_current`: it is the key's newest version; `_seq`: its newest change (so a late change is placed).

`versions_sql` rebuilds the versions of every key that has new changes from the key's stored versions (each
one stands for its first and its newest change, knowing the columns some change of it knew) and the new
changes, ordered by `_seq` whatever order they arrived in: a late change splits the version it falls into, a
duplicate changes nothing, a TOAST placeholder (`_unchanged`) and a delete take each column's value from the
changes before them, so a late change also corrects the values later versions inherited. Only the keys of the
new changes are read and rewritten, so a run's cost follows its changes. What a version row cannot tell is
what happened between its first and newest change when it absorbed several (changes of untracked columns, a
placeholder after a value): a late change that lands there and splits the version gives the earlier part the
version's newest values. The writes make the same rows in one pass in the JVM (`versions_of`): in a fold of a 1M-row
mirror the SQL's windows cost more than reading the base. Readers and the views use the SQL.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Iterable

from cdc.build import Built, in_key_order
from cdc.merge import TRUNCATE, UNCHANGED, Clause, MergeClauses, Relations, data_columns, matched_on
from tables.lake import java_class
from tables.names import column, quote, sql_string

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# The version columns an SCD2 table adds to a change's columns.
VERSION_COLUMNS = ("_valid_from", "_valid_to", "_seq_from", "_seq_to", "_is_current")
FROM_BASE = "_from_base"  # 1: a stored version standing for a change, 0: a new change
DROP = "_drop"  # in a version merge: the row that deletes a key's stored versions


def is_history(columns: Iterable[str]) -> bool:
    """Whether a table with these columns is an SCD2 table."""
    return "_valid_from" in set(columns)


def tracked(columns: list[str], keys: list[str], track: list[str] | None, track_except: list[str] | None) -> list[str]:
    """The columns whose change opens a new version: `track` (AUTO CDC's `track_history_column_list`), else all
    but `track_except` (`track_history_except_column_list`), else all data columns."""
    data = data_columns(columns, keys)
    if track:
        return [c for c in data if c in track]
    return [c for c in data if c not in (track_except or [])]


def _same_key(keys: list[str]) -> str:
    """A pending change `p` and a stored version `b` of one key."""
    return " AND ".join(f"p.{quote(k)} = b.{quote(k)}" for k in keys)


def version_rows_sql(columns: list[str], keys: list[str], on: Relations) -> str:
    """What the versions of the keys `on.pending` names are rebuilt from: each stored version (`on.table`) of those
    keys as its first and its newest change (`_from_base` 1), and the new changes (`on.pending`, 0); `columns` and
    `_unchanged`. In `_seq` order, a stored version's row comes before a new change's at one `_seq`."""
    match = _same_key(keys)
    listed = ", ".join(quote(c) for c in columns)
    as_first = ", ".join("_seq_from AS _seq" if c == "_seq" else "_valid_from AS _source_ts" if c == "_source_ts"
                         else quote(c) for c in columns)
    touched = f"EXISTS (SELECT 1 FROM {on.pending} p WHERE {match})"
    return (f"SELECT {as_first}, {UNCHANGED}, 1 AS {FROM_BASE} FROM {on.table} b WHERE {touched} "
            f"UNION ALL SELECT {listed}, {UNCHANGED}, 1 AS {FROM_BASE} FROM {on.table} b "
            f"WHERE _seq <> _seq_from AND {touched} "
            f"UNION ALL SELECT {listed}, {UNCHANGED}, 0 AS {FROM_BASE} FROM {on.pending}")


def versions_of(rows: DataFrame, keys: list[str], tracked_columns: list[str], *, failure: str | None = None,
                spread: list[Column] | None = None, spread_values: int = 0) -> Built:
    """`versions_sql`'s rows (and what counts the changes they came from), made in one pass over each key's
    `version_rows_sql` rows (`rows`) in the JVM: one shuffle and a sort, instead of the SQL's windows and
    aggregation. `failure`: a first build's (the pass checks the changes, `cdc/build.py`'s way); `spread` and
    `spread_values`: what the rows are shuffled by, as `cdc.build.built` takes them (none: by the key)."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    ordered = in_key_order(rows, keys, ["_seq", F.col(FROM_BASE).desc()], spread=spread or [],
                           spread_values=spread_values)
    made = java_class(rows.sparkSession, "cdc.spark.Versions")(ordered._jdf, keys, tracked_columns, failure)
    return Built(DataFrame(made.rows(), rows.sparkSession), made)


def versions_sql(columns: list[str], keys: list[str], tracked_columns: list[str], on: Relations) -> str:
    """Spark SQL over `on.table` (stored versions) and `on.pending` (new changes): the versions of every key
    `on.pending` names, rebuilt. `columns` are the change columns (without `_unchanged` and the version
    columns); the result has those, `_unchanged` and `VERSION_COLUMNS`."""
    listed = ", ".join(quote(c) for c in columns)
    rows = version_rows_sql(columns, keys, on)
    partition = ", ".join(quote(k) for k in keys)
    order = f"PARTITION BY {partition} ORDER BY _seq, {FROM_BASE} DESC"
    data = data_columns(columns, keys)

    def knows(column: str, unchanged: str = UNCHANGED) -> str:
        """A change knows a column unless it is a delete or a placeholder for it; a stored version, unless
        none of its changes did (`_unchanged`: it holds the value of the versions before it)."""
        return f"NOT _is_deleted AND NOT coalesce(array_contains({unchanged}, {sql_string(column)}), false)"

    # Each column's value as of each change: its own when it knows it, else the newest earlier one known (kept
    # in a one-element array, so a known null is told from an unknown value).
    known = {c: f"_known{i}" for i, c in enumerate(data)}
    lasts = ", ".join(f"last_value(CASE WHEN {knows(c)} THEN array({quote(c)}) END) IGNORE NULLS "
                      f"OVER ({order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS {known[c]}" for c in data)
    values = ", ".join(f"CASE WHEN {known[c]} IS NULL THEN {quote(c)} ELSE element_at({known[c]}, 1) END AS {quote(c)}"
                       if c in known else quote(c) for c in columns)
    # A version's `_unchanged`: the columns none of its changes knew (their values are the earlier versions').
    unknown = ", ".join(f"CASE WHEN max(CASE WHEN {knows(c, '_own_unchanged')} THEN 1 ELSE 0 END) = 0 "
                        f"THEN {sql_string(c)} END" for c in data)
    unknowns = f"filter(array({unknown}), c -> c IS NOT NULL)" if data else "CAST(array() AS array<string>)"
    signature = f"struct(_is_deleted{''.join(f', {quote(c)}' for c in tracked_columns)})"
    opens = f"CASE WHEN {signature} <=> lag({signature}) OVER ({order}) THEN 0 ELSE 1 END"
    with_known = f"SELECT *{', ' + lasts if data else ''} FROM ({rows}) r"
    numbered = (f"SELECT *, sum(_opens) OVER ({order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _version "
                f"FROM (SELECT *, {opens} AS _opens FROM (SELECT {values}, {UNCHANGED} AS _own_unchanged, "
                f"_seq AS _at, {FROM_BASE} FROM ({with_known}) k) c) m")
    newest = f"struct(_at, {FROM_BASE})"
    aggregated = [quote(k) for k in keys]
    for c in columns:
        if c in keys:
            continue
        if c == "_deleted_at":
            aggregated.append(f"CASE WHEN max_by(_is_deleted, {newest}) THEN min_by(_source_ts, {newest}) END "
                              "AS _deleted_at")
        else:
            aggregated.append(f"max_by({quote(c)}, {newest}) AS {quote(c)}")
    aggregated += [f"{unknowns} AS {UNCHANGED}", "min(_at) AS _seq_from",
                   f"min_by(_source_ts, {newest}) AS _valid_from"]
    versions = f"SELECT {', '.join(aggregated)} FROM ({numbered}) n GROUP BY {partition}, _version"
    by_start = f"PARTITION BY {partition} ORDER BY _seq_from"
    return (f"SELECT {listed}, {UNCHANGED}, _valid_from, lead(_valid_from) OVER ({by_start}) AS _valid_to, "
            f"_seq_from, lead(_seq_from) OVER ({by_start}) AS _seq_to, "
            f"lead(_seq_from) OVER ({by_start}) IS NULL AS _is_current FROM ({versions}) v")


def history_sql(columns: list[str], keys: list[str], tracked_columns: list[str], on: Relations) -> str:
    """Every version of an SCD2 table in the pending layout (Spark SQL over `on.table` and `on.pending`): the
    stored versions of keys without new changes, and the rebuilt versions of the others. `columns` are the
    change columns; the result has those and `VERSION_COLUMNS`."""
    match = _same_key(keys)
    listed = ", ".join(quote(c) for c in (*columns, *VERSION_COLUMNS))
    untouched = f"SELECT {listed} FROM {on.table} b WHERE NOT EXISTS (SELECT 1 FROM {on.pending} p WHERE {match})"
    return f"{untouched} UNION ALL SELECT {listed} FROM ({versions_sql(columns, keys, tracked_columns, on)}) r"


def touched_sql(columns: list[str], keys: list[str], on: Relations) -> str:
    """The stored versions (`on.table`) of the keys the new changes (`on.pending`) name: what a rebuild reads of
    them (`version_rows_sql`), their `columns`, `_unchanged`, `_seq_from` and `_valid_from`, not the version
    columns the rebuild makes anew: Iceberg reads a table with struct columns row by row, each column costs."""
    match = _same_key(keys)
    listed = ", ".join(quote(c) for c in (*columns, UNCHANGED, "_seq_from", "_valid_from"))
    return f"SELECT {listed} FROM {on.table} b WHERE EXISTS (SELECT 1 FROM {on.pending} p WHERE {match})"


def replaced_sql(columns: list[str], keys: list[str], stored: str, rebuilt: str) -> str:
    """What a merge of rebuilt versions (`rebuilt`, SQL text) writes, `stored` being the stored versions of the
    keys rebuilt: every rebuilt version, and one row for each key with stored versions (`_drop`), which deletes
    them all. The MERGE then matches on the key alone: a stored version's other columns are never read."""
    listed = ", ".join(quote(c) for c in (*columns, UNCHANGED, *VERSION_COLUMNS))
    emptied = ", ".join(quote(c) if c in keys else f"NULL AS {quote(c)}"
                        for c in (*columns, UNCHANGED, *VERSION_COLUMNS))
    key_list = ", ".join(quote(k) for k in keys)
    return (f"SELECT {listed}, false AS {DROP} FROM ({rebuilt}) x UNION ALL "
            f"SELECT {emptied}, true AS {DROP} FROM (SELECT DISTINCT {key_list} FROM {stored}) b")


def version_clauses(columns: list[str], keys: list[str]) -> MergeClauses:
    """The MERGE of `replaced_sql`'s rows into stored versions: a key's `_drop` row deletes its stored versions,
    its rebuilt versions (which never match) are inserted. Why by the key alone: the rebuilt versions are all of
    the key's, and a match on the key reads one column of the table, vectorized, where matching `_seq_from` too
    read it (a struct) row by row; the writes are the same, each stored version of a rebuilt key replaced."""
    every = {quote(c): f"s.{quote(c)}" for c in columns}
    return MergeClauses(on=f"{matched_on(keys)} AND s.{DROP}", matched=(Clause("delete", None, {}),),
                        not_matched=(Clause("insert", f"NOT s.{DROP}", every),))


def truncates_as_deletes(changes: DataFrame, keys: list[str], versions: DataFrame | None) -> DataFrame:
    """`changes` with each truncate (`_op = 't'`, no key) replaced by a delete, at the truncate's position and
    source time, of every key live just before it: in `versions` (the table's stored versions) or with an
    older change in `changes`. Later changes of those keys (inserts after the truncate) stand."""
    from pyspark.sql import functions as F

    key_columns = [column(k) for k in keys]
    is_truncate = functools.reduce(operator.and_, [k.isNull() for k in key_columns], F.col("_op") == TRUNCATE)
    truncates = changes.where(is_truncate).select(F.col("_seq").alias("_t_seq"), F.col("_source_ts").alias("_t_ts"))
    rows = changes.where(~is_truncate)
    at = F.struct(F.col("_t_seq.source_major"), F.col("_t_seq.source_minor"))

    def position(name: str) -> Column:
        return F.struct(F.col(f"{name}.source_major"), F.col(f"{name}.source_minor"))

    candidates = rows.select(*key_columns, "_seq").crossJoin(F.broadcast(truncates)).where(position("_seq") < at)
    if versions is not None:
        live = (versions.where("NOT _is_deleted").select(*key_columns, "_seq_from", "_seq_to")
                .crossJoin(F.broadcast(truncates)))
        live = live.where((position("_seq_from") < at) & (F.col("_seq_to").isNull() | (position("_seq_to") > at)))
        candidates = candidates.select(*key_columns, "_t_seq", "_t_ts").unionByName(
            live.select(*key_columns, "_t_seq", "_t_ts"))
    deleted = {"_op": F.lit(TRUNCATE), "_is_deleted": F.lit(True), "_seq": F.col("_t_seq"),
               "_source_ts": F.col("_t_ts"), "_deleted_at": F.col("_t_ts")}
    deletes = candidates.select(*key_columns, "_t_seq", "_t_ts").distinct().select(
        *[deleted[c].alias(c) if c in deleted else column(c) if c in keys else F.lit(None).cast(kind).alias(c)
          for c, kind in rows.dtypes])
    return rows.unionByName(deletes)
