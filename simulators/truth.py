"""The ground truth: every change the source committed, in commit order, in a local SQLite file.

It records what the source did, not what was delivered, so a change lost or duplicated downstream shows up
when the lakehouse is compared with it. It answers "table T as of source time t" and "the history of key K".
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import orjson

from simulators.source import Change
from simulators.tables import Table

_SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (
    commit_order INTEGER PRIMARY KEY,    -- the rowid: the log is append-only, so rowids follow commit order
    table_name   TEXT    NOT NULL,   -- <database>.<schema>.<table>
    row_key      INTEGER NOT NULL,
    op           TEXT    NOT NULL,   -- r, c, u, d
    row_image    TEXT    NOT NULL,   -- JSON: the after-image; for a delete, the last image
    commit_us    INTEGER NOT NULL,   -- source commit time, microseconds since the epoch
    tx_id        INTEGER NOT NULL,
    tx_position  INTEGER NOT NULL,   -- 1-based position of the change in its transaction
    lsn          INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tables (  -- what each table is, so a comparison needs no simulator code or seed
    table_name   TEXT NOT NULL,      -- <database>.<schema>.<table>, once (a truth holds one run)
    key_columns  TEXT NOT NULL,      -- JSON list: the primary key's columns, empty for a table without one
    column_types TEXT NOT NULL       -- JSON object: column -> its Avro type (with Kafka Connect's annotations)
);
"""
# Built once over the recorded log, not maintained on every append: each append would be a random write into
# this B-tree, costing more than the append itself, while one sorted build afterwards costs a fraction of that.
_KEY_INDEX = "CREATE INDEX IF NOT EXISTS changes_by_key ON changes (table_name, row_key, commit_order);"
_INSERT = ("INSERT INTO changes (table_name, row_key, op, row_image, commit_us, tx_id, tx_position, lsn) "
           "VALUES (?,?,?,?,?,?,?,?)")


def _row_json(image: dict[str, Any]) -> str:
    """A row image as JSON text: orjson's, ~0.4 µs a row where `json` took ~4 µs, a tenth of the simulator's time
    per event (every change is recorded)."""
    return orjson.dumps(image, default=_text).decode()


def _text(value: Any) -> str:
    """A value JSON has no type for: bytes as hex, a decimal as its text."""
    return value.hex() if isinstance(value, bytes) else str(value)


def _rows(c: Change) -> Iterable[tuple]:
    if c.op != "t":
        return ((c.table.qualified, c.key, c.op, _row_json(c.image), c.commit_us, c.tx_id, c.tx_position, c.lsn),)
    return ((c.table.qualified, key, "d", _row_json(row), c.commit_us, c.tx_id, c.tx_position, c.lsn)
            for key, row in c.truncated)


@dataclass(frozen=True)
class TruthChange:
    table: str
    key: int
    op: str
    row: dict[str, Any]
    commit_us: int
    tx_id: int
    tx_position: int
    lsn: int


class TruthStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._connections = threading.local()  # a connection per thread: `verify` reads tables in threads
        self._db.executescript(_SCHEMA)
        self._indexed = False

    @property
    def _db(self) -> sqlite3.Connection:
        """The calling thread's connection (SQLite's may not cross threads)."""
        db = getattr(self._connections, "db", None)
        if db is None:
            db = self._connections.db = sqlite3.connect(self.path)
        return db

    def define(self, tables: Iterable[Table]) -> None:
        """Record each table's key and column types (the evolution column's too)."""
        with self._db:
            self._db.executemany("INSERT INTO tables VALUES (?,?,?)", (
                (t.qualified, orjson.dumps(list(t.keys)).decode(),
                 orjson.dumps({c.name: c.avro_type for c in (*t.columns, t.evolution)}).decode()) for t in tables))

    def column_types(self, table: str) -> dict[str, Any]:
        """`table`'s columns and their Avro types; empty for a truth recorded before tables were."""
        found = self._db.execute("SELECT column_types FROM tables WHERE table_name = ?", (table,)).fetchone()
        return orjson.loads(found[0]) if found else {}

    def key_columns(self, table: str) -> list[str]:
        """`table`'s primary key; empty when it has none (or the truth predates recorded tables)."""
        found = self._db.execute("SELECT key_columns FROM tables WHERE table_name = ?", (table,)).fetchone()
        return orjson.loads(found[0]) if found else []

    def record(self, changes: Iterable[Change]) -> None:
        """Append committed changes in commit order, in one SQLite transaction; a truncate as a delete of each
        row it removed."""
        with self._db:
            self._db.executemany(_INSERT, (row for c in changes for row in _rows(c)))

    def index(self) -> None:
        """Build the per-key index the queries use: once recording is done (the queries ask for it too)."""
        if not self._indexed:
            self._db.executescript(_KEY_INDEX)
            self._indexed = True

    def state_at(self, table: str, commit_us: int | None = None) -> dict[int, dict[str, Any]]:
        """The rows `table` held at source time `commit_us` (now, when None): key -> row."""
        self.index()
        limit = "" if commit_us is None else "AND commit_us <= :t"
        rows = self._db.execute(
            f"""SELECT row_key, op, row_image FROM changes
                WHERE commit_order IN (SELECT max(commit_order) FROM changes
                                       WHERE table_name = :table {limit} GROUP BY row_key)""",
            {"table": table, "t": commit_us},
        )
        return {key: orjson.loads(image) for key, op, image in rows if op != "d"}

    def history(self, table: str, key: int) -> list[TruthChange]:
        """Every committed change of one key, oldest first."""
        self.index()
        rows = self._db.execute(
            "SELECT op, row_image, commit_us, tx_id, tx_position, lsn FROM changes "
            "WHERE table_name = ? AND row_key = ? ORDER BY commit_order", (table, key))
        return [TruthChange(table, key, *row[:1], orjson.loads(row[1]), *row[2:]) for row in rows]

    def versions(self, table: str, tracked: list[str], names: tuple[str, str, str, str]) -> dict[tuple, dict[str, Any]]:
        """The SCD2 versions of `table`'s keys, (key, number) -> row: a run of a key's changes whose `tracked`
        columns and deletion stay the same is one version, holding its newest change's values. `names` are the
        columns of the version's number, start and end (ms of source time), and deletion."""
        number, start, end, deleted = names
        self.index()
        rows = self._db.execute("SELECT row_key, op, row_image, commit_us FROM changes WHERE table_name = ? "
                                "ORDER BY row_key, commit_order", (table,))
        versions: dict[tuple, dict[str, Any]] = {}
        last: tuple | None = None
        for key, op, image, commit_us in rows:
            row = orjson.loads(image)
            signature = (key, op == "d", *[row.get(c) for c in tracked])
            if last is not None and signature == last[1]:
                versions[last[0]].update(row)
                continue
            if last is not None and last[0][0] == key:
                versions[last[0]][end] = commit_us // 1000
            at = (key, last[0][1] + 1 if last is not None and last[0][0] == key else 1)
            versions[at] = {**row, number: at[1], start: commit_us // 1000, end: None, deleted: op == "d"}
            last = (at, signature)
        return versions

    def changes(self) -> list[TruthChange]:
        """Every change, in commit order (for verification of small runs)."""
        rows = self._db.execute("SELECT table_name, row_key, op, row_image, commit_us, tx_id, tx_position, lsn "
                                "FROM changes ORDER BY commit_order")
        return [TruthChange(t, k, op, orjson.loads(image), *rest) for t, k, op, image, *rest in rows]

    def tables(self) -> list[str]:
        """The `<db>.<schema>.<table>` names the truth holds changes of."""
        self.index()
        return [name for (name,) in self._db.execute("SELECT DISTINCT table_name FROM changes ORDER BY 1")]

    def count(self) -> int:
        return self._db.execute("SELECT count(*) FROM changes").fetchone()[0]

    def close(self) -> None:
        """The calling thread's connection; another thread's closes when that thread ends."""
        self._db.close()
        del self._connections.db
