"""An announced file that cannot be read is never skipped: the s3-sqs source makes it a row naming the file
and the reason (`_file_error` in the schema) or fails the task naming it; the changelog stage's CSV reader sets
apart a file whose header names no columns, for a dead letter that names it."""

from __future__ import annotations

from datetime import datetime
from unittest import mock

import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from cdc.dms_files import UNREADABLE, DmsFile, _csv
from pipeline.sources.s3sqs import files
from pipeline.sources.s3sqs.events import S3File
from pipeline.sources.s3sqs.files import MISSING, UnreadableFile, UnreadableHeader, csv_headers, read_files
from pipeline.sources.s3sqs.options import parse_options

OPTIONS = {"queueUrl": "http://sqs/q", "queueRegion": "us-east-1", "checkpointLocation": "/tmp/c"}
GONE = S3File("s3://b/in/gone.json", 10, 1_767_225_600_000)
CORRUPT = S3File("s3://b/in/cut.parquet", 10, 1_767_225_600_000)
WITH_ERRORS = StructType([StructField("id", IntegerType()), StructField("_file_path", StringType()),
                          StructField("_file_error", StringType())])


def _client(bodies: dict[str, bytes]) -> mock.Mock:
    client = mock.Mock()
    client.exceptions.NoSuchKey = KeyError

    def get_object(Bucket: str, Key: str, **_: str) -> dict:  # noqa: N803 - boto3's names
        return {"Body": mock.Mock(read=lambda: bodies[f"s3://{Bucket}/{Key}"])}

    client.get_object.side_effect = get_object
    return client


def _read(file_format: str, schema: StructType, announced: list[S3File], bodies: dict[str, bytes]) -> pa.Table:
    options = parse_options({**OPTIONS, "fileFormat": file_format})
    with mock.patch.object(files, "_s3_client", return_value=_client(bodies)):
        return pa.Table.from_batches(list(read_files(options, schema, announced)))


def test_a_file_gone_or_unreadable_is_a_row_that_names_it() -> None:
    table = _read("parquet", WITH_ERRORS, [GONE, CORRUPT], {CORRUPT.path: b"PAR1 cut short"})
    rows = table.to_pylist()
    assert [(r["id"], r["_file_path"]) for r in rows] == [(None, GONE.path), (None, CORRUPT.path)]
    assert rows[0]["_file_error"] == MISSING
    assert "Parquet" in rows[1]["_file_error"]


def test_without_an_error_column_the_task_fails_naming_the_file() -> None:
    schema = StructType([StructField("id", IntegerType())])
    with pytest.raises(UnreadableFile, match=rf"^{GONE.path}: announced, but no object is there.*_file_error"):
        _read("json", schema, [GONE], {})


@pytest.mark.parametrize(("body", "reason"), [(b"\xff\xfeO\x00p\x00\n", "not UTF-8 text"),
                                              (b"", "names no columns"), (b"\r\nI,1\n", "names no columns")])
def test_a_csv_header_that_names_no_columns_says_why(body: bytes, reason: str) -> None:
    options = parse_options({**OPTIONS, "fileFormat": "csv", "rowFormat": "files"})
    with mock.patch.object(files, "_s3_client", return_value=_client({"s3://b/k/x.csv": body})):
        [header] = csv_headers(options, ["s3://b/k/x.csv"]).values()
    assert isinstance(header, UnreadableHeader) and reason in str(header)


def test_the_changelog_stage_sets_a_csv_file_with_an_unreadable_header_apart() -> None:
    item = DmsFile.of("s3://b/db/public/t/20260101-000000001.csv", datetime(2026, 1, 1))
    headers = {item.path: UnreadableHeader("its header line names no columns")}
    frames, lost = _csv(None, [item], headers)  # type: ignore[arg-type] - no file is left to read: no Spark
    assert frames == []
    assert lost == [(item, UNREADABLE, "not a readable CSV file: its header line names no columns")]
