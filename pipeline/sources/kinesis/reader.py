"""The `aws-kinesis` stream reader: one input partition per readable shard, each read in an executor.

The driver plans (`planner.py`): an offset names a batch and each shard's start in it. Spark hands every
partition (batch, shard, start) to an executor, which reads the shard (`shard_reader.py`) and records where it
ended in the metadata store (`metadata.py`); the next batch starts there. A batch replayed after a crash is
planned from its checkpointed offset, so it has the same partitions, and each finds its recorded end and
reads exactly the same records: with an idempotent sink every record lands exactly once. Speculative
execution must stay off (Spark's default), as for the seed: two attempts of one shard's task could both read.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from pipeline.sources.kinesis.options import SourceOptions
from pipeline.sources.kinesis.planner import BatchPlanner
from pipeline.sources.kinesis.positions import BatchOffset
from pipeline.sources.kinesis.shard_reader import ShardPartition, read_partition


class KinesisStreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner: BatchPlanner | None = None  # driver only: created on first use, never sent to executors

    def initialOffset(self) -> dict[str, Any]:
        return self._plan().initial().to_json()

    def latestOffset(self) -> dict[str, Any]:
        return self._plan().latest().to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """The batch ending at `end`, from `end` alone (its starts; `start` is the batch before). Spark also calls
        this with start == end on a restart to say where the query was: that batch's partitions are ignored."""
        offset = BatchOffset.from_json(end)
        self._plan().planned(offset)
        return [ShardPartition(offset.batch, shard, offset.shards[shard], shard in offset.closed)
                for shard in offset.to_read()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardPartition)
        return read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark is done with the batches up to `end`: keep the last `minBatchesToRetain` batches' metadata."""
        self._plan().metadata.retain_from(BatchOffset.from_json(end).batch)

    def _plan(self) -> BatchPlanner:
        if self._planner is None:
            self._planner = BatchPlanner(self.options)
        return self._planner

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_planner": None}
