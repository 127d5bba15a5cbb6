"""Batch planning on the driver: where the next batch starts on each shard, and whether there is anything to read.

The next batch starts where the last planned batch ended: the ends its executors recorded in the metadata
store, or its own start on a shard with no record (a batch whose rows were never read read nothing). Shards
ListShards adds start at their first record; a parent is read to its end before its children start (children
wait in the offset). Shards the stream no longer lists leave the offset: silently when read to their end, as
data loss when not. Before a new batch is planned, `checkNewRecordThreads` threads ask each readable shard
for one record (the seed's new-record check); when none has any, the last offset is returned again and Spark
plans no batch, so a query that is caught up runs no empty batches.

Spark tells the reader the last planned offset through `partitions` (also on a restart, before the first new
batch); with none, the query is new and starts at `initial`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from botocore.exceptions import ClientError

from pipeline.sources.kinesis.client import Kinesis, error_code
from pipeline.sources.kinesis.metadata import MetadataCommitter
from pipeline.sources.kinesis.options import SourceOptions
from pipeline.sources.kinesis.positions import BatchOffset, Position, Positions
from pipeline.sources.kinesis.shard_reader import lost
from pipeline.sources.kinesis.shards import Shard, ShardDirectory


class BatchPlanner:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.kinesis = Kinesis(options.client)
        self.directory = ShardDirectory(self.kinesis, options.stream_name, options.describe_shard_interval_s)
        self.metadata = MetadataCommitter(options.metadata)
        self._initial: BatchOffset | None = None
        self._last: BatchOffset | None = None
        self._ended: tuple[int, Positions] | None = None  # the last batch's ends, read once from the store

    def initial(self) -> BatchOffset:
        """Batch 0 at the starting position; LATEST is pinned to now as AT_TIMESTAMP, so the batch reads a fixed
        range. Shards already closed hold nothing LATEST would read."""
        if self._initial is None:
            start, shards = self.options.starting_position, self.directory.shards()
            if start.kind == "TRIM_HORIZON":
                positions = {shard.shard_id: Position() for shard in shards}
            else:
                at = start.timestamp if start.kind == "AT_TIMESTAMP" else time.time()
                positions = {shard.shard_id: Position(done=True) if start.kind == "LATEST" and shard.closed
                             else Position(start="AT_TIMESTAMP", at=at) for shard in shards}
            self._initial = self._offset(0, positions, shards)
        return self._initial

    def planned(self, offset: BatchOffset) -> None:
        """Spark planned (or, on a restart, had planned) a batch ending at `offset`."""
        self._last = offset

    def latest(self) -> BatchOffset:
        """The next batch, or the last one again when no shard has anything new."""
        last = self._last or self.initial()
        shards = self.directory.shards()
        offset = self._offset(last.batch + 1, self._reconciled(self._ends(last), shards), shards)
        checked: dict[str, tuple[bool, bool]] = {}
        while unchecked := [s for s in offset.to_read() if s not in checked]:
            checked |= self._check(offset, unchecked)
            finished = {s: Position(done=True) for s in unchecked if checked[s][1]}
            if finished:  # their children may read in this batch: they are checked in the next round
                offset = self._offset(offset.batch, {**offset.shards, **finished}, shards)
        return offset if any(has for has, _ in checked.values()) else last

    def _ends(self, last: BatchOffset) -> Positions:
        """Where `last` ended per shard: recorded ends, else its starts."""
        if self._ended is None or self._ended[0] != last.batch:
            ends = self.metadata.ends(last.batch)
            self._ended = (last.batch, {**last.shards, **{s: e.end for s, e in ends.items() if s in last.shards}})
        return dict(self._ended[1])

    def _reconciled(self, positions: Positions, shards: list[Shard]) -> Positions:
        listed = {shard.shard_id for shard in shards}
        for shard_id, position in list(positions.items()):
            if shard_id not in listed:
                if not position.done:
                    lost(self.options, shard_id, position, "the stream no longer has this shard (expired or "
                                                          "stream recreated)")
                del positions[shard_id]
        for shard in shards:
            positions.setdefault(shard.shard_id, Position())  # new shards: from their first record
        return positions

    def _offset(self, batch: int, positions: Positions, shards: list[Shard]) -> BatchOffset:
        def parents_done(shard: Shard) -> bool:
            return all(positions.get(parent, Position(done=True)).done for parent in shard.parents)

        return BatchOffset(batch, positions, closed=frozenset(s.shard_id for s in shards if s.closed),
                           waiting=frozenset(s.shard_id for s in shards if not parents_done(s)))

    def _check(self, offset: BatchOffset, shard_ids: list[str]) -> dict[str, tuple[bool, bool]]:
        """Per shard: (has a record after its position, is a closed shard read to its end)."""
        if not shard_ids:
            return {}
        with ThreadPoolExecutor(min(self.options.check_new_record_threads, len(shard_ids))) as pool:
            found = pool.map(lambda s: self._has_records(s, offset.shards[s], s in offset.closed), shard_ids)
            return dict(zip(shard_ids, found))

    def _has_records(self, shard_id: str, position: Position, closed: bool) -> tuple[bool, bool]:
        try:
            iterator = self.kinesis.call("get_shard_iterator", StreamName=self.options.stream_name,
                                         ShardId=shard_id, **position.iterator_args())["ShardIterator"]
        except ClientError as exc:
            if error_code(exc) not in ("ResourceNotFoundException", "InvalidArgumentException"):
                raise
            return True, False  # the executor's read meets it and reports the loss with its position
        response = self.kinesis.call("get_records", ShardIterator=iterator, Limit=1)
        has = bool(response["Records"]) or bool(response.get("MillisBehindLatest"))
        ended = response.get("NextShardIterator") is None or (closed and not has)
        return has, ended and not has
