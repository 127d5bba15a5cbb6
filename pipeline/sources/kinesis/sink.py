"""The `aws-kinesis` sink: rows with `data` (binary or string) and `partitionKey` columns become Kinesis records.

Each task sends PutRecords requests within the API's limits (500 records, 5 MiB per request, 1 MiB per record
counting its partition key) and retries only the entries a response marks failed (throttled shards), with the
client's backoff; what is buffered is flushed when the task's rows end. Kinesis has no idempotent put, so a
retried task or batch can write a record twice: the sink is at least once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator

import structlog
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from pipeline.sources.kinesis.client import Kinesis, KinesisUnavailable
from pipeline.sources.kinesis.options import KinesisOptionError, SinkOptions

log = structlog.get_logger(__name__)

MAX_RECORDS = 500
MAX_REQUEST_BYTES = 5 * 1024 * 1024
MAX_RECORD_BYTES = 1024 * 1024


@dataclass
class Sent(WriterCommitMessage):
    records: int


def check_schema(schema: StructType) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    if not isinstance(fields.get("data"), (BinaryType, StringType)):
        raise KinesisOptionError("the aws-kinesis sink needs a `data` column of type binary or string; "
                                 f"the query has {schema.simpleString()}")
    if not isinstance(fields.get("partitionKey"), StringType):
        raise KinesisOptionError("the aws-kinesis sink needs a string `partitionKey` column; "
                                 f"the query has {schema.simpleString()}")


class KinesisWriter(DataSourceWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> Sent:
        batch = _PutRecords(Kinesis(self.options.client), self.options)
        for row in iterator:
            batch.add(row["data"], row["partitionKey"])
        batch.flush()
        return Sent(batch.sent)


class KinesisStreamWriter(KinesisWriter, DataSourceStreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        log.info("kinesis.sink.batch", stream=self.options.stream_name, batch=batchId,
                 records=sum(m.records for m in messages if isinstance(m, Sent)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning("kinesis.sink.aborted", stream=self.options.stream_name, batch=batchId)


class _PutRecords:
    """The buffer of one task: filled up to a request's limits, then sent; failed entries are sent again."""

    def __init__(self, kinesis: Kinesis, options: SinkOptions) -> None:
        self.kinesis, self.options = kinesis, options
        self.entries: list[dict[str, Any]] = []
        self.size = 0
        self.sent = 0

    def add(self, data: bytes | bytearray | str | None, partition_key: str | None) -> None:
        if data is None or not partition_key:
            raise ValueError("aws-kinesis sink: a row has a null `data` or an empty `partitionKey`; "
                             "filter such rows out or give them a value")
        body = data.encode() if isinstance(data, str) else bytes(data)
        size = len(body) + len(partition_key.encode())
        if size > MAX_RECORD_BYTES:
            raise ValueError(f"aws-kinesis sink: a record of {size} bytes (data + partition key {partition_key!r}) "
                             f"is over Kinesis's {MAX_RECORD_BYTES} byte limit")
        if len(self.entries) == MAX_RECORDS or self.size + size > MAX_REQUEST_BYTES:
            self.flush()
        self.entries.append({"Data": body, "PartitionKey": partition_key})
        self.size += size

    def flush(self) -> None:
        """Send the buffer; resend only the entries a response marks failed, with backoff, until all are in."""
        pending, delay, attempt = self.entries, self.options.client.retry_interval_s, 0
        while pending:
            response = self.kinesis.call("put_records", StreamName=self.options.stream_name, Records=pending)
            failed = [entry for entry, result in zip(pending, response["Records"]) if "ErrorCode" in result]
            self.sent += len(pending) - len(failed)
            if failed:
                attempt += 1
                if attempt > self.options.client.num_retries:
                    raise KinesisUnavailable(f"Kinesis kept refusing {len(failed)} records of stream "
                                             f"{self.options.stream_name} after {attempt} tries")
                log.warning("kinesis.sink.retry", failed=len(failed), attempt=attempt, wait_s=delay)
                time.sleep(delay)
                delay = min(self.options.client.max_retry_interval_s, max(delay * 2, 0.05))
            pending = failed
        self.entries, self.size = [], 0
