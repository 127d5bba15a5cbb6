"""Shard discovery: the stream's shards from ListShards (at most once per `describeShardInterval`), in an
order where every parent comes before its children, so one pass can finish a parent and start its children."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pipeline.sources.kinesis.client import Kinesis


@dataclass(frozen=True)
class Shard:
    shard_id: str
    parents: tuple[str, ...]
    closed: bool  # resharded: no new records arrive; its children carry on


class ShardDirectory:
    def __init__(self, kinesis: Kinesis, stream: str, interval_s: float) -> None:
        self.kinesis, self.stream, self.interval_s = kinesis, stream, interval_s
        self._listed_at = float("-inf")
        self._shards: list[Shard] = []

    def shards(self) -> list[Shard]:
        if time.monotonic() - self._listed_at >= self.interval_s:
            self._shards = _parents_first(self._list())
            self._listed_at = time.monotonic()
        return self._shards

    def _list(self) -> list[Shard]:
        found, params = [], {"StreamName": self.stream}
        while True:
            page = self.kinesis.call("list_shards", **params)
            for item in page["Shards"]:
                parents = tuple(p for p in (item.get("ParentShardId"), item.get("AdjacentParentShardId")) if p)
                found.append(Shard(item["ShardId"], parents, "EndingSequenceNumber" in item["SequenceNumberRange"]))
            if not page.get("NextToken"):
                return found
            params = {"NextToken": page["NextToken"]}


def _parents_first(shards: list[Shard]) -> list[Shard]:
    by_id = {shard.shard_id: shard for shard in shards}
    ordered: list[Shard] = []
    seen: set[str] = set()

    def visit(shard: Shard) -> None:
        if shard.shard_id in seen:
            return
        seen.add(shard.shard_id)
        for parent in shard.parents:
            if parent in by_id:
                visit(by_id[parent])
        ordered.append(shard)

    for shard in sorted(shards, key=lambda s: s.shard_id):
        visit(shard)
    return ordered
