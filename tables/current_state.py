"""The current state of a pending-layout mirror for readers without Spark: pyiceberg scans, resolved in Arrow.

A mirror in the pending layout (`tables/pending.py`) is its base as of the last fold plus the changes merged
since. Spark, the HiveServer2 endpoint and Athena read the overlay through the mirror's views; a pyiceberg user
has no SQL engine, so `read_current_state` scans both tables and computes the same overlay as
`cdc.merge.overlay_sql`, in Arrow: the base rows no pending change touches, and for each pending key the
columns of its newest row (by `_seq`) that knows them. The pending table holds the changes since the last fold,
so the resolve costs what they cost; the base is read once, as a plain scan of it would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc.merge import FROM_BASE, TOMBSTONE, UNCHANGED, data_columns
from cdc.scd2 import is_history

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

ROW = "__row"  # a row's position, carried through joins that cannot carry nested columns


def read_current_state(catalog: Catalog, table: str, keys: Sequence[str], *, pending_namespace: str = "mirror_pending",
                       delete_mode: Literal["soft", "hard"] = "soft") -> pa.Table:
    """The current state of mirror `table` (`"<namespace>.<name>"`) with its `keys` (`mirror.keys.<name>`), as
    the mirror's views show it, soft-deleted rows included: e.g.
    `read_current_state(load_catalog("lake"), "mirror.orders", ["order_id"])`. A mirror without a pending table
    (the merge layout, or one not yet created) is its table as it is. An SCD type 2 mirror with pending changes is
    refused with the way to read it."""
    from pyiceberg.exceptions import NoSuchTableError

    base = catalog.load_table(table).scan().to_arrow()
    try:
        changes = catalog.load_table(f"{pending_namespace}.{table.rsplit('.', 1)[-1]}").scan().to_arrow()
    except NoSuchTableError:
        return base.drop_columns([UNCHANGED]) if UNCHANGED in base.column_names else base
    return current_state(base, changes, keys, delete_mode)


def current_state(base: pa.Table, changes: pa.Table, keys: Sequence[str],
                  delete_mode: Literal["soft", "hard"] = "soft") -> pa.Table:
    """The overlay of `changes` (a pending table's rows) on `base` (its mirror's), without `_unchanged`."""
    missing = [k for k in keys if k not in base.column_names]
    if missing:
        raise ValueError(f"the mirror has no key column {', '.join(missing)}: pass the columns of "
                         f"mirror.keys.<table> (it has {', '.join(base.column_names)})")
    columns = [c for c in base.column_names if c != UNCHANGED]
    if changes.num_rows == 0:
        return base.select(columns)
    if is_history(base.column_names):
        raise ValueError("the mirror is SCD type 2: its pending changes re-version whole keys, which only Spark "
                         "resolves. Read its `<table>_history` view through Spark, HiveServer2 or Athena, or read "
                         "the table itself after `python -m pipeline maintain` has folded them")
    changes = changes.select(base.column_names).cast(base.schema)
    untouched = _matching(base, changes, keys, "left anti")
    resolved = _resolved(_matching(base, changes, keys, "left semi"), changes, keys, columns)
    if delete_mode == "hard":
        resolved = resolved.filter(pc.invert(pc.fill_null(resolved["_is_deleted"], False)))
    return pa.concat_tables([untouched.select(columns), resolved])


def _matching(rows: pa.Table, changes: pa.Table, keys: Sequence[str], join_type: str) -> pa.Table:
    """The rows of `rows` whose key some change has (`left semi`), or none has (`left anti`)."""
    positions = rows.select(list(keys)).append_column(ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    picked = positions.join(changes.select(list(keys)), list(keys), join_type=join_type)[ROW]
    return rows.take(picked)


def _resolved(touched: pa.Table, changes: pa.Table, keys: Sequence[str], columns: list[str]) -> pa.Table:
    """One row per pending key: each column from the newest row that knows it, by (`_seq`, base over a change
    at the same `_seq`); when no row knows it, the newest row's own value (`cdc.merge.resolved_sql`)."""
    rows = pa.concat_tables([touched.append_column(FROM_BASE, pa.array(np.ones(touched.num_rows, dtype=np.int8))),
                             changes.append_column(FROM_BASE, pa.array(np.zeros(changes.num_rows, dtype=np.int8)))])
    rows = rows.take(_source_order(rows))  # a row's position is now its rank: older first
    count = rows.num_rows
    rank = np.arange(count, dtype=np.int64)
    data = set(data_columns(columns, keys))
    scored = [c for c in columns if c not in keys]
    scores = {c: pa.array(np.where(_knows(rows, c, c in data), count, 0) + rank) for c in scored}  # knows first
    grouped = pa.table({**{k: rows[k] for k in keys}, **{f"{c}{ROW}": s for c, s in scores.items()}}) \
        .group_by(list(keys), use_threads=False).aggregate([(f"{c}{ROW}", "max") for c in scored])
    winner = {c: grouped[f"{c}{ROW}_max"].to_numpy() % count for c in scored}  # the score's rank part
    return pa.table({c: grouped[c] if c in keys else rows[c].take(pa.array(winner[c])) for c in columns})


def _source_order(rows: pa.Table) -> pa.Array:
    """Indices that sort `rows` by `_seq` field by field (a null first, as Spark orders a struct), then base last."""
    seq = rows["_seq"].combine_chunks()
    fields = {f"_seq{i}": pc.struct_field(seq, [i]) for i in range(seq.type.num_fields)}
    ordering = pa.table({**fields, FROM_BASE: rows[FROM_BASE]})
    return pc.sort_indices(ordering, sort_keys=[(name, "ascending") for name in ordering.column_names],
                           null_placement="at_start")


def _knows(rows: pa.Table, column: str, is_data: bool) -> np.ndarray:
    """Which rows know `column`: every row a deletion column; a base row or a change that is no delete the other
    columns, a data column only when `_unchanged` does not list it (a TOAST placeholder)."""
    if column in TOMBSTONE:
        return np.ones(rows.num_rows, dtype=bool)
    from_base = rows[FROM_BASE].to_numpy() == 1
    live = ~pc.fill_null(rows["_is_deleted"], True).to_numpy(zero_copy_only=False)
    knows = from_base | live
    if is_data:
        unchanged = rows[UNCHANGED].combine_chunks()
        listed = pc.list_parent_indices(unchanged).to_numpy()[
            pc.equal(pc.list_flatten(unchanged), column).fill_null(False).to_numpy(zero_copy_only=False)]
        knows[listed] = False
    return knows
