"""Reading announced objects on the executors: one S3 GET per file, parsed by pyarrow, conformed to the query's
schema (columns by name; a missing column is null), partition values from `key=value` folders under basePath,
and optionally the file's path, row number and event time.

A file that cannot be read (deleted before it is read, an event naming a key that does not exist, a body its
format cannot parse, a CSV header that is not text) is never skipped: with a `_file_error` string column in the
schema it becomes one row naming the file (`_file_path`) and the reason, for the query to route as a dead letter
(Spark's `_corrupt_record` idea, per file); without one, the task fails naming the object, Spark retries it
(`spark.task.maxFailures`), and the query stops with that error, its batch kept in RocksDB for the next run.
"""

from __future__ import annotations

import io
import json
import posixpath
import threading
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Iterator

import structlog
from pyspark.sql.datasource import InputPartition

from pipeline.sources.s3sqs.events import S3File
from pipeline.sources.s3sqs.options import S3SqsOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = structlog.get_logger(__name__)
FILE_ERROR_COLUMN = "_file_error"
METADATA_COLUMNS = {"_file_path": "string", "_file_row": "bigint", "_file_event_time": "timestamp",
                    FILE_ERROR_COLUMN: "string"}
MISSING = "announced, but no object is there: deleted before it was read, or the event named a key that does not exist"


class UnreadableFile(RuntimeError):
    """An announced file this source cannot read, and the query's schema has no `_file_error` column to say so."""


class UnreadableHeader(ValueError):
    """A CSV file whose first line names no columns: not UTF-8 text, or empty."""
VALUE_COLUMN = "value"
FILE_ROWS_SCHEMA = "_file_path string, _file_size bigint, _file_event_time timestamp"  # rowFormat=files


class FileSlice(InputPartition):
    """The files one task reads, in batch order."""

    def __init__(self, files: list[S3File]) -> None:
        super().__init__(files)
        self.files = files


def pack(files: list[S3File], max_bytes: int = 128 << 20, open_cost: int = 4 << 20) -> list[FileSlice]:
    """Files into tasks as Spark packs a file source's splits: each file costs its size plus an opening cost,
    a task takes up to `max_bytes` (Spark's maxPartitionBytes and openCostInBytes defaults), in batch order."""
    slices: list[list[S3File]] = []
    load = max_bytes
    for item in files:
        cost = item.size + open_cost
        if load + cost > max_bytes and (not slices or slices[-1]):
            slices.append([])
            load = 0
        slices[-1].append(item)
        load += cost
    return [FileSlice(chunk) for chunk in slices]


PREFETCH = 8  # GETs in flight per task: small files cost a round trip each, not their bytes


def read_files(options: S3SqsOptions, schema: StructType, files: list[S3File]) -> Iterator[pa.RecordBatch]:
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema)
    if options.row_format == "files":
        yield listing(files, target)
        return
    client = _s3_client(options)
    for item, body in _fetch(client, files):
        try:
            if body is None:
                raise UnreadableFile(MISSING)
            table = _parse(options, body, target)
        except (UnreadableFile, ValueError, OSError, EOFError) as exc:  # pyarrow's and fastavro's parse errors
            yield _unreadable(target, item, str(exc) or type(exc).__name__)
            continue
        if table.num_rows:
            yield _conform(options, table, target, item)


def _unreadable(target: pa.Schema, item: S3File, reason: str) -> pa.RecordBatch:
    """One row that names the file and why it cannot be read; or, with no `_file_error` column, the error."""
    import pyarrow as pa

    if FILE_ERROR_COLUMN not in target.names:
        raise UnreadableFile(f"{item.path}: {reason} (a {FILE_ERROR_COLUMN} string column in the schema makes such "
                             "a file a row that names it, instead of this error)")
    log.warning("s3sqs.file_error", path=item.path, reason=reason)
    values = {"_file_path": item.path, FILE_ERROR_COLUMN: reason, "_file_event_time": item.event_time_ms * 1000}
    return pa.RecordBatch.from_arrays(
        [pa.array([values.get(f.name)], pa.int64() if f.name == "_file_event_time" else f.type).cast(f.type)
         for f in target], schema=target)


def listing(files: list[S3File], target: pa.Schema) -> pa.RecordBatch:
    """rowFormat=files: the files themselves, one row each (path, size, event time), none of them fetched."""
    import pyarrow as pa

    values = {"_file_path": [f.path for f in files], "_file_size": [f.size for f in files],
              "_file_event_time": [f.event_time_ms * 1000 for f in files]}
    return pa.RecordBatch.from_arrays(
        [pa.array(values[f.name], pa.int64() if f.name == "_file_event_time" else f.type).cast(f.type)
         if f.name in values else pa.nulls(len(files), f.type) for f in target], schema=target)


_CLIENTS: dict[tuple[tuple[str, str], ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _s3_client(options: S3SqsOptions) -> Any:
    """One S3 client per Python worker and settings: building one loads botocore's service model (tenths of a
    second), and Spark reuses its Python workers across tasks and batches."""
    import boto3
    from botocore.config import Config

    kwargs = options.boto3_kwargs()
    key = tuple(sorted(kwargs.items()))
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = boto3.client("s3", config=Config(max_pool_connections=PREFETCH), **kwargs)
        return _CLIENTS[key]


def _fetch(client: Any, files: list[S3File]) -> Iterator[tuple[S3File, bytes | None]]:
    """The files' bodies in order (None: deleted), with up to PREFETCH GETs in flight."""
    from concurrent.futures import ThreadPoolExecutor

    def get(item: S3File) -> bytes | None:
        bucket, key = item.path[len("s3://"):].split("/", 1)
        try:
            return client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except client.exceptions.NoSuchKey:
            return None

    if len(files) <= 1:
        yield from ((item, get(item)) for item in files)
        return
    with ThreadPoolExecutor(min(PREFETCH, len(files)), thread_name_prefix="s3-sqs-get") as pool:
        window: deque[tuple[S3File, Future]] = deque()
        for item in files:
            window.append((item, pool.submit(get, item)))
            if len(window) >= PREFETCH:
                first, future = window.popleft()
                yield first, future.result()
        while window:
            first, future = window.popleft()
            yield first, future.result()


def _parse(options: S3SqsOptions, body: bytes, target: pa.Schema) -> pa.Table:
    import pyarrow as pa

    data_fields = [f for f in target if f.name not in METADATA_COLUMNS and f.name not in options.partition_columns]
    as_json = options.row_format == "json"
    if options.file_format == "csv":
        from pyarrow import csv

        names = [f.name for f in data_fields]
        types = {f.name: f.type for f in data_fields}
        if as_json:  # CSV has no types: keep the text rather than guess ("1995" may be a title)
            types = {name: pa.string() for name in _header(body, options.delimiter)}
        read = csv.ReadOptions(column_names=None if options.header else names)
        convert = csv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False, column_types=types,
                                     include_columns=None if as_json else names, include_missing_columns=True)
        return csv.read_csv(io.BytesIO(body), read_options=read, convert_options=convert,
                            parse_options=csv.ParseOptions(delimiter=options.delimiter))
    if options.file_format == "json":
        from pyarrow import json as pjson

        parse = None if as_json else pjson.ParseOptions(explicit_schema=pa.schema(data_fields),
                                                        unexpected_field_behavior="ignore")
        return pjson.read_json(io.BytesIO(body), parse_options=parse)
    if options.file_format == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(io.BytesIO(body))
    import fastavro

    return pa.Table.from_pylist(list(fastavro.reader(io.BytesIO(body))))


HEADER_BYTES = 1 << 16  # a CSV header line fits (DMS tables have at most a few thousand columns' names)


def csv_headers(options: S3SqsOptions, paths: list[str]) -> dict[str, tuple[str, ...] | UnreadableHeader]:
    """Each CSV file's column names, from its first line (one ranged GET per file, PREFETCH in flight): a
    reader that reads the files itself learns their row types before it reads them. A file gone: no names; a
    first line that names no columns: why."""
    from concurrent.futures import ThreadPoolExecutor

    client = _s3_client(options)

    def header(path: str) -> tuple[str, ...] | UnreadableHeader:
        bucket, key = path[len("s3://"):].split("/", 1)
        try:
            body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{HEADER_BYTES - 1}")["Body"].read()
            return tuple(_header(body, options.delimiter))
        except client.exceptions.NoSuchKey:
            return ()
        except UnreadableHeader as exc:
            return exc

    with ThreadPoolExecutor(PREFETCH, thread_name_prefix="s3-sqs-header") as pool:
        return dict(zip(paths, pool.map(header, paths)))


def _header(body: bytes, delimiter: str) -> list[str]:
    import csv

    try:
        first = body.split(b"\n", 1)[0].decode("utf-8-sig").rstrip("\r")
    except UnicodeDecodeError as exc:
        raise UnreadableHeader(f"its header line is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    names = next(csv.reader([first], delimiter=delimiter), [])
    if not any(names):
        raise UnreadableHeader("its header line names no columns (an empty file or first line)")
    return names


def _conform(options: S3SqsOptions, table: pa.Table, target: pa.Schema, item: S3File) -> pa.RecordBatch:
    import pyarrow as pa

    partitions = _partition_values(options, item.path)
    rows = table.num_rows
    columns: list[Any] = []
    for f in target:
        if f.name == VALUE_COLUMN and options.row_format == "json":
            columns.append(pa.array([json.dumps(row, default=str) for row in table.to_pylist()], pa.string()))
        elif f.name == "_file_path":
            columns.append(pa.array([item.path] * rows, f.type))
        elif f.name == "_file_row":
            columns.append(pa.array(range(rows), f.type))
        elif f.name == "_file_event_time":
            columns.append(pa.array([item.event_time_ms * 1000] * rows, pa.int64()).cast(f.type))
        elif f.name in partitions:
            columns.append(pa.array([partitions[f.name]] * rows, pa.string()).cast(f.type))
        elif f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type, safe=False).combine_chunks())
        else:
            columns.append(pa.nulls(rows, f.type))
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _partition_values(options: S3SqsOptions, path: str) -> dict[str, str]:
    """`part=A` folders between basePath and the file name, for the partition columns."""
    if not options.partition_columns:
        return {}
    base = options.base_path.rstrip("/") + "/"  # type: ignore[union-attr]
    relative = path[len(base):] if path.startswith(base) else path
    found = dict(part.split("=", 1) for part in posixpath.dirname(relative).split("/") if "=" in part)
    return {name: found[name] for name in options.partition_columns if name in found}
