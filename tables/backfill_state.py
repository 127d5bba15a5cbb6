"""Whether a changelog table's snapshot is being backfilled (`pipeline backfill`), kept with the table.

A mirror built while the snapshot is half landed would merge a key's streamed changes before its snapshot row,
and a streamed update that did not carry an unchanged TOASTed value takes it from the key's earlier change or
the mirror's row: neither is there yet. So `mirror` leaves such a table alone until the backfill is done, and
the backfill's own last step mirrors it, with the whole snapshot beside the stream.
"""

from __future__ import annotations

import json
from typing import Mapping

BACKFILL_PROPERTY = "pipeline.backfill"  # JSON: {"state": "running" | "done", ...}
RUNNING, DONE = "running", "done"
# Facts: the table's rows are one pass of snapshot rows from the first key (no restart, no other writer's rows),
# and the changelog commit the backfill finished at
KEYS_ONCE, THROUGH = "keys_once", "through"


def backfill_property(state: str, **facts: object) -> dict[str, str]:
    """The table property that records a backfill in `state`, with `facts` (rows, pages, when)."""
    return {BACKFILL_PROPERTY: json.dumps({"state": state, **facts})}


def backfill_state(properties: Mapping[str, str]) -> dict[str, object]:
    """The backfill a table records: empty when none ran (or the record is unreadable)."""
    try:
        found = json.loads(properties.get(BACKFILL_PROPERTY) or "{}")
    except json.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}


def backfill_running(properties: Mapping[str, str]) -> bool:
    """Whether the table's backfill has begun and not finished."""
    return backfill_state(properties).get("state") == RUNNING


def one_pass(properties: Mapping[str, str] | None, restart: bool) -> bool:
    """Whether a backfill starting now lands one pass from the first key, so far: into a new changelog table
    (`properties` None), or resuming a pass that was one (a restart lands the keys again)."""
    return properties is None or (not restart and backfill_state(properties).get(KEYS_ONCE) is True)


def keys_once(properties: Mapping[str, str], through: int) -> bool:
    """Whether each key of the changelog table, as of its commit `through`, has one change, a snapshot row knowing
    every column: its finished backfill says so of the commit it finished at, and nothing landed since. Its first
    mirror build then needs no ordering of a key's changes (`tables/first_build.py`)."""
    state = backfill_state(properties)
    return state.get("state") == DONE and state.get(KEYS_ONCE) is True and state.get(THROUGH) == str(through)
