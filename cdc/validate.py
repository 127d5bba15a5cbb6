"""Changes a mirror cannot apply without guessing, caught before anything is written.

- A change with a null key column (other than a truncate, which has no key): it names no row.
- Two different changes of one key with the same `_seq`: "the newest wins" has no answer, and picking one
  would make the mirror depend on the order Spark read them in.
- A change with a null sequence (`_seq`, or `apply_changes`' `sequence_by`): its order is unknown.
- A change without a source time in an SCD2 table: versions are dated by it.
- A key or sequence column the changes lack (`check_columns`).
- A key column whose type changed at the source (after a schema change) to one the mirror's column cannot
  hold: the keys would no longer match the rows they name.
Each is a `ChangeError` naming the table, the rows and the fix; the run stops before its commit, so the
watermark stays and nothing is half-applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdc.columns import is_pipeline_column
from cdc.merge import TRUNCATE
from tables.names import quote, sql_string

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Key type changes a mirror absorbs by widening its column (Iceberg's type promotions).
WIDENINGS = {("int", "bigint"), ("float", "double")}


class ChangeError(ValueError):
    """A batch of changes the mirror refuses to apply; the message says which and what to do."""


@dataclass(frozen=True)
class BatchTotals:
    keys: int  # keys the batch changes
    changes: int  # changelog rows
    truncates: int  # truncates (changes without a key)


def check_columns(table: str, columns: list[str], keys: list[str], sequence_by: str) -> None:
    """The key and sequence columns are there: a `ChangeError` naming the missing ones, before any work."""
    missing = [c for c in (*keys, sequence_by) if c not in columns]
    if missing:
        raise ChangeError(
            f"{table}: the changes have no column {', '.join(missing)} (columns: {', '.join(columns)}). Name the "
            f"key columns in mirror.keys.{table} (apply_changes: keys=) and the order in sequence_by= as the "
            "changes spell them")


_TIMES = ("map('timestampFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\", "  # to_json's options: whole microseconds
          "'timestampNTZFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS\")")


def check_changes(table: str, changes: DataFrame, keys: list[str], sequence_by: str = "_seq",
                  history: bool = False) -> BatchTotals:
    """The totals of a batch of changes, after `checked` finds nothing wrong with them."""
    found = change_totals(check_rows(changes, keys)).first()
    return checked(table, found.asDict() if found is not None else {}, keys, sequence_by, history)


def check_rows(changes: DataFrame, keys: list[str]) -> DataFrame:
    """What the checks read of each change: its key and `_seq` as JSON text (timestamps to the microsecond), a
    hash of its content, and whether its key, `_seq` or source time is null."""
    null_key = " OR ".join(f"{quote(k)} IS NULL" for k in keys)
    content = "hash(" + ", ".join(quote(c) for c in changes.columns
                                  if not is_pipeline_column(c) or c in ("_op", "_is_deleted")) + ")"
    truncate = f"_op = {sql_string(TRUNCATE)}"
    return changes.selectExpr(
        f"to_json(struct({', '.join(map(quote, keys))}), {_TIMES}) AS key",
        f"to_json(_seq, {_TIMES}) AS seq", f"{content} AS content", f"({null_key}) AND NOT coalesce({truncate}, false) AS null_key",
        f"coalesce({truncate}, false) AS truncate", f"NOT ({null_key}) AS keyed",
        "_seq.source_major IS NULL AS null_seq", "_source_ts IS NULL AS null_time")


def change_totals(rows: DataFrame) -> DataFrame:
    """The totals `checked` reads of `check_rows`' `rows`: one aggregation by key, then one over the keys. A key's
    changes at one `_seq` differ when it has more distinct (`_seq`, content) pairs than distinct `_seq`s; the
    example of such a tie is worked out only for a key that has one."""
    from pyspark.sql import functions as F

    pairs = "collect_set(struct(seq, content))"
    per_key = rows.groupBy("key").agg(*[F.expr(e) for e in (
        "count(1) AS rows", f"size({pairs}) - size(collect_set(seq)) AS ties",
        f"CASE WHEN size({pairs}) > size(collect_set(seq)) "  # the pairs of the tied `_seq`s, for the message
        f"THEN filter({pairs}, p -> size(filter({pairs}, q -> q.seq <=> p.seq)) > 1) END AS tied",
        "bool_or(keyed) AS keyed", "count_if(null_key) AS null_keys", "count_if(truncate) AS truncates",
        "count_if(null_seq) AS null_seqs", "count_if(null_time) AS null_times")])
    return per_key.agg(*[F.expr(e) for e in (
        "count_if(keyed) AS keys", "sum(rows) AS changes", "sum(null_keys) AS null_keys",
        "sum(truncates) AS truncates", "sum(null_seqs) AS null_seqs", "sum(null_times) AS null_times",
        "count_if(ties > 0) AS ties",
        "first(CASE WHEN ties > 0 THEN concat('key ', key, ' at _seq ', element_at(tied, 1).seq) END, true) AS tie")])


def checked(table: str, totals: dict[str, Any], keys: list[str], sequence_by: str = "_seq",
            history: bool = False) -> BatchTotals:
    """`totals` (a row of `change_totals`; empty for no changes) as `BatchTotals`, after checking the changes had
    no null key, no null sequence (`sequence_by` names it for the message), no two different changes of a key at
    one `_seq` (the same change delivered twice is no conflict), and with `history` (SCD2), no change without a
    source time: a `ChangeError` naming the table, the rows and the fix."""
    def total(name: str) -> int:
        return int(totals.get(name) or 0)

    if total("null_seqs"):
        raise ChangeError(
            f"{table}: {total('null_seqs')} change(s) with a null {sequence_by}: their order is unknown, so the "
            f"newest cannot be told. Fill {sequence_by} (the source's commit position or time) or filter those "
            "changes out before applying them")
    if history and total("null_times"):
        raise ChangeError(
            f"{table}: {total('null_times')} change(s) without a source time (_source_ts): an SCD2 table dates "
            f"each version by its source commit time. Use a source whose changes carry their commit time "
            f"(apply_changes: source_time=<column>), or keep {table} at SCD type 1 (mirror.scd_type.{table} = 1)")
    if total("null_keys"):
        raise ChangeError(
            f"{table}: {total('null_keys')} change(s) with a null key column ({', '.join(keys)}): they name "
            f"no row. "
            f"Check mirror.keys.{table} names the source's key, or repair the changelog rows (`_op <> 't'` "
            "and a null key) before the next run")
    if total("ties"):
        raise ChangeError(
            f"{table}: {total('ties')} key(s) have different changes with the same _seq, e.g. {totals['tie']}: the "
            "newest cannot be told. The source's positions are not unique per key (check the connector's "
            "position fields); remove or correct the duplicates in the changelog before the next run")
    return BatchTotals(total("keys"), total("changes"), total("truncates"))


def check_key_types(table: str, mirror: dict[str, str], changes: dict[str, str]) -> dict[str, str]:
    """The key columns whose type the mirror must widen (column -> new type); a `ChangeError` for a change no
    widening absorbs."""
    widen = {}
    for column, kind in changes.items():
        held = mirror.get(column)
        if held is None or held == kind:
            continue
        if (held, kind) not in WIDENINGS:
            raise ChangeError(
                f"{table}: key column {column} is {kind} in the changelog but {held} in the mirror (the source "
                f"changed its type). Rebuild the mirror: drop it (and its pending table) and run `pipeline mirror`, "
                f"which builds it from the whole changelog")
        widen[column] = kind
    return widen
