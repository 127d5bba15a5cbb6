"""Per-shard read positions: the offsets of the `aws-kinesis` source, as Spark checkpoints them.

A shard's position is where its next read starts: before its first record (TRIM_HORIZON, or AT_TIMESTAMP for
a query that started there or at LATEST), after a sequence number, or done (a closed shard read to its end,
which lets its children start). The offset is `{"shards": {shard id: position}}`, and for a query that
started at LATEST `"since"`: the time LATEST was pinned to, carried along so that a first batch replayed
after a crash (Spark asks for the initial offset again, which would pin a later time) starts where it did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Position:
    after: str | None = None  # the last sequence number read
    start: str = "TRIM_HORIZON"  # before any record was read: TRIM_HORIZON or AT_TIMESTAMP
    at: float | None = None  # AT_TIMESTAMP: epoch seconds
    done: bool = False

    def iterator_args(self) -> dict[str, Any]:
        """GetShardIterator's arguments for reading on from here."""
        if self.after is not None:
            return {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": self.after}
        if self.start == "AT_TIMESTAMP":
            return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": self.at}
        return {"ShardIteratorType": "TRIM_HORIZON"}

    def reached(self, end: Position) -> bool:
        """Whether a replay from an earlier position has read up to `end` (a checkpointed batch end)."""
        if end.done:
            return self.done
        return end.after is None or (self.after is not None and int(self.after) >= int(end.after))

    def to_json(self) -> dict[str, Any]:
        if self.done:
            return {"done": True}
        if self.after is not None:
            return {"after": self.after}
        return {"start": self.start, "at": self.at} if self.at is not None else {"start": self.start}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        if data.get("done"):
            return cls(done=True)
        if "after" in data:
            return cls(after=str(data["after"]))
        return cls(start=data.get("start", "TRIM_HORIZON"), at=data.get("at"))


Positions = dict[str, Position]


def to_offset(positions: Positions, since: float | None = None) -> dict[str, Any]:
    offset: dict[str, Any] = {"shards": {shard: position.to_json() for shard, position in sorted(positions.items())}}
    return offset if since is None else {**offset, "since": since}


def from_offset(offset: dict[str, Any], since: float | None = None) -> Positions:
    """The positions of `offset`; with `since`, AT_TIMESTAMP starts are pinned to it (see the module doc)."""
    positions = {shard: Position.from_json(data) for shard, data in offset.get("shards", {}).items()}
    if since is None:
        return positions
    return {shard: Position(start=p.start, at=since) if p.start == "AT_TIMESTAMP" and p.after is None and not p.done
            else p for shard, p in positions.items()}
