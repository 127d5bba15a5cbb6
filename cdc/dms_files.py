"""AWS DMS S3 target files (CSV or Parquet): which table a file holds, each table's files read once by Spark's own
reader, and their rows into the decoded DMS shape `cdc/normalize.py` reads: `v = {data, metadata}` plus the
transport columns, and a `_valid` flag.

A batch's files are known before any is read (the `s3-sqs` source lists them), and so is each file's table: DMS's
folder layout `<folder>/<schema>/<table>/<file>`, with the folder as the database. A table's files are read by
one Parquet or CSV scan, whose row type is the files' own: a Parquet file's footer (merged over the files, so a
column one file adds is null in the others), a CSV file's header (CSV values are text, typed by the table's
declared DDL when there is one). Files whose types cannot merge are read group by group, each group of one row
type, and unioned by name with Spark's widening (int with bigint is bigint); a group that does not fit is set
apart with the reason, never dropped and never cut to the others' columns. A file announced but gone when it is
read, a Parquet file whose footer cannot be read and a CSV file whose header cannot are set apart too
(`TableRead.lost`), by name and reason.

Full-load files (`LOAD…`) hold snapshot reads; CDC files hold `Op` I/U/D. Ordering: the commit time
(`TimestampColumnName`), then the file (DMS names CDC files by time and numbers load files), then the row in
the file (Parquet's row index; a CSV file is read whole by one task, in order).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Mapping

import structlog
from pyspark.sql import Column
from pyspark.sql import functions as F

from cdc.columns import lake_column, source_column, source_columns
from cdc.decode import VALID
from tables.names import column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = structlog.get_logger(__name__)
TABLE_PATH = re.compile(r"^s3://[^/]+/(?:.*/)?([^/]+)/([^/]+)/([^/]+)/([^/]+)$")  # folder (db), schema, table, file
OPERATIONS = {"I": "insert", "U": "update", "D": "delete"}
OP_COLUMN = "Op"
# what each row carries of where it is: its file, its row in the file, the file's event time, whether it is a
# full-load file, and the number in its name (DMS names CDC files by time and numbers load files)
FILE_COLUMNS = ("_file_path", "_file_row", "_file_event_time", "_file_load", "_file_number")
GLOB = re.compile(r"([\\{}\[\]*?])")
ERROR_CLASS = re.compile(r"\[[A-Z][A-Z_]*(?:\.[A-Z_]+)*\].*")  # `[FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER] …`


@dataclass(frozen=True)
class DmsFile:
    """An announced file and the table its path names (all empty: not in DMS's layout)."""

    path: str  # s3://bucket/key
    event_time: datetime
    db: str = ""
    schema: str = ""
    table: str = ""

    @classmethod
    def of(cls, path: str, event_time: datetime) -> DmsFile:
        found = TABLE_PATH.match(path)
        return cls(path, event_time, *found.groups()[:3]) if found else cls(path, event_time)

    @property
    def topic(self) -> str:
        return ".".join((self.db, self.schema, self.table))

    @property
    def load(self) -> bool:
        """A full-load file (`LOAD00000001.csv`): snapshot reads."""
        return self.path.rsplit("/", 1)[-1].startswith("LOAD")

    @property
    def number(self) -> int | None:
        """The digits of the file's name without its extension: its place among the table's files."""
        digits = re.sub(r"[^0-9]", "", re.sub(r"\.[^.]*$", "", self.path.rsplit("/", 1)[-1]))
        return int(digits) if digits else None


MISSING = ("MissingDmsFile", "announced, but no object is there: deleted before it was read, or the event named "
           "a key that does not exist; nothing of it landed")
UNREADABLE = "UnreadableDmsFile"


@dataclass(frozen=True)
class TableRead:
    """One table's files as rows (`_shaped`; None when no file of it could be read), the files that did not fit
    them (rows of the same shape, and the reason), and the files with no rows to show (gone, unreadable): each
    with its error class and reason, for a dead letter that names it."""

    rows: DataFrame | None
    misfits: list[tuple[DataFrame, str]]
    lost: list[tuple[DmsFile, str, str]] = field(default_factory=list)


def read_table(spark: SparkSession, files: list[DmsFile], file_format: str,
               csv_headers: Mapping[str, tuple[str, ...] | ValueError] | None = None) -> TableRead:
    """One table's files, read once. `csv_headers`: each CSV file's column names (its header line), or why
    it has none."""
    from pyspark.errors import AnalysisException

    headers = csv_headers or {}
    try:
        frames, lost = _csv(spark, files, headers) if file_format == "csv" else _parquet_groups(spark, files)
    except AnalysisException as exc:
        present = _present(spark, files) if "PATH_NOT_FOUND" in str(exc) else files  # a look costs a request
        if len(present) == len(files):
            raise
        gone = [(item, *MISSING) for item in files if item not in present]
        rest = read_table(spark, present, file_format, csv_headers) if present else TableRead(None, [])
        return dataclasses.replace(rest, lost=gone + rest.lost)
    if not frames:
        return TableRead(None, [], lost)
    rows, misfits = frames[0][0], []
    for frame, group in frames[1:]:
        try:
            union = rows.unionByName(frame, allowMissingColumns=True)
            union.schema  # noqa: B018 - analysed now: a type that does not widen fails here, not in the append
            rows = union
        except AnalysisException as exc:
            names = ", ".join(f.path for f in group[:3]) + (" …" if len(group) > 3 else "")
            misfits.append((_shaped(frame, group[0]),
                            f"the columns of {names} do not fit the other files of the table in this batch "
                            f"({_spark_reason(exc)}): land them in a batch of their own (reprocess them)"))
    return TableRead(_shaped(rows, files[0]), misfits, lost)


def _present(spark: SparkSession, files: list[DmsFile]) -> list[DmsFile]:
    """The files still there (the others are dead-lettered: `MISSING`)."""
    jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    present = []
    for item in files:
        path = jvm.org.apache.hadoop.fs.Path(item.path)
        if path.getFileSystem(conf).exists(path):
            present.append(item)
        else:
            log.warning("dms_files.file_gone", path=item.path, reason="deleted before it was read")
    return present


def _parquet_groups(spark: SparkSession, files: list[DmsFile]
                    ) -> tuple[list[tuple[DataFrame, list[DmsFile]]], list[tuple[DmsFile, str, str]]]:
    """The files in one scan when their footers merge (Spark's mergeSchema: a column one file adds is null in
    the others); else one scan per footer, the most files first. Files whose footer cannot be read at all (not
    Parquet, cut short) are set apart, with Spark's reason."""
    try:
        return [(_located(spark, _parquet(spark, files), files), files)], []
    except Exception as exc:  # Spark's merge and read failures reach Python as a bare Py4JJavaError
        if "PATH_NOT_FOUND" in str(exc):
            raise
        failure = exc
    by_footer: dict[str, list[DmsFile]] = {}
    unreadable: list[tuple[DmsFile, str, str]] = []
    for item in files:
        try:
            by_footer.setdefault(_parquet(spark, [item]).schema.json(), []).append(item)
        except Exception as exc:  # noqa: BLE001 - any failure to read one file's footer sets that file apart
            if "PATH_NOT_FOUND" in str(exc):
                raise
            unreadable.append((item, UNREADABLE, f"not a readable Parquet file ({_spark_reason(exc)})"))
    if unreadable:  # the others are read as if the unreadable ones had not been announced
        readable = [item for item in files if all(item is not bad for bad, _, _ in unreadable)]
        return (_parquet_groups(spark, readable)[0] if readable else []), unreadable
    if "CANNOT_MERGE" not in str(failure):
        raise failure
    return [(_located(spark, _parquet(spark, group), group), group)
            for group in sorted(by_footer.values(), key=lambda g: -len(g))], []


def _parquet(spark: SparkSession, files: list[DmsFile]) -> DataFrame:
    return spark.read.option("mergeSchema", "true").parquet(*[_literal(f.path) for f in files])


def _csv(spark: SparkSession, files: list[DmsFile], headers: Mapping[str, tuple[str, ...] | ValueError]
         ) -> tuple[list[tuple[DataFrame, list[DmsFile]]], list[tuple[DmsFile, str, str]]]:
    """One scan per header (all text), the most files first. multiLine: each file is one task's, read in order
    (and a quoted value may hold a line break). A file whose header names no columns (`csv_headers` says why)
    is set apart."""
    from pyspark.sql.types import StringType, StructField, StructType

    by_header: dict[tuple[str, ...], list[DmsFile]] = {}
    unreadable = []
    for item in files:
        header = headers.get(item.path, ())
        if isinstance(header, ValueError):
            unreadable.append((item, UNREADABLE, f"not a readable CSV file: {header}"))
        else:
            by_header.setdefault(header, []).append(item)
    frames = []
    for header, group in sorted(by_header.items(), key=lambda kv: -len(kv[1])):
        columns = StructType([StructField(name, StringType()) for name in header])
        frame = (spark.read.schema(columns).option("header", "true").option("multiLine", "true")
                 .csv([_literal(f.path) for f in group]))
        frames.append((_located(spark, frame, group, row_index=False), group))
    return frames, unreadable


def _located(spark: SparkSession, frame: DataFrame, files: list[DmsFile], row_index: bool = True) -> DataFrame:
    """The files' columns under their lake names (`cdc/columns.py`: a file's `_file_row` or `_metadata` column
    is no file column of ours, nor Spark's), then `FILE_COLUMNS`; what is the same for a file's rows is looked
    up by the file, not computed row by row. Without Spark's `row_index` (CSV), a file's rows are numbered as
    they come: in order, in one task."""
    from pyspark.sql import Window

    data = [lake_column(name) for name in frame.columns]
    renamed = [column(name).alias(lake_column(name)) for name in frame.columns]
    spark_file = frame.metadataColumn("_metadata")  # Spark's, even when the file has a `_metadata` column
    if row_index:
        frame = frame.select(*renamed, spark_file["file_path"].alias("_spark_path"),
                             spark_file["row_index"].alias("_file_row"))
    else:
        frame = frame.select(*renamed, spark_file["file_path"].alias("_spark_path"))
        frame = frame.withColumn("_file_row", (F.row_number().over(Window.partitionBy("_spark_path").orderBy(
            F.monotonically_increasing_id())) - 1).cast("bigint"))
    # Spark names a file by its URI (`Order%20Items`): back to the announced path and its event time
    jvm_path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path  # type: ignore[union-attr]
    announced = F.create_map(*[part for f in files for part in (
        F.lit(jvm_path(f.path).toUri().toString()),
        F.struct(F.lit(f.path).alias("path"), F.lit(f.event_time).cast("timestamp").alias("event_time"),
                 F.lit(f.load).alias("load"), F.lit(f.number).cast("bigint").alias("number")))])
    where = F.element_at(announced, F.col("_spark_path"))
    return frame.select(*[column(name) for name in data], where["path"].alias("_file_path"), "_file_row",
                        where["event_time"].alias("_file_event_time"), where["load"].alias("_file_load"),
                        where["number"].alias("_file_number"))


def _shaped(rows: DataFrame, table: DmsFile) -> DataFrame:
    """The files' columns in one struct `_row` under their own names (a table may have a column named `offset`
    or `db`), the row as JSON in `value` (for a dead letter), the file columns and the table's names."""
    data = F.struct(*[column(name).alias(source_column(name)) for name in source_columns(rows.columns)])
    return rows.select(data.alias("_row"), F.to_json(data).alias("value"), *FILE_COLUMNS,
                       F.lit(table.db).alias("db"), F.lit(table.schema).alias("schema_name"),
                       F.lit(table.table).alias("table_name"))


def decode(rows: DataFrame, timestamp_column: str, queue: str, declared: StructType | None = None) -> DataFrame:
    """`rows` from `read_table`; `declared`: the table's columns for CSV (typed from text). The columns are the
    files' own (a Parquet int stays int): what Spark read, not a JSON rendering of it."""
    row = F.col("_row")
    present = rows.schema["_row"].dataType.fieldNames()  # type: ignore[attr-defined]
    skip = {OP_COLUMN, timestamp_column}
    if declared is not None:
        data = [(row.getField(f.name).try_cast(f.dataType) if f.name in present else F.lit(None).cast(f.dataType))
                .alias(f.name) for f in declared if f.name not in skip]
    else:
        data = [row.getField(name).alias(name) for name in present if name not in skip]
    op = row.getField(OP_COLUMN).cast("string") if OP_COLUMN in present else F.lit(None).cast("string")
    timestamp, valid_time = _commit_time(rows, timestamp_column)
    operation = F.when(F.col("_file_load"), F.lit("load")).otherwise(
        F.coalesce(*[F.when(op == letter, F.lit(name)) for letter, name in OPERATIONS.items()]))
    metadata = F.struct(
        timestamp.alias("timestamp"), F.lit("data").alias("record_type"), operation.alias("operation"),
        F.lit(None).cast("string").alias("partition_key_type"), F.col("schema_name"), F.col("table_name"),
        F.lit(None).cast("bigint").alias("transaction_id"),
        F.col("_file_number").alias("transaction_record_id"))
    decoded = rows.select(
        "*",
        F.struct(F.struct(*data).alias("data"), metadata.alias("metadata")).alias("v"),
        F.lit(queue).alias("topic"), F.lit(0).alias("partition"), F.col("_file_row").alias("offset"),
        F.col("_file_event_time").alias("timestamp"), F.lit(None).cast("string").alias("schema_id"),
        F.col("_file_path").alias("file"))
    return decoded.withColumn(VALID, F.coalesce(operation.isNotNull() & valid_time, F.lit(False)))


def _commit_time(rows: DataFrame, name: str) -> tuple[Column, Column]:
    """The commit time for `metadata.timestamp` (`cdc/normalize.py` takes it with `to_timestamp`), and whether
    it is one. A Parquet timestamp is passed as it is: formatting it as text to parse it again cost more than
    the rest of the row."""
    from pyspark.sql.types import StringType, TimestampNTZType, TimestampType

    fields = {f.name: f.dataType for f in rows.schema["_row"].dataType.fields}  # type: ignore[attr-defined]
    kind = fields.get(name)
    if kind is None:
        return F.lit(None).cast("string"), F.lit(False)
    value = F.col("_row").getField(name)
    if isinstance(kind, (TimestampType, TimestampNTZType)):
        return value, value.isNotNull()
    text = value if isinstance(kind, StringType) else value.cast("string")
    return text, F.try_to_timestamp(text).isNotNull()


def _literal(path: str) -> str:
    """A path Spark reads as itself: its glob characters escaped (a DMS table may be named `a[1]`)."""
    return GLOB.sub(r"\\\1", path)


def _spark_reason(exc: Exception) -> str:
    """The line of Spark's error that names its error class (a Py4J error opens with the call that failed)."""
    lines = str(exc).strip().splitlines()
    found = next((match[0] for match in map(ERROR_CLASS.search, lines) if match), lines[0])
    return found[:300]
