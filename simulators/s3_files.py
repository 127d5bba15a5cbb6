"""The simulator's S3 transport: changes become AWS DMS S3 target files, announced on SQS by S3 itself.

DMS's layout and shape: `<bucket>/<folder>/<schema>/<table>/LOAD00000001.csv` for the full load, then CDC files
named by time (`20260101-000000123.csv`) in the same folder; a header row (`AddColumnName`), `Op` first (I, U, D;
full-load rows carry I, as with `IncludeOpForFullLoad`), then the commit time (`TimestampColumnName`), then the
table's columns; NULL as an empty field. Parquet files hold the same columns, typed. A file is cut every
`rows_per_file` changes, as DMS cuts one per size or interval. The bucket's `s3:ObjectCreated:*` notifications go to
the queue; with `poison`, malformed notifications are sent beside the real ones (what the source must survive).
"""

from __future__ import annotations

import io
import random
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

import boto3
import pyarrow as pa
from botocore.exceptions import BotoCoreError, ClientError

from pipeline.config.settings import AwsSettings, DmsFileSettings
from simulators.faults import Message
from simulators.dms_types import arrow_type
from simulators.formats import DmsRow
from simulators.tables import Table
from simulators.transport import Delivery, TransportError

SPARK_TYPES = {"int": "int", "long": "bigint", "string": "string", "double": "double", "boolean": "boolean"}
MALFORMED_NOTIFICATIONS = (b"\x00 not json", b'{"Records": [{"eventName": "ObjectCreated:Put"}]}', b"[1, 2]")


def ensure_notified_bucket(aws: AwsSettings, bucket: str, queue: str) -> str:
    """The bucket, the queue, and the bucket's object-created notifications to the queue (idempotent); returns
    the queue's URL."""
    s3, sqs = boto3.client("s3", **aws.boto3_kwargs()), boto3.client("sqs", **aws.boto3_kwargs())
    try:
        queue_url = sqs.create_queue(QueueName=queue)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=bucket)
        s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}]})
    except (BotoCoreError, ClientError) as exc:
        raise TransportError(f"S3/SQS at {aws.endpoint_url or 'AWS'} could not set up bucket {bucket} -> queue "
                             f"{queue}: {exc}") from None
    return queue_url


def spark_ddl(table: Table, version: int = 2) -> str:
    """A table's CSV columns as Spark DDL, for `dms_files.csv_schemas` (CSV carries no types)."""
    return ", ".join(f"{c.name} {SPARK_TYPES[c.avro_type]}" for c in table.columns_at(version))


class S3FileTransport:
    def __init__(self, aws: AwsSettings, settings: DmsFileSettings, file_format: str, rows_per_file: int = 500,
                 poison: float = 0.0, seed: int = 7) -> None:
        self.aws, self.settings, self.file_format = aws, settings, file_format
        self.rows_per_file, self.poison = rows_per_file, poison
        self._random = random.Random(seed)
        self._s3 = boto3.client("s3", **aws.boto3_kwargs())
        self._queue_url = ""
        self._buffers: dict[tuple[str, bool], list[DmsRow]] = defaultdict(list)
        self._buffered = 0
        self._load_files: dict[str, int] = defaultdict(int)
        self._last_cdc_ms = 0
        self.delivery = Delivery()
        self.files_written = 0

    def prepare(self, topics: list[str]) -> None:
        self._queue_url = self.settings.queue_url or ensure_notified_bucket(self.aws, self.settings.bucket,
                                                                             self.settings.queue)

    def send(self, message: Message) -> None:
        row: Any = message.value
        if not isinstance(row, DmsRow):
            raise TransportError(f"the S3 transport writes DMS file rows; got {type(row).__name__} from the format")
        self._buffers[(message.topic, row.load)].append(row)
        self._buffered += 1
        if self._buffered >= self.rows_per_file:
            self._flush()

    def close(self) -> Delivery:
        self._flush()
        return self.delivery

    def _flush(self) -> None:
        """One file per table with buffered rows (full-load and CDC rows apart), all cut at the same moment."""
        for (topic, load), rows in sorted(self._buffers.items()):
            if rows:
                self._write(topic, load, rows)
        self._buffers.clear()
        self._buffered = 0

    def _write(self, topic: str, load: bool, rows: list[DmsRow]) -> None:
        prefix, schema, name = topic.split(".")
        body = self._encode(rows[0].table, rows)
        key = f"{prefix}/{schema}/{name}/{self._file_name(topic, load, rows)}.{self._extension}"
        self._s3.put_object(Bucket=self.settings.bucket, Key=key, Body=body)
        self.files_written += 1
        self.delivery.acknowledged += len(rows)
        if self.poison and self._random.random() < self.poison:
            self._send_malformed_notification()

    @property
    def _extension(self) -> str:
        return "csv" if self.file_format == "dms-csv" else "parquet"

    def _file_name(self, topic: str, load: bool, rows: list[DmsRow]) -> str:
        if load:
            self._load_files[topic] += 1
            return f"LOAD{self._load_files[topic]:08d}"
        cut_ms = max(max(r.commit_us for r in rows) // 1000, self._last_cdc_ms + 1)  # names strictly increase
        self._last_cdc_ms = cut_ms
        return datetime.fromtimestamp(cut_ms / 1000, tz=timezone.utc).strftime("%Y%m%d-%H%M%S%f")[:-3]

    def _encode(self, table: Table, rows: list[DmsRow]) -> bytes:
        """The rows as a typed Arrow table (the evolution column when any row has it), as CSV or Parquet."""
        present = set().union(*(row.image.keys() for row in rows))
        columns = [c for c in (*table.columns, table.evolution) if c.name in present]
        timestamp_column = self.settings.timestamp_column
        commit_times = [datetime.fromtimestamp(r.commit_us / 1e6, tz=timezone.utc).replace(tzinfo=None) for r in rows]
        arrays = {"Op": pa.array([r.op for r in rows], pa.string()),
                  timestamp_column: pa.array(commit_times, pa.timestamp("us"))}
        for column in columns:
            arrays[column.name] = pa.array([r.image.get(column.name) for r in rows], arrow_type(column.avro_type))
        data = pa.table(arrays)
        out = io.BytesIO()
        if self.file_format == "dms-csv":
            from pyarrow import csv

            data = data.set_column(1, timestamp_column, pa.array([t.strftime("%Y-%m-%d %H:%M:%S.%f")
                                                                 for t in commit_times], pa.string()))
            for position, column in enumerate(data.schema):  # CSV holds text: bytes as hex
                if column.type == pa.binary():
                    data = data.set_column(position, column.name, pa.array(
                        [None if v is None else v.hex() for v in data.column(position).to_pylist()], pa.string()))
            csv.write_csv(data, out, csv.WriteOptions(quoting_style="needed"))
        else:
            import pyarrow.parquet as pq

            pq.write_table(data, out)
        return out.getvalue()

    def _send_malformed_notification(self) -> None:
        body = self._random.choice(MALFORMED_NOTIFICATIONS).decode(errors="replace")
        boto3.client("sqs", **self.aws.boto3_kwargs()).send_message(QueueUrl=self._queue_url, MessageBody=body)
        self.delivery.acknowledged += 1
