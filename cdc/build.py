"""The first build of a current-state mirror in one pass over its changes.

An incremental run materialises its changes, checks them with an aggregation by key (`cdc/validate.py`), then
reduces them (`latest_per_key`, or the pending layout's `resolved_sql`, a GROUP BY of `max_by` per column) and
writes them: for a first build, which reads a whole table's changelog, that is four passes over every change and
three shuffles, five times a plain rebuild at 10M rows (docs/benchmarks.md). Here one shuffle brings each key's
changes together, one sort orders them by `_seq`, and one pass in the JVM (jvm/cdc `FirstBuild`) checks them and
resolves each key's row as they stream past, which is written as it comes out.

The rows are those of the incremental path, by the same rules (jvm/cdc `Resolution`): the newest change by `_seq`
wins, and each data column comes from the newest change that knows it (`resolved_sql`'s rule in the pending
layout, where a soft delete knows none; `latest_per_key`'s in the merge layout, where only a TOAST placeholder does
not), the columns no change knew listed in `_unchanged`; a truncate deletes the keys whose change is older
(`truncated`). The checks are those of `check_changes`, raised from the pass itself, so a failing check fails the
write's job and nothing is committed; the caller then runs `check_changes` for its message and counts.
A small new mirror built with others (`apply_pending_together`) is resolved by the same rules in one task
(jvm/cdc `MirrorRows`), since even this plan costs more than its rows; a test holds the two to the same rows.
Changes known to hold each key once, knowing every column (a backfill's one pass), are their keys' rows already:
`as_stored` gives them, `in_buckets` spreads them into the mirror's key buckets, with no pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdc.merge import TOMBSTONE, UNCHANGED, prepared
from tables.lake import java_class
from tables.names import column, quote

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CHECK_FAILED = "first build: a change failed a check"  # the pass's failure, told apart from other failures
MASK = 0xFFFFFFFF  # 32-bit arithmetic, as Java's int


@dataclass(frozen=True)
class Built:
    """A pass's rows, and what counts the changes they were made from once they are written."""

    rows: DataFrame
    made: Any  # the py4j cdc.spark.FirstBuild or cdc.spark.Versions

    def changes_read(self) -> int:
        return int(self.made.read().value())


def built(changes: DataFrame, keys: list[str], *, deletes_know_values: bool, spread: list[Column],
          spread_values: int = 0) -> Built:
    """One row per key of canonical `changes` (a truncate, which names no key, leaves none: `truncated` applies
    them), checked and resolved in one pass over the key's changes in `_seq` order. `deletes_know_values`: the
    merge layout's rule (a delete's own values stand); else the pending layout's (a soft delete keeps the last
    values). `spread`: what the changes are shuffled and first sorted by, functions of the key (the mirror's key
    buckets, so each bucket's rows are written by one task, one bucket after another); none: by the key.
    `spread_values`: when `spread` is one column, how many values it takes (its buckets): each goes to a task of
    its own (`one_task_a_value`)."""
    from pyspark.sql import DataFrame

    rows = as_stored(changes)
    ordered = in_key_order(rows, keys, ["_seq"], spread=spread, spread_values=spread_values)
    made = java_class(rows.sparkSession, "cdc.spark.FirstBuild")(
        ordered._jdf, keys, list(TOMBSTONE), deletes_know_values, CHECK_FAILED)
    return Built(DataFrame(made.rows(), rows.sparkSession), made)


def as_stored(changes: DataFrame) -> DataFrame:
    """Canonical `changes` as the mirror stores them (`prepared`), `_unchanged` last and never null: what the pass
    reads, and the row it gives a key whose one change knows every column."""
    rows = prepared(changes)
    none = "CAST(array() AS array<string>)"
    unchanged = f"coalesce({UNCHANGED}, {none})" if UNCHANGED in rows.columns else none
    return rows.selectExpr(*[quote(c) for c in rows.columns if c != UNCHANGED], f"{unchanged} AS {UNCHANGED}")


def in_key_order(rows: DataFrame, keys: list[str], then: list[str | Column], *, spread: list[Column],
                 spread_values: int = 0) -> DataFrame:
    """`rows` with each key's in one task, sorted by `spread`, the key, then `then`: what a pass over each key's
    rows in order (jvm/cdc `FirstBuild`, `Versions`) reads. `spread` and `spread_values` as `built` takes them."""
    by_key = [column(k) for k in keys]
    return _shuffled(rows, spread or by_key, spread_values).sortWithinPartitions(*spread, *by_key, *then)


def in_buckets(rows: DataFrame, *, spread: list[Column], spread_values: int = 0) -> DataFrame:
    """`rows` with each value of `spread` in one task, together: what a write into the mirror's key buckets takes
    without a shuffle of its own (a task of one value needs no sort); `rows` as they are without `spread` (a mirror
    not bucketed by key)."""
    if not spread:
        return rows
    shuffled = _shuffled(rows, spread, spread_values)
    return shuffled if spread_values else shuffled.sortWithinPartitions(*spread)


def _shuffled(rows: DataFrame, by: list[Column], spread_values: int) -> DataFrame:
    """`rows` shuffled by `by`: each of its one column's `spread_values` values to a task of its own when given."""
    if spread_values:
        return rows.repartition(spread_values, one_task_a_value(by[0], spread_values))
    return rows.repartition(*by)


def one_task_a_value(value: Column, count: int) -> Column:
    """What to shuffle rows by, into `count` tasks, so that each of `value`'s values 0 to `count` - 1 goes to a task
    of its own. Spark puts a row in task `pmod(hash(what), count)` (Murmur3, seed 42, as its SQL `hash`); here
    `what` is the first integer that hashes to the value's own task. Why: Spark hashes a few small numbers unevenly
    (16 buckets into 4 tasks as 3, 3, 4 and 6 of them; into 16 tasks, two in each of six), and the task with the
    most buckets was a first build's last part, one core busy."""
    from pyspark.sql import functions as F

    first: dict[int, int] = {}
    candidate = 0
    while len(first) < count:
        first.setdefault(spark_hash(candidate) % count, candidate)
        candidate += 1
    return F.element_at(F.array(*[F.lit(first[task]).cast("int") for task in range(count)]), value + 1)


def spark_hash(value: int) -> int:
    """Spark's `hash` of an int (`Murmur3_x86_32.hashInt`, seed 42), as a signed 32-bit int."""
    def rotated(x: int, by: int) -> int:
        return ((x << by) | (x >> (32 - by))) & MASK

    k1 = rotated(value * 0xCC9E2D51 & MASK, 15) * 0x1B873593 & MASK
    h1 = (rotated(42 ^ k1, 13) * 5 + 0xE6546B64) & MASK
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def check_failed(error: Exception) -> bool:
    """`error` is a check of `built` failing (a Spark job whose pass met a change that fails one)."""
    return CHECK_FAILED in str(error)
