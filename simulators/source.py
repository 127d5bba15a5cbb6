"""A stateful source database: it holds every table's rows and commits transactions of changes to them.

Ordering data is what a Postgres source with Debezium produces. Events get WAL positions (LSNs) when they
are written; transactions are emitted in commit order; two transactions may overlap in the WAL, so a raw
event LSN alone is not commit-ordered. `sequence = (last commit LSN, event LSN)` is, lexicographically,
which is why Debezium carries it. Commit times strictly increase (microseconds), so DMS-style ordering by
(commit time, record position in the transaction) is total as well.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass, field
from typing import Iterator

from simulators.tables import Row, Table

Operation = tuple[Table, str, int]  # (table, op, key)

SOURCE_EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z: source time starts here, deterministically


@dataclass(slots=True)
class Change:
    """One committed row change, with everything any CDC format needs to describe it."""

    table: Table
    op: str  # r (snapshot read), c, u, d
    key: int
    before: Row | None
    after: Row | None
    commit_us: int  # source commit time, microseconds since the epoch
    tx_id: int
    last_commit_lsn: int | None  # the commit LSN of the transaction emitted before this one
    lsn: int
    tx_position: int  # 1-based position of the event in its transaction
    schema_version: int
    truncated: tuple[tuple[int, Row], ...] = ()  # a truncate (op t, no key): the rows it removed

    @property
    def ts_ms(self) -> int:
        return self.commit_us // 1000

    @property
    def image(self) -> Row:
        """The row as the source now holds it (after-image), or the last image for a delete."""
        return self.after if self.after is not None else self.before  # type: ignore[return-value]


class KeySet:
    """Live keys with O(1) add, remove and uniform random choice (a list plus each key's index)."""

    def __init__(self) -> None:
        self._keys: list[int] = []
        self._index: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: int) -> None:
        self._index[key] = len(self._keys)
        self._keys.append(key)

    def remove(self, key: int) -> None:
        position = self._index.pop(key)
        last = self._keys.pop()
        if last != key:
            self._keys[position] = last
            self._index[last] = position

    def choice(self, rng: random.Random) -> int:
        return self._keys[int(rng.random() * len(self._keys))]


@dataclass
class SourceDatabase:
    tables: tuple[Table, ...]
    seed: int = 7
    rows_per_table: int = 100
    truncate_every: int | None = None  # every N transactions, truncate the tables marked `truncated`
    rng: random.Random = field(init=False)
    rows: dict[str, dict[int, Row]] = field(init=False)
    schema_version: int = 1

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._random = self.rng.random  # bound once: the generator's hot path draws millions of numbers
        self._pools = {table.name: _ValuePools(table, self.rng) for table in self.tables}
        self.rows = {table.name: {} for table in self.tables}
        self._live = {table.name: KeySet() for table in self.tables}
        self._deleted: dict[str, list[int]] = {table.name: [] for table in self.tables}
        self._next_key = {table.name: 1 for table in self.tables}
        self._lsn = 33_000_000  # WAL position, in bytes; grows by a record's size
        self._last_commit_lsn: int | None = None
        self._tx_id = 500
        self._clock_us = SOURCE_EPOCH_US
        self._shares = list(itertools.accumulate(table.weight for table in self.tables))  # for weighted choice

    def snapshot_rows(self, table: Table) -> int:
        """A table's rows in the snapshot: its share of `rows_per_table` times the tables, at least one."""
        return max(1, round(self.rows_per_table * len(self.tables) * table.weight / self._shares[-1]))

    def snapshot(self) -> Iterator[Change]:
        """The initial snapshot: every table's starting rows as `r` events in one snapshot transaction."""
        tx_id = self._next_tx()
        commit_us = self._tick()
        position = 0
        for table in self.tables:
            for _ in range(self.snapshot_rows(table)):
                key = self._new_key(table)
                row = self._new_row(table, key)
                self.rows[table.name][key] = row
                self._live[table.name].add(key)
                position += 1
                yield Change(table, "r", key, None, row, commit_us, tx_id, None, self._advance_lsn(),
                             position, self.schema_version)
        self._last_commit_lsn = self._advance_lsn()

    def transactions(self) -> Iterator[list[Change]]:
        """Committed transactions, forever, in commit order."""
        truncatable = [table for table in self.tables if table.truncated]
        for count in itertools.count(1):
            if self.truncate_every and truncatable and count % self.truncate_every == 0:
                yield self._truncate(truncatable[count // self.truncate_every % len(truncatable)])
            elif self._random() < 0.2:
                yield from self._overlapping_pair()
            else:
                yield self._commit(self._plan(1 + int(self._random() * 4), frozenset()))

    def evolve(self) -> None:
        """`ALTER TABLE … ADD COLUMN` on every table: rows written from now on may carry the new column."""
        self.schema_version = 2

    # -- planning and committing -------------------------------------------------------------------

    def _overlapping_pair(self) -> Iterator[list[Change]]:
        """Two transactions whose WAL records interleave; the later-started one commits first."""
        first = self._plan(1 + int(self._random() * 3), frozenset())
        second = self._plan(1 + int(self._random() * 3), frozenset((t.name, key) for t, _, key in first))
        lsns_first = [self._advance_lsn() for _ in first]
        lsns_second = [self._advance_lsn() for _ in second]
        yield self._commit(second, lsns_second)
        yield self._commit(first, lsns_first)

    def _plan(self, size: int, taken: frozenset[tuple[str, int]]) -> list[Operation]:
        """Up to `size` row operations on distinct rows (row locks keep overlapping transactions apart)."""
        plan: list[Operation] = []
        used = set(taken)
        random, tables, shares = self._random, self.tables, self._shares
        for _ in range(size):
            table = tables[min(bisect.bisect(shares, random() * shares[-1]), len(tables) - 1)]
            live = self._live[table.name]
            roll = random()
            if roll < 0.25 or len(live) < 5:
                op, key = "c", (self._reinsert_key(table) if roll < 0.05 else self._new_key(table))
            else:
                op, key = ("d" if roll > 0.88 else "u"), live.choice(self.rng)
            if (table.name, key) not in used:
                used.add((table.name, key))
                plan.append((table, op, key))
        return plan

    def _commit(self, plan: list[Operation], lsns: list[int] | None = None) -> list[Change]:
        tx_id = self._next_tx()
        commit_us = self._tick()
        changes = []
        for position, (table, op, key) in enumerate(plan, start=1):
            lsn = lsns[position - 1] if lsns else self._advance_lsn()
            live = self.rows[table.name]
            before = live.get(key)
            if op == "c":
                after: Row | None = self._new_row(table, key)
                live[key] = after
                self._live[table.name].add(key)
            elif op == "u":
                after = self._updated(table, live[key])
                live[key] = after
            else:
                after = None
                del live[key]
                self._live[table.name].remove(key)
                self._deleted[table.name].append(key)
            changes.append(Change(table, op, key, before, after, commit_us, tx_id, self._last_commit_lsn, lsn,
                                  position, self.schema_version))
        self._last_commit_lsn = self._advance_lsn()
        return changes

    def _truncate(self, table: Table) -> list[Change]:
        """`TRUNCATE table`: one event for the table; its rows are gone and their keys may come back."""
        rows = self.rows[table.name]
        removed = tuple(rows.items())
        for key in rows:
            self._live[table.name].remove(key)
            self._deleted[table.name].append(key)
        rows.clear()
        change = Change(table, "t", 0, None, None, self._tick(), self._next_tx(), self._last_commit_lsn,
                        self._advance_lsn(), 1, self.schema_version, removed)
        self._last_commit_lsn = self._advance_lsn()
        return [change]

    def _new_row(self, table: Table, key: int) -> Row:
        random, size = self._random, _ValuePools.SIZE
        row = table.key_row(key)
        for name, values in self._pools[table.name].columns(self.schema_version):
            row[name] = values[int(random() * size)]
        return row

    def _updated(self, table: Table, row: Row) -> Row:
        """One or two columns change (a draw equal to the old value is drawn again: an update always changes
        something); now and then the partition-like column moves the row."""
        random, size = self._random, _ValuePools.SIZE
        updated = dict(row)
        pools = self._pools[table.name]
        columns = pools.columns(self.schema_version)
        for _ in range(1 + (random() < 0.3)):
            name, values = columns[int(random() * len(columns))]
            updated[name] = values[int(random() * size)]
        if random() < 0.15:
            updated[table.partition_column] = pools.values[table.partition_column][int(random() * size)]
        while updated == row:
            name, values = columns[int(random() * len(columns))]
            updated[name] = values[int(random() * size)]
        return updated

    def _new_key(self, table: Table) -> int:
        key = self._next_key[table.name]
        self._next_key[table.name] += 1
        return key

    def _reinsert_key(self, table: Table) -> int:
        deleted = self._deleted[table.name]
        if not deleted:
            return self._new_key(table)
        return deleted.pop(int(self._random() * len(deleted)))

    def _next_tx(self) -> int:
        self._tx_id += 1 + int(self._random() * 3)
        return self._tx_id

    def _tick(self) -> int:
        self._clock_us += 50 + int(self._random() * 5_000)
        return self._clock_us

    def _advance_lsn(self) -> int:
        self._lsn += 40 + int(self._random() * 400)
        return self._lsn


class _ValuePools:
    """Per column, a few hundred values drawn once from its generator: picking one later costs one draw."""

    SIZE = 512

    def __init__(self, table: Table, rng: random.Random) -> None:
        self.values = {col.name: [col.generate(rng) for _ in range(self.SIZE)]  # type: ignore[misc]
                       for col in table.value_columns(2)}
        self._by_version = {version: [(col.name, self.values[col.name]) for col in table.value_columns(version)]
                            for version in (1, 2)}

    def columns(self, version: int) -> list[tuple[str, list]]:
        return self._by_version[version]
