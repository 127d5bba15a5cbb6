"""The `aws-kinesis` stream reader: GetRecords per shard, sequence numbers as offsets.

Spark 4.1 gives Python stream readers no read limit, so each `read` plans its own batch: per shard at most
`maxFetchRecordsPerShard` records and `maxFetchTimePerShardSec` seconds, stopping early once GetRecords says
the shard is caught up. The batch's end offset is the last sequence number read per shard; Spark checkpoints
it, and a batch replayed after a crash is read again between the same offsets (`readBetweenOffsets`), so
with an idempotent sink every record lands exactly once.

A parent shard (after a split or merge) is read to its end before its children start. A shard the offsets
name but the stream no longer has (expired after retention, or a recreated stream) is data loss: it fails
the query with `failOnDataLoss`, else it is logged and skipped. Expired iterators are renewed from the last
position; throttling is retried with backoff (`client.py`).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Iterator

import structlog
from botocore.exceptions import ClientError
from pyspark.sql.datasource import SimpleDataSourceStreamReader

from pipeline.sources.kinesis.client import Kinesis, error_code
from pipeline.sources.kinesis.kpl import deaggregate
from pipeline.sources.kinesis.options import SourceOptions
from pipeline.sources.kinesis.positions import Position, Positions, from_offset, to_offset
from pipeline.sources.kinesis.shards import Shard, ShardDirectory

log = structlog.get_logger(__name__)

Row = tuple[bytes, str, str, str, datetime, str]


class KinesisDataLoss(RuntimeError):
    """Records the checkpoint expects are gone; raised with `kinesis.failOnDataLoss=true`."""


class KinesisStreamReader(SimpleDataSourceStreamReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._kinesis: Kinesis | None = None
        self._directory: ShardDirectory | None = None

    # -- the Spark API -------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Every shard at the starting position; LATEST is pinned to now as AT_TIMESTAMP, so what a batch
        reads from it is a fixed range. Shards already closed hold nothing LATEST would read."""
        start = self.options.starting_position
        if start.kind == "TRIM_HORIZON":
            return to_offset({shard.shard_id: Position() for shard in self._shards()})
        at = start.timestamp if start.kind == "AT_TIMESTAMP" else time.time()
        return to_offset({shard.shard_id: Position(done=True) if start.kind == "LATEST" and shard.closed
                          else Position(start="AT_TIMESTAMP", at=at) for shard in self._shards()},
                         since=at if start.kind == "LATEST" else None)

    def read(self, start: dict[str, Any]) -> tuple[Iterator[Row], dict[str, Any]]:
        positions = from_offset(start)
        shards = self._shards()
        self._check_lost(positions, shards)
        rows: list[Row] = []
        for shard in shards:
            position = positions.setdefault(shard.shard_id, Position())  # new shards: from their first record
            parents_open = any(not positions.get(parent, Position(done=True)).done for parent in shard.parents)
            if position.done or parents_open:
                continue
            positions[shard.shard_id] = self._fetch(shard, position, rows)
        return iter(rows), to_offset(positions, start.get("since"))

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[Row]:
        """The records of a checkpointed batch, read again: each shard from its start up to its end position."""
        begun, rows = from_offset(start, end.get("since")), []
        closed = {shard.shard_id: shard.closed for shard in self._shards()}
        for shard_id, until in from_offset(end).items():
            position = begun.get(shard_id, Position())
            if position == until or position.done:
                continue
            self._fetch(Shard(shard_id, (), closed.get(shard_id, True)), position, rows, until)
        return iter(rows)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the checkpoint holds the offsets, and Kinesis keeps records until they expire."""

    # -- reading -------------------------------------------------------------------------------------

    def _fetch(self, shard: Shard, position: Position, rows: list[Row], until: Position | None = None) -> Position:
        """Read one shard from `position` into `rows`; return where it stopped. With `until`, read exactly up
        to that position (a replay); else up to the batch limits or until the shard is caught up."""
        options, kinesis = self.options, self._client()
        limit = None if until else options.max_fetch_records_per_shard
        deadline = (time.monotonic() + options.max_fetch_time_per_shard_s
                    if options.max_fetch_time_per_shard_s and not until else float("inf"))
        iterator, fetched, last_call = self._iterator(shard, position), 0, 0.0
        if iterator is None:
            return Position(done=True)  # lost (logged by `_lost`): nothing more to read there
        while iterator is not None:
            time.sleep(max(0.0, last_call + options.fetch_interval_s - time.monotonic()))
            wanted = options.records_per_fetch if limit is None else min(options.records_per_fetch, limit - fetched)
            try:
                response = kinesis.call("get_records", ShardIterator=iterator, Limit=wanted)
            except ClientError as exc:
                if error_code(exc) != "ExpiredIteratorException":
                    raise
                log.info("kinesis.iterator_expired", shard=shard.shard_id, position=position.to_json())
                iterator = self._iterator(shard, position)
                continue
            last_call = time.monotonic()
            for record in response["Records"]:
                if until is not None and position.reached(until):
                    return position
                rows.extend(self._rows(record, shard.shard_id))
                position, fetched = Position(after=record["SequenceNumber"]), fetched + 1
            iterator = response.get("NextShardIterator")
            caught_up = not response["Records"] and not response.get("MillisBehindLatest")
            if iterator is None or (caught_up and shard.closed):
                return Position(done=True)  # a closed shard read to its end
            if (until is not None and position.reached(until)) or (until is None and caught_up):
                return position
            if (limit is not None and fetched >= limit) or time.monotonic() >= deadline:
                return position
        return position

    def _iterator(self, shard: Shard, position: Position) -> str | None:
        try:
            return self._client().call("get_shard_iterator", StreamName=self.options.stream_name,
                                       ShardId=shard.shard_id, **position.iterator_args())["ShardIterator"]
        except ClientError as exc:
            if error_code(exc) not in ("ResourceNotFoundException", "InvalidArgumentException"):
                raise
            self._lost(shard.shard_id, position, str(exc))
            return None

    def _rows(self, record: dict[str, Any], shard_id: str) -> list[Row]:
        arrived = record["ApproximateArrivalTimestamp"]
        arrived = arrived if isinstance(arrived, datetime) else datetime.fromtimestamp(arrived, timezone.utc)
        return [(user.data, self.options.stream_name, user.partition_key, record["SequenceNumber"], arrived, shard_id)
                for user in deaggregate(record["Data"], record["PartitionKey"])]

    # -- shards and data loss ------------------------------------------------------------------------

    def _check_lost(self, positions: Positions, shards: list[Shard]) -> None:
        """Shards the stream no longer lists leave the offset (they expired): silently when they were read
        to their end, as data loss when not."""
        present = {shard.shard_id for shard in shards}
        for shard_id, position in list(positions.items()):
            if shard_id in present:
                continue
            if not position.done:
                self._lost(shard_id, position, "the stream no longer has this shard (expired or stream recreated)")
            del positions[shard_id]

    def _lost(self, shard_id: str, position: Position, reason: str) -> None:
        message = (f"stream {self.options.stream_name} shard {shard_id}: records after {position.to_json()} "
                   f"cannot be read: {reason}")
        if self.options.fail_on_data_loss:
            raise KinesisDataLoss(message + "; set kinesis.failOnDataLoss=false to skip what is gone and go on")
        log.warning("kinesis.data_loss", stream=self.options.stream_name, shard=shard_id, reason=reason)

    def _shards(self) -> list[Shard]:
        if self._directory is None:
            self._directory = ShardDirectory(self._client(), self.options.stream_name,
                                             self.options.describe_shard_interval_s)
        return self._directory.shards()

    def _client(self) -> Kinesis:
        if self._kinesis is None:
            self._kinesis = Kinesis(self.options.client)
        return self._kinesis
