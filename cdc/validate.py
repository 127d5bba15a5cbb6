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
from typing import TYPE_CHECKING

from cdc.columns import is_pipeline_column
from cdc.merge import TRUNCATE
from tables.names import column, quote, sql_string

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


def check_changes(table: str, changes: DataFrame, keys: list[str], sequence_by: str = "_seq",
                  history: bool = False) -> BatchTotals:
    """The totals of a batch of changes, after checking it has no null key, no null sequence (`sequence_by`
    names it for the message), no two different changes of a key at one `_seq` (the same change delivered twice
    is no conflict), and with `history` (SCD2), no change without a source time. One aggregation by key, then
    its totals: a key's changes at one `_seq` differ when it has more distinct (`_seq`, content) pairs than
    distinct `_seq`s."""
    from pyspark.sql import functions as F

    null_key = " OR ".join(f"{quote(k)} IS NULL" for k in keys)
    keyed = " AND ".join(f"{quote(k)} IS NOT NULL" for k in keys)
    content = "hash(" + ", ".join(quote(c) for c in changes.columns
                                  if not is_pipeline_column(c) or c in ("_op", "_is_deleted")) + ")"
    truncate = f"_op = {sql_string(TRUNCATE)}"
    pairs = f"collect_set(struct(_seq, {content} AS content))"
    per_key = changes.groupBy(*[column(k) for k in keys]).agg(*[F.expr(e) for e in (
        "count(1) AS rows", f"size({pairs}) - size(collect_set(_seq)) AS ties",
        f"CASE WHEN size({pairs}) > size(collect_set(_seq)) "  # the pairs of the tied `_seq`s, for the message
        f"THEN filter({pairs}, p -> size(filter({pairs}, q -> q._seq <=> p._seq)) > 1) END AS tied",
        f"count(CASE WHEN ({null_key}) AND NOT {truncate} THEN 1 END) AS null_keys",
        f"count(CASE WHEN {truncate} THEN 1 END) AS truncates",
        "count(CASE WHEN _seq.source_major IS NULL THEN 1 END) AS null_seqs",
        "count(CASE WHEN _source_ts IS NULL THEN 1 END) AS null_times")])
    example = f"to_json(struct({', '.join(map(quote, keys))}, element_at(tied, 1)._seq AS _seq))"
    totals = per_key.selectExpr(
        f"count(CASE WHEN {keyed} THEN 1 END) AS keys", "coalesce(sum(rows), 0) AS changes",
        "coalesce(sum(null_keys), 0) AS null_keys", "coalesce(sum(truncates), 0) AS truncates",
        "coalesce(sum(null_seqs), 0) AS null_seqs", "coalesce(sum(null_times), 0) AS null_times",
        "count(CASE WHEN ties > 0 THEN 1 END) AS ties",
        f"first(CASE WHEN ties > 0 THEN {example} END, true) AS tie").first()
    assert totals is not None  # an aggregate without grouping has one row
    if totals["null_seqs"]:
        raise ChangeError(
            f"{table}: {totals['null_seqs']} change(s) with a null {sequence_by}: their order is unknown, so the "
            f"newest cannot be told. Fill {sequence_by} (the source's commit position or time) or filter those "
            "changes out before applying them")
    if history and totals["null_times"]:
        raise ChangeError(
            f"{table}: {totals['null_times']} change(s) without a source time (_source_ts): an SCD2 table dates "
            f"each version by its source commit time. Use a source whose changes carry their commit time "
            f"(apply_changes: source_time=<column>), or keep {table} at SCD type 1 (mirror.scd_type.{table} = 1)")
    if totals["null_keys"]:
        raise ChangeError(
            f"{table}: {totals['null_keys']} change(s) with a null key column ({', '.join(keys)}): they name no row. "
            f"Check mirror.keys.{table} names the source's key, or repair the changelog rows (`_op <> 't'` "
            "and a null key) before the next run")
    if totals["ties"]:
        raise ChangeError(
            f"{table}: {totals['ties']} key(s) have different changes with the same _seq, e.g. {totals['tie']}: the "
            "newest cannot be told. The source's positions are not unique per key (check the connector's "
            "position fields); remove or correct the duplicates in the changelog before the next run")
    return BatchTotals(int(totals["keys"]), int(totals["changes"]), int(totals["truncates"]))


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
