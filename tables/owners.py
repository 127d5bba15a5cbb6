"""Which source table a lake table holds: two source tables never share one.

The naming rule (`tables/names.py`) can map two source tables to one lake table: `<db>.public.orders` and
`<db>.sales.orders` are both `<db>_orders` by default. Appended into one table their rows would mix (and the
mirror merge them by key), and in one batch the second append would be skipped as a batch the table already
holds. So each lake table records its source table, `pipeline.source = <db>.<schema>.<table>` (a table
property, set when the stage creates the table: `tables/append.py`); a table made before this existed has
none, and the first source table to land in it adopts it. Another source table mapping to it is refused
(`TableNameCollision`, a dead letter naming both and the fix), and lands once `names.*` gives it a name of its
own. A table's owner is asked once per process: it never changes.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Iterable

from tables.append import SOURCE_PROPERTY
from tables.names import LakeNames, SourceTable, UnmappableName

if TYPE_CHECKING:
    from tables.lake import LakeTable


class TableNameCollision(UnmappableName):
    """A source table whose lake table holds another source table."""

    error_class = "TableNameCollision"


class Owners:
    """The lake tables of one namespace and the source tables they hold, as the stage lands them."""

    def __init__(self, names: LakeNames, table: Callable[[str], LakeTable], reserved: str = "") -> None:
        """`reserved`: a table of the namespace no source table may land in (the dead letters)."""
        self.names = names
        self._table = table
        self._owners: dict[str, str] = {reserved: "the pipeline's dead letters"} if reserved else {}
        self._lock = threading.Lock()  # guards `_locks`
        self._locks: dict[str, threading.Lock] = {}  # a table's: a batch lands topics in threads, one claims it

    def claim(self, source: SourceTable) -> str:
        """The lake table `source` lands in, claimed for it. Raises `UnmappableName` when its name names no lake
        table, `TableNameCollision` when that table holds another source table."""
        name = self.names.of(source)
        with self._lock:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:  # a table's owner is looked up once; other tables' lookups go on meanwhile
            owner = self._owners.get(name)
            if owner is None:
                owner = self._owners[name] = self._stored_owner(name, str(source))
        if owner != str(source):
            raise TableNameCollision(
                f"source table {source} maps to lake table {name}, which holds source table {owner}: give one of "
                f"them a lake table of its own (names.with_schema = [\"{source.schema}\"] names tables "
                f"<db>_<schema>_<table>; or names.tables.\"{source}\" = \"<name>\"), then replay these dead "
                "letters (or for DMS files, re-deliver the files)")
        return name

    def claim_first(self, sources: Iterable[SourceTable], threads: int = 1) -> None:
        """Claim what is not claimed yet, each lake table by the first of `sources` to map to it: a batch lands
        its topics in threads, and of two that map to one new table, the first by name owns it, not the first to
        get there. The tables' owners are looked up `threads` at a time (a catalog load or two each, ~15 ms: 7 s
        of a 500-table batch one after another). Refusals are `claim`'s to say."""
        firsts: dict[str, SourceTable] = {}
        for source in sources:
            try:
                firsts.setdefault(self.names.of(source), source)
            except UnmappableName:
                pass
        unclaimed = [source for name, source in firsts.items() if name not in self._owners]
        with ThreadPoolExecutor(max(1, min(threads, len(unclaimed))), thread_name_prefix="owners") as pool:
            list(pool.map(self._claimed_or_refused, unclaimed))

    def _claimed_or_refused(self, source: SourceTable) -> None:
        try:
            self.claim(source)
        except UnmappableName:
            pass

    def _stored_owner(self, name: str, source: str) -> str:
        """The owner the table records; a table made before owners were recorded is adopted by `source`. A new
        table gets its owner when the stage creates it."""
        table = self._table(name)
        if not table.exists():
            return source
        owner = table.properties().get(SOURCE_PROPERTY)
        if owner is None:
            table.set_properties({SOURCE_PROPERTY: source})
            return source
        return owner
