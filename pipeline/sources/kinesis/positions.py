"""Per-shard read positions and the batch offsets of the `aws-kinesis` source, as Spark checkpoints them.

A shard's position is where a read starts: before its first record (TRIM_HORIZON, or AT_TIMESTAMP for a query
that started there or at LATEST), after a sequence number, or done (a closed shard read to its end, which lets
its children start).

As in the seed connector, an offset names a batch and where each shard's read *starts* in it; where a read
ended is only known once an executor has read the shard, and is kept in the metadata store under the batch's
number (`metadata.py`). The offset is `{"batch": n, "shards": {shard id: position}, "closed": [...],
"waiting": [...]}`: `closed` are the shards closed when the batch was planned (caught up means done),
`waiting` the children whose parents were not done yet (not read in this batch). All of it is fixed when the
batch is planned, so a batch replayed from its checkpointed offset plans the same partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class OffsetFormatError(ValueError):
    """A checkpointed offset the reader cannot use; names what it found and what to do."""


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
        """Whether a replay from an earlier position has read up to `end` (a recorded end of a batch)."""
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


@dataclass(frozen=True)
class BatchOffset:
    """A planned batch: its number and, per shard, where its read starts."""

    batch: int
    shards: Positions
    closed: frozenset[str] = field(default_factory=frozenset)
    waiting: frozenset[str] = field(default_factory=frozenset)

    def to_read(self) -> list[str]:
        """The shards this batch reads: not done and not waiting for a parent, in shard order."""
        return [s for s, p in sorted(self.shards.items()) if not p.done and s not in self.waiting]

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "shards": {s: p.to_json() for s, p in sorted(self.shards.items())},
                "closed": sorted(self.closed), "waiting": sorted(self.waiting)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchOffset:
        if "batch" not in data:
            raise OffsetFormatError(
                f"the aws-kinesis offset {data} has no batch number: it was checkpointed by the earlier driver-side "
                "reader, whose offsets were end positions; start a new checkpoint (to go on where that one ended, "
                "set kinesis.startingPosition to AT_TIMESTAMP of its last batch)")
        return cls(int(data["batch"]), {s: Position.from_json(p) for s, p in data.get("shards", {}).items()},
                   frozenset(data.get("closed", ())), frozenset(data.get("waiting", ())))
