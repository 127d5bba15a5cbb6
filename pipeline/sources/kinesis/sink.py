"""The `aws-kinesis` sink: rows with `data` (binary or string) and `partitionKey` columns become Kinesis records.

Each task batches its rows into PutRecords requests (`put.py`: within the API's limits, failed entries
retried) and flushes what is left when its rows end. Kinesis has no idempotent put, so a retried task or
batch can write a record twice: the sink is at least once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import structlog
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from pipeline.sources.kinesis.client import Kinesis
from pipeline.sources.kinesis.options import KinesisOptionError, SinkOptions
from pipeline.sources.kinesis.put import RecordBatcher

log = structlog.get_logger(__name__)


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
        batcher = RecordBatcher(Kinesis(self.options.client), self.options.stream_name)
        for row in iterator:
            data, partition_key = row["data"], row["partitionKey"]
            if data is None or not partition_key:
                raise ValueError("aws-kinesis sink: a row has a null `data` or an empty `partitionKey`; "
                                 "filter such rows out or give them a value")
            batcher.add(data.encode() if isinstance(data, str) else bytes(data), partition_key)
        batcher.flush()
        return Sent(batcher.sent)


class KinesisStreamWriter(KinesisWriter, DataSourceStreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        log.info("kinesis.sink.batch", stream=self.options.stream_name, batch=batchId,
                 records=sum(m.records for m in messages if isinstance(m, Sent)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning("kinesis.sink.aborted", stream=self.options.stream_name, batch=batchId)
