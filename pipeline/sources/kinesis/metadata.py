"""The metadata committer: where each executor records how far it read its shard in a batch.

The driver cannot know where a batch ends on a shard before an executor has read it, so, as in the seed
connector, the executor that reads shard s in batch n records `(n, s) -> end position` when its read is done.
The driver starts batch n + 1 from those ends, and a task or batch run again (a retry, a second evaluation of
the batch, a replay after a crash) finds the record and reads exactly up to it: the same records again.

Two stores, as in the seed: `HDFS` (files under `kinesis.metadataPath`: a local path, `s3://` or `s3a://`)
and `DYNAMODB` (`kinesis.dynamodb.tableName`). Every call is retried `kinesis.metadataNumRetries` times with
backoff from `metadataRetryIntervalsMs` up to `metadataMaxRetryIntervalMs`; then `MetadataUnavailable` names
the store and its address. The last `kinesis.minBatchesToRetain` batches are kept.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, TypeVar

import boto3
import structlog
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from pipeline.sources.kinesis.options import MetadataOptions
from pipeline.sources.kinesis.positions import Position

log = structlog.get_logger(__name__)

T = TypeVar("T")
# the store's own calls fail fast; the committer's retries decide how long an outage is waited out
BOTO_CONFIG = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30)


@functools.cache
def store_client(service: str, region: str, endpoint_url: str | None) -> Any:
    """One S3 or DynamoDB client per process and endpoint, for the stores: every shard's read makes a store, and
    making a client loads botocore's models anew (0.04-0.1 CPU-s). A boto3 client may be used by any thread."""
    return boto3.Session(region_name=region).client(service, endpoint_url=endpoint_url or None, config=BOTO_CONFIG)


class MetadataUnavailable(RuntimeError):
    """The metadata store kept failing after every retry; names the store, its address and the last error."""


@dataclass(frozen=True)
class ShardEnd:
    """Where a shard's read in one batch ended, and how many Kinesis records it read."""

    end: Position
    records: int

    def to_json(self) -> dict[str, Any]:
        return {"end": self.end.to_json(), "records": self.records}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardEnd:
        return cls(Position.from_json(data["end"]), int(data.get("records", 0)))


class MetadataStore(Protocol):
    """One backend: records keyed by (batch, shard id) of one stream."""

    address: str

    def get(self, batch: int, shard_id: str) -> dict[str, Any] | None: ...

    def put(self, batch: int, shard_id: str, record: dict[str, Any]) -> None: ...

    def batch(self, batch: int) -> dict[str, dict[str, Any]]: ...

    def purge(self, below: int) -> int: ...


class MetadataCommitter:
    def __init__(self, options: MetadataOptions) -> None:
        self.options = options
        self.store = _store(options)

    def get(self, batch: int, shard_id: str) -> ShardEnd | None:
        found = self._retried("read", lambda: self.store.get(batch, shard_id))
        return ShardEnd.from_json(found) if found is not None else None

    def put(self, batch: int, shard_id: str, end: ShardEnd) -> None:
        self._retried("write", lambda: self.store.put(batch, shard_id, end.to_json()))

    def ends(self, batch: int) -> dict[str, ShardEnd]:
        """Every shard's recorded end in `batch`."""
        found = self._retried("read", lambda: self.store.batch(batch))
        return {shard: ShardEnd.from_json(record) for shard, record in found.items()}

    def retain_from(self, batch: int) -> None:
        """Forget batches before the last `minBatchesToRetain` ones up to `batch`."""
        below = batch - self.options.min_batches_to_retain + 1
        if below > 0:
            dropped = self._retried("purge", lambda: self.store.purge(below))
            if dropped:
                log.info("kinesis.metadata_purged", store=self.store.address, below_batch=below, records=dropped)

    def _retried(self, what: str, call: Callable[[], T]) -> T:
        options, delay = self.options, self.options.retry_interval_s
        for attempt in range(options.num_retries + 1):
            try:
                return call()
            except (OSError, BotoCoreError, ClientError) as exc:
                if attempt == options.num_retries:
                    raise MetadataUnavailable(
                        f"the Kinesis metadata store {self.store.address} failed to {what} after {attempt + 1} "
                        f"attempts: {exc}; check that it is reachable and writable (kinesis.metadataPath, "
                        "kinesis.dynamodb.tableName, kinesis.metadataEndpointUrl)") from exc
                log.warning("kinesis.metadata_retry", store=self.store.address, action=what, attempt=attempt + 1,
                            wait_s=delay, error=str(exc))
                time.sleep(delay)
                delay = min(options.max_retry_interval_s, max(delay * 2, 0.05))
        raise AssertionError("unreachable")


def _store(options: MetadataOptions) -> MetadataStore:
    if options.committer_type == "DYNAMODB":
        from pipeline.sources.kinesis.metadata_dynamodb import DynamoDbStore

        return DynamoDbStore(options)
    from pipeline.sources.kinesis.metadata_files import file_store

    return file_store(options)
