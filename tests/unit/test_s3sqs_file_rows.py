"""`rowFormat=files`: the s3-sqs source lists a batch's files and reads none; and what a DMS file's path says."""

from __future__ import annotations

from datetime import datetime
from unittest import mock

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from cdc.dms_files import DmsFile, _literal
from pipeline.sources.s3sqs import files
from pipeline.sources.s3sqs.events import S3File
from pipeline.sources.s3sqs.files import FILE_ROWS_SCHEMA, read_files
from pipeline.sources.s3sqs.options import S3SqsOptionError, parse_options
from pipeline.sources.s3sqs.source import S3SqsDataSource

REQUIRED = {"fileFormat": "parquet", "queueUrl": "http://sqs/q", "queueRegion": "us-east-1",
            "checkpointLocation": "/tmp/c", "rowFormat": "files"}
ANNOUNCED = [S3File("s3://b/db/public/t/LOAD00000001.parquet", 10, 1_767_225_600_000),
             S3File("s3://b/db/public/t/20260101-000000123.parquet", 20, 1_767_225_601_500)]


# FILE_ROWS_SCHEMA, built without a JVM to parse it
FILE_ROWS = StructType([StructField("_file_path", StringType()), StructField("_file_size", LongType()),
                        StructField("_file_event_time", TimestampType())])


def test_a_batch_of_files_is_listed_without_a_get() -> None:
    assert FILE_ROWS_SCHEMA == ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in FILE_ROWS)
    options = parse_options(REQUIRED)
    target = to_arrow_schema(FILE_ROWS)
    with mock.patch.object(files, "_s3_client", side_effect=AssertionError("no file is fetched")):
        batches = list(read_files(options, FILE_ROWS, ANNOUNCED))
    table = pa.Table.from_batches(batches, schema=target)
    assert table.column("_file_path").to_pylist() == [f.path for f in ANNOUNCED]
    assert table.column("_file_size").to_pylist() == [10, 20]
    times = table.column("_file_event_time").cast(pa.int64()).to_pylist()  # microseconds
    assert times == [f.event_time_ms * 1000 for f in ANNOUNCED]


def test_the_source_needs_no_schema_for_file_rows() -> None:
    assert S3SqsDataSource(REQUIRED).schema() == FILE_ROWS_SCHEMA


def test_file_rows_take_no_partition_columns() -> None:
    with pytest.raises(S3SqsOptionError, match="rowFormat=columns"):
        parse_options({**REQUIRED, "partitionColumns": "p", "basePath": "s3://b/"})


def test_csv_file_rows_need_no_header() -> None:
    assert parse_options({**REQUIRED, "fileFormat": "csv"}).row_format == "files"


def test_the_csv_header_is_read_from_the_first_bytes_only() -> None:
    client = mock.Mock()
    client.exceptions.NoSuchKey = KeyError
    client.get_object.return_value = {"Body": mock.Mock(read=lambda: b"\xef\xbb\xbfOp;ts;\"a;b\"\r\nI;1;2\r\n")}
    options = parse_options({**REQUIRED, "fileFormat": "csv", "delimiter": ";"})
    with mock.patch.object(files, "_s3_client", return_value=client):
        headers = files.csv_headers(options, ["s3://b/k/x.csv"])
    assert headers == {"s3://b/k/x.csv": ("Op", "ts", "a;b")}
    assert client.get_object.call_args.kwargs == {"Bucket": "b", "Key": "k/x.csv",
                                                  "Range": f"bytes=0-{files.HEADER_BYTES - 1}"}


@pytest.mark.parametrize(("path", "table"), [
    ("s3://bucket/dms/public/orders/20260101-000000123.parquet", ("dms", "public", "orders")),
    ("s3://bucket/deep/er/dms/public/Order Items/LOAD00000001.csv", ("dms", "public", "Order Items")),
    ("s3://bucket/public/orders/x.parquet", ("", "", "")),  # no folder above the schema: not DMS's layout
])
def test_a_file_path_names_its_table(path: str, table: tuple[str, str, str]) -> None:
    found = DmsFile.of(path, datetime(2026, 1, 1))
    assert (found.db, found.schema, found.table) == table
    assert found.topic == ".".join(table)


def test_glob_characters_in_a_path_are_escaped() -> None:
    assert _literal("s3://b/db/public/a[1]{x}*?/f.parquet") == r"s3://b/db/public/a\[1\]\{x\}\*\?/f.parquet"


@pytest.mark.parametrize(("name", "load", "number"), [
    ("20260101-000000123.parquet", False, 20260101000000123), ("LOAD00000007.csv", True, 7), ("notes.csv", False, None),
])
def test_a_file_name_says_full_load_and_its_number(name: str, load: bool, number: int | None) -> None:
    found = DmsFile.of(f"s3://b/db/public/t/{name}", datetime(2026, 1, 1))
    assert (found.load, found.number) == (load, number)
