"""PutRecords batching for one stream, shared by the sink and the simulator.

Records are buffered up to a request's limits (500 records, 5 MiB, 1 MiB per record counting its partition
key) and sent; only the entries a response marks failed (throttled shards) are sent again, with the client's
backoff, until all are in or the retries run out.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from pipeline.sources.kinesis.client import Kinesis, KinesisUnavailable

log = structlog.get_logger(__name__)

MAX_RECORDS = 500
MAX_REQUEST_BYTES = 5 * 1024 * 1024
MAX_RECORD_BYTES = 1024 * 1024


class RecordBatcher:
    def __init__(self, kinesis: Kinesis, stream: str) -> None:
        self.kinesis, self.stream = kinesis, stream
        self.entries: list[dict[str, Any]] = []
        self.size = 0
        self.sent = 0

    def add(self, data: bytes, partition_key: str) -> None:
        size = len(data) + len(partition_key.encode())
        if size > MAX_RECORD_BYTES:
            raise ValueError(f"a record of {size} bytes (data + partition key {partition_key!r}) is over "
                             f"Kinesis's {MAX_RECORD_BYTES} byte limit (stream {self.stream})")
        if len(self.entries) == MAX_RECORDS or self.size + size > MAX_REQUEST_BYTES:
            self.flush()
        self.entries.append({"Data": data, "PartitionKey": partition_key})
        self.size += size

    def flush(self) -> None:
        """Send the buffer; resend only the failed entries, with backoff."""
        options = self.kinesis.options
        pending, delay, attempt = self.entries, options.retry_interval_s, 0
        while pending:
            response = self.kinesis.call("put_records", StreamName=self.stream, Records=pending)
            failed = [entry for entry, result in zip(pending, response["Records"]) if "ErrorCode" in result]
            self.sent += len(pending) - len(failed)
            if failed:
                attempt += 1
                if attempt > options.num_retries:
                    raise KinesisUnavailable(f"Kinesis at {self.kinesis.address} kept refusing {len(failed)} "
                                             f"records of stream {self.stream} after {attempt} tries")
                log.warning("kinesis.put_retry", stream=self.stream, failed=len(failed), attempt=attempt, wait_s=delay)
                time.sleep(delay)
                delay = min(options.max_retry_interval_s, max(delay * 2, 0.05))
            pending = failed
        self.entries, self.size = [], 0
