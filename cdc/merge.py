"""Mirror semantics: how a batch of canonical change records becomes the current state of a table.

1. Reduce: per key, only the change with the highest `_seq` survives (`latest_per_key`).
2. Merge: that change replaces the mirror's row only when its `_seq` is newer than the row's, so a late event
   or a duplicate can never regress a row (`MergeClauses`).
3. Deletes are soft by default: the row keeps its last known values with `_is_deleted = true` and `_deleted_at`;
   a later insert of the key resurrects it. A delete whose key the mirror never held is stored as a deleted
   row, so an older insert arriving later cannot bring it back. Hard deletes remove the row instead.
4. A column a change names in `_unchanged` (a TOAST placeholder at the source) keeps its last real value: the
   newest earlier change of the batch that carried one, else the mirror's (`latest_per_key`, `merge_clauses`).
5. A truncate (`_op = 't'`, no key) deletes every live row whose newest change is older than it, in the batch
   and in the mirror, at the first truncate after that change (`truncated`); changes after it (inserts) stand.

The clauses are plain SQL expression strings over the aliases `t` (mirror) and `s` (changes), so one
definition drives both Iceberg's `MERGE INTO` and Delta's merge builder.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from cdc.columns import is_pipeline_column, source_columns
from tables.names import column, quote, sql_string

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Changelog columns that describe the transport and the changelog write, not the row: not carried to mirrors.
CHANGELOG_ONLY = ("_transport", "_schema_id", "_ingested_at", "_batch_id", "_source_date")
UNCHANGED = "_unchanged"  # the columns a change did not carry (TOAST placeholders); used by the MERGE, not kept
TRUNCATE = "t"
# What a soft delete writes: the deletion, and nothing of the row's values (it keeps the last known ones).
TOMBSTONE = ("_op", "_seq", "_source_ts", "_source", "_is_deleted", "_deleted_at", "_merged_at")
TRUNCATED_BY = "_truncated_by"  # in `truncated`: the truncate that deletes a row
FROM_BASE = "_from_base"  # in the overlay: 1 for a row of the base table, 0 for a pending change
POSITION = "struct(_seq.source_major, _seq.source_minor)"  # source order across keys (commit LSN, event LSN)


def prepared(changes: DataFrame) -> DataFrame:
    """Changelog rows as a mirror stores them: without the changelog's own columns, with `_deleted_at` (the
    source time of a delete) and `_merged_at`, and a column a change did not carry (`_unchanged`, a TOAST
    placeholder at the source) null rather than the placeholder text."""
    columns = changes.columns
    added = {"_deleted_at": "CASE WHEN _is_deleted THEN _source_ts END", "_merged_at": "current_timestamp()"}

    def value(name: str) -> str:  # SQL text, as every projection over a table's columns (`tables/names.py`)
        if name in added:
            return f"{added[name]} AS {name}"
        if UNCHANGED in columns and not is_pipeline_column(name):
            return (f"CASE WHEN array_contains({UNCHANGED}, {sql_string(name)}) THEN NULL ELSE {quote(name)} END "
                    f"AS {quote(name)}")
        return quote(name)

    kept = [c for c in columns if c not in CHANGELOG_ONLY]
    return changes.selectExpr(*map(value, kept), *[f"{added[c]} AS {c}" for c in added if c not in kept])


def latest_per_key(changes: DataFrame, keys: list[str]) -> DataFrame:
    """One change per key: the one with the highest `_seq` (a total order per key), as the mirror sees it."""
    # one sort: the carry and the rank
    newest_first = f"PARTITION BY {', '.join(map(quote, keys))} ORDER BY _seq DESC"
    reduced = prepared(changes)
    if UNCHANGED in reduced.columns:
        reduced = _carry_unchanged(reduced, keys, f"{newest_first} ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING")
    return reduced.selectExpr("*", f"row_number() OVER ({newest_first}) AS _rank").where("_rank = 1").drop("_rank")


def _carry_unchanged(changes: DataFrame, keys: list[str], this_and_older: str) -> DataFrame:
    """Each change's unchanged columns from the newest earlier change of its key that carried a value; the
    ones no change of the batch carried stay in `_unchanged`, for the MERGE to keep the mirror's value.
    `this_and_older`: the window, as SQL text."""
    columns = changes.columns
    data = data_columns(columns, keys)
    carried = {c: f"first(CASE WHEN NOT array_contains({UNCHANGED}, {sql_string(c)}) THEN struct({quote(c)} AS v) "
                  f"END, true) OVER ({this_and_older})" for c in data}
    unknown = ", ".join(f"CASE WHEN {carried[c]} IS NULL THEN {sql_string(c)} END" for c in data)
    still = f"array_compact(array({unknown}))" if data else UNCHANGED
    return changes.selectExpr(*[f"({carried[c]}).v AS {quote(c)}" if c in carried else quote(c) for c in columns
                                if c != UNCHANGED], f"{still} AS {UNCHANGED}")


def is_truncate(keys: list[str]) -> Column:
    """A truncate: `_op = 't'` and no key."""
    from pyspark.sql import functions as F

    return functools.reduce(operator.and_, [column(k).isNull() for k in keys], F.col("_op") == TRUNCATE)


def truncates(changes: DataFrame, keys: list[str]) -> DataFrame:
    """Every truncate of `changes` in one row: `_truncates`, an array of (`position`, `seq`, `source_ts`), empty
    when there is none. Its filter on the key's nulls reaches a table's scan, whose column statistics skip every
    file without a null key."""
    from pyspark.sql import functions as F

    at = F.struct(F.expr(POSITION).alias("position"), F.col("_seq").alias("seq"), F.col("_source_ts").alias("ts"))
    return changes.where(is_truncate(keys)).agg(F.collect_list(at).alias("_truncates"))


def truncated(reduced: DataFrame, keys: list[str], mirror: DataFrame | None, at: DataFrame) -> DataFrame:
    """`reduced` (one change per key; a truncate's row, which names no key, is left out) with the truncates `at`
    (`truncates` of the changes before their reduce) applied: every live key whose change is older than a
    truncate, in `reduced` or a live `mirror` row, becomes a delete at the first truncate after that change
    (its position and source time), keeping its values. A key deleted before it keeps its own delete. The first
    truncate, not the newest: a key's deletion then does not depend on how the changes were cut into runs."""
    from pyspark.sql import functions as F

    rows = reduced.where(~is_truncate(keys))
    if mirror is not None:
        live = mirror.where(~F.col("_is_deleted")).join(rows.select(*map(column, keys)), keys, "left_anti")
        held = set(live.columns)
        rows = rows.unionByName(live.selectExpr(*[quote(c) if c in held else f"CAST(NULL AS {kind}) AS {quote(c)}"
                                                  for c, kind in rows.dtypes]))
    # The oldest truncate after the row (struct arrays order by their first field, the position), in a column of
    # its own: every value of a deleted row is read from the row as it was (a `withColumns` that replaced `_seq`
    # had the others read the replaced one, and lose `_deleted_at`).
    first = f"array_min(filter(_truncates, t -> t.position > {POSITION})) AS {TRUNCATED_BY}"
    by = f"{TRUNCATED_BY} IS NOT NULL AND NOT _is_deleted"
    deleted = {"_op": sql_string(TRUNCATE), "_is_deleted": "true", "_seq": f"{TRUNCATED_BY}.seq",
               "_source_ts": f"{TRUNCATED_BY}.ts", "_deleted_at": f"{TRUNCATED_BY}.ts"}
    return rows.crossJoin(F.broadcast(at)).selectExpr("*", first).selectExpr(
        *[f"CASE WHEN {by} THEN {deleted[c]} ELSE {quote(c)} END AS {quote(c)}" if c in deleted else quote(c)
          for c in rows.columns])


@dataclass(frozen=True)
class Clause:
    """One WHEN branch: `kind` is update / delete / insert, `condition` may be None (always)."""

    kind: Literal["update", "delete", "insert"]
    condition: str | None
    assignments: dict[str, str]  # target column -> expression over s and t (empty for delete)


@dataclass(frozen=True)
class MergeClauses:
    on: str
    matched: tuple[Clause, ...]
    not_matched: tuple[Clause, ...]


def matched_on(keys: Sequence[str]) -> str:
    """A MERGE's condition matching the changes (`s`) to the mirror's rows (`t`) by key."""
    return " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)


def merge_clauses(columns: list[str], keys: list[str], delete_mode: Literal["soft", "hard"]) -> MergeClauses:
    """The MERGE of reduced changes (`s`) into a mirror (`t`) whose columns are `columns` (`_unchanged`, when
    there, only says which columns keep the mirror's value)."""
    carries = UNCHANGED in columns
    columns = [c for c in columns if c != UNCHANGED]
    quoted = {c: quote(c) for c in columns}
    newer = "s._seq > t._seq"
    every = {quoted[c]: f"s.{quoted[c]}" for c in columns}
    kept = {quoted[c]: f"CASE WHEN array_contains(s.{UNCHANGED}, {sql_string(c)}) THEN t.{quoted[c]} "
                       f"ELSE s.{quoted[c]} END"
            for c in (data_columns(columns, keys) if carries else [])}
    update = {**every, **kept}
    # A soft delete keeps the row's last known values and records only the deletion.
    tombstone = {quoted[c]: f"s.{quoted[c]}" for c in TOMBSTONE if c in quoted}  # `_source`: the changelog's only
    if delete_mode == "hard":
        on_delete = Clause("delete", f"{newer} AND s._is_deleted", {})
        insert = Clause("insert", "NOT s._is_deleted", every)
    else:
        on_delete = Clause("update", f"{newer} AND s._is_deleted", tombstone)
        insert = Clause("insert", None, every)
    return MergeClauses(
        on=matched_on(keys),
        matched=(on_delete, Clause("update", newer, update)),
        not_matched=(insert,),
    )


def fold_clauses(columns: list[str], keys: list[str], delete_mode: Literal["soft", "hard"]) -> MergeClauses:
    """The MERGE of a mirror's pending changes resolved among themselves (`pending_resolved_sql`, as `s`) into its
    base (`t`). It finishes `resolved_sql`'s rule against the base row inside the MERGE, so a fold reads the base
    once: each column from the newest row that knows it (the base on a tie of `_seq`), the deletion columns from
    the newest row, and a column no row knows listed in `_unchanged`. With hard deletes, a key whose newest row is
    a delete is removed."""
    columns = [c for c in columns if c != UNCHANGED]
    data, knowing = data_columns(columns, keys), knowing_columns(columns, keys)
    newer = "s._seq > t._seq"

    def base_knows(column: str) -> str:  # a base row knows all it holds but the columns its `_unchanged` lists
        return f"NOT coalesce(array_contains(t.{UNCHANGED}, {sql_string(column)}), false)" if column in data else "true"

    def resolved(column: str) -> str:
        newest = f"CASE WHEN {newer} THEN s.{quote(column)} ELSE t.{quote(column)} END"
        if column not in knowing:
            return newest
        seq = known_seq(knowing.index(column))
        return (f"CASE WHEN {seq} IS NOT NULL AND (NOT ({base_knows(column)}) OR {seq} > t._seq) "
                f"THEN s.{quote(column)} WHEN {base_knows(column)} THEN t.{quote(column)} ELSE {newest} END")

    unknown = ", ".join(f"CASE WHEN {known_seq(knowing.index(c))} IS NULL AND NOT ({base_knows(c)}) "
                        f"THEN {sql_string(c)} END" for c in data)
    update = {**{quote(c): resolved(c) for c in columns if c not in keys},  # the keys are matched: equal
              UNCHANGED: f"filter(array({unknown}), c -> c IS NOT NULL)"}
    every = {quote(c): f"s.{quote(c)}" for c in [*columns, UNCHANGED]}
    hard = delete_mode == "hard"
    matched = (Clause("delete", f"s._is_deleted AND {newer}", {}),) if hard else ()
    return MergeClauses(on=matched_on(keys),
                        matched=(*matched, Clause("update", None, update)),
                        not_matched=(Clause("insert", "NOT s._is_deleted" if hard else None, every),))


BASE_SEQ = "_base_seq"  # in `key_foldable`'s input: the `_seq` of the key's base row
LEAST_KNOWN = "_least_known"  # in `key_foldable`'s input: `least_known`


def least_known(columns: list[str], keys: list[str]) -> str:
    """Over `pending_resolved_sql`'s rows: the `_seq` of the oldest of the changes that give each column its value
    (the least `known_seq`), null when no change knows some column (a soft delete, a TOAST placeholder)."""
    seqs = [known_seq(i) for i in range(len(knowing_columns([c for c in columns if c != UNCHANGED], keys)))]
    if not seqs:
        return "_seq"
    return f"CASE WHEN {' AND '.join(f'{s} IS NOT NULL' for s in seqs)} THEN least({', '.join(seqs)}) END"


def key_foldable(delete_mode: Literal["soft", "hard"]) -> str:
    """Whether a resolved pending row (`pending_resolved_sql`, with its `least_known` as `LEAST_KNOWN`) of a key the
    base holds, in a row whose `_seq` is `BASE_SEQ`, gives the key's row without the base row's values, so that
    `key_fold_clauses` may write it: when the changes that give it each column are all newer than the base row
    (then `fold_clauses` takes every column from the pending row and leaves `_unchanged` empty), and with hard
    deletes when a delete newer than the base row removes it. Not for a key whose changes left a column unknown
    or are older than its base row: those need the base row's values. (A key the base does not hold always does.)"""
    removed = f" OR (_is_deleted AND _seq > {BASE_SEQ})" if delete_mode == "hard" else ""
    return f"coalesce({LEAST_KNOWN} > {BASE_SEQ}{removed}, false)"


def key_fold_clauses(columns: list[str], keys: list[str], delete_mode: Literal["soft", "hard"]) -> MergeClauses:
    """`fold_clauses` for resolved pending rows that are `key_foldable`: every value from the pending row. The
    MERGE reads of the base only its key, where `fold_clauses` reads every column of every base row to choose
    between the two (at 10M rows, half the fold's time: docs/benchmarks.md)."""
    columns = [c for c in columns if c != UNCHANGED]
    every = {quote(c): f"s.{quote(c)}" for c in [*columns, UNCHANGED]}
    update = {quote(c): f"s.{quote(c)}" for c in [*columns, UNCHANGED] if c not in keys}  # the keys are matched
    hard = delete_mode == "hard"
    removed = (Clause("delete", "s._is_deleted", {}),) if hard else ()
    return MergeClauses(on=matched_on(keys), matched=(*removed, Clause("update", None, update)),
                        not_matched=(Clause("insert", "NOT s._is_deleted" if hard else None, every),))


def knowing_columns(columns: list[str], keys: list[str]) -> list[str]:
    """The columns (without `_unchanged`) `resolved_sql` takes from the newest row that knows them: all but the
    key and the deletion columns (`TOMBSTONE`), which the newest row gives."""
    return [c for c in columns if c not in keys and c not in TOMBSTONE]


def known_seq(index: int) -> str:
    """The column of `pending_resolved_sql` holding the `_seq` of the newest change that knows the `index`-th of
    `knowing_columns`, null when none does: named by position, so no source column can take its name."""
    return f"_known_seq_{index}"


def data_columns(columns: list[str], keys: Sequence[str]) -> list[str]:
    """The source's own columns among `columns` (`cdc/columns.py`), but the key. Only these can be left
    unknown by a change (a TOAST placeholder, a delete)."""
    return [c for c in source_columns(columns) if c not in keys]


@dataclass(frozen=True)
class Relations:
    """What the overlay and version SQL reads, as SQL text: a mirror's base (`table`) and its pending changes
    (`pending`); each a quoted name, maybe pinned (`VERSION AS OF n`). The SQL is built around them, never filled
    in afterwards, so no column name (`a{b}`, `{pending}`) is read as a placeholder."""

    table: str
    pending: str


def resolved_sql(columns: list[str], keys: list[str], on: Relations) -> str:
    """Spark SQL over `on.table` (a mirror's base) and `on.pending` (the changes merged since its last fold): one
    row per pending key, as the source's history in `_seq` order defines it, whatever order the changes
    arrived in. Each column of `columns` (the mirror's, without `_unchanged`) comes from the newest row (by
    `_seq`) that knows it: a soft delete knows only its `TOMBSTONE` columns (the row keeps its last values),
    a TOAST placeholder (`_unchanged`) not its column; a base row knows every column but those its
    `_unchanged` still lists (none of its changes carried them). When no row knows a column, the newest row's
    own value stands (a delete's before-image, else null) and `_unchanged` lists it. On a tie of `_seq` (a
    change folded already) the base row wins."""
    match = " AND ".join(f"p.{quote(k)} = b.{quote(k)}" for k in keys)
    listed = ", ".join(quote(c) for c in columns)
    rows = (f"SELECT {listed}, {UNCHANGED}, 1 AS {FROM_BASE} FROM {on.table} b "
            f"WHERE EXISTS (SELECT 1 FROM {on.pending} p WHERE {match}) "
            f"UNION ALL SELECT {listed}, {UNCHANGED}, 0 AS {FROM_BASE} FROM {on.pending}")
    return _resolution(columns, keys, rows, known_seqs=False)


def pending_resolved_sql(columns: list[str], keys: list[str], pending: str) -> str:
    """`resolved_sql` over the pending changes alone (no base row), and for each knowing column
    (`knowing_columns`) the `_seq` of the newest change that knows it (`known_seq`): what `fold_clauses` needs
    to finish the rule against the base row in the MERGE, without reading the base here."""
    listed = ", ".join(quote(c) for c in columns)
    return _resolution(columns, keys, f"SELECT {listed}, {UNCHANGED}, 0 AS {FROM_BASE} FROM {pending}",
                       known_seqs=True)


def _resolution(columns: list[str], keys: list[str], rows: str, known_seqs: bool) -> str:
    """`resolved_sql`'s GROUP BY over `rows` (the mirror's `columns`, `_unchanged` and `FROM_BASE`)."""
    data = data_columns(columns, keys)

    def knows(column: str) -> str:
        if column in TOMBSTONE:
            return "true"
        if column not in data:
            return f"({FROM_BASE} = 1 OR NOT _is_deleted)"
        return (f"({FROM_BASE} = 1 OR NOT _is_deleted) AND "
                f"NOT coalesce(array_contains({UNCHANGED}, {sql_string(column)}), false)")

    def value(column: str) -> str:
        newest = f"struct(CASE WHEN {knows(column)} THEN 1 ELSE 0 END, _seq, {FROM_BASE})"
        return f"max_by({quote(column)}, {newest}) AS {quote(column)}"

    unknown = ", ".join(f"CASE WHEN max(CASE WHEN {knows(c)} THEN 1 ELSE 0 END) = 0 THEN {sql_string(c)} END"
                        for c in data)
    values = ", ".join(quote(c) if c in keys else value(c) for c in columns)
    seqs = "".join(f", max(CASE WHEN {knows(c)} THEN _seq END) AS {known_seq(i)}"
                   for i, c in enumerate(knowing_columns(columns, keys))) if known_seqs else ""
    grouped = ", ".join(quote(k) for k in keys)
    return (f"SELECT {values}, filter(array({unknown}), c -> c IS NOT NULL) AS {UNCHANGED}{seqs} "
            f"FROM ({rows}) u GROUP BY {grouped}")


def overlay_sql(columns: list[str], keys: list[str], delete_mode: Literal["soft", "hard"], on: Relations) -> str:
    """The current state of a mirror in the pending layout (Spark SQL over `on.table` and `on.pending`): the
    base rows no pending change touches, and the resolved rows of the others (`resolved_sql`); with hard
    deletes, without the deleted keys. `columns` are the mirror's without `_unchanged`, which it leaves out."""
    match = " AND ".join(f"p.{quote(k)} = b.{quote(k)}" for k in keys)
    listed = ", ".join(quote(c) for c in columns)
    untouched = f"SELECT {listed} FROM {on.table} b WHERE NOT EXISTS (SELECT 1 FROM {on.pending} p WHERE {match})"
    live = " WHERE NOT _is_deleted" if delete_mode == "hard" else ""
    return f"{untouched} UNION ALL SELECT {listed} FROM ({resolved_sql(columns, keys, on)}) r{live}"


def merge_sql(target: str, source_view: str, clauses: MergeClauses) -> str:
    """`MERGE INTO` text for engines that take SQL (Iceberg)."""
    def branch(matched: bool, clause: Clause) -> str:
        head = "WHEN MATCHED" if matched else "WHEN NOT MATCHED"
        when = f" AND {clause.condition}" if clause.condition else ""
        if clause.kind == "delete":
            return f"{head}{when} THEN DELETE"
        if clause.kind == "update":
            return f"{head}{when} THEN UPDATE SET " + ", ".join(f"t.{c} = {e}" for c, e in clause.assignments.items())
        return (f"{head}{when} THEN INSERT ({', '.join(clause.assignments)}) "
                f"VALUES ({', '.join(clause.assignments.values())})")

    branches = [branch(True, c) for c in clauses.matched] + [branch(False, c) for c in clauses.not_matched]
    return f"MERGE INTO {target} t USING {source_view} s ON {clauses.on}\n" + "\n".join(branches)


def state_as_of(changes: DataFrame, keys: list[str], source_time: str) -> DataFrame:
    """The rows the source held at `source_time`, rebuilt from a changelog: the newest change per key among
    those committed by then, without the keys it had deleted. The precision is the source's own
    (milliseconds for Debezium's `ts_ms`)."""
    from pyspark.sql import functions as F

    committed = changes.where(F.col("_source_ts") <= F.to_timestamp(F.lit(source_time)))
    return truncated(latest_per_key(committed, keys), keys, None, truncates(committed, keys)).where("NOT _is_deleted")
