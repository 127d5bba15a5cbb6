"""Rows of AWS DMS S3 target files (CSV or Parquet), as one JSON object per row with the file's path and the row's
position (the `s3-sqs` source with `rowFormat=json`), into the decoded DMS shape `cdc/normalize.py` reads:
`v = {data, metadata}` plus the transport columns, and a `_valid` flag.

The table comes from DMS's folder layout `<folder>/<schema>/<table>/<file>`, with the folder as the database.
Full-load files (`LOAD…`) hold snapshot reads; CDC files hold `Op` I/U/D. Ordering: the commit time
(`TimestampColumnName`), then the file (DMS names CDC files by time and numbers load files), then the row in
the file. JSON numbers with a fraction land as double; CSV values are text and take the types of the table's
declared DDL when there is one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from cdc.decode import VALID

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

TABLE_PATH = r"^s3://[^/]+/(?:.*/)?([^/]+)/([^/]+)/([^/]+)/([^/]+)$"  # folder (db), schema, table, file
OPERATIONS = {"I": "insert", "U": "update", "D": "delete"}
OP_COLUMN = "Op"


def parsed_row() -> Column:
    return F.try_parse_json(F.col("value"))


def with_table(rows: DataFrame) -> DataFrame:
    """Adds `db`, `schema_name`, `table_name` and `file_name` from `_file_path`."""
    parts = {name: F.regexp_extract("_file_path", TABLE_PATH, i + 1)
             for i, name in enumerate(("db", "schema_name", "table_name", "file_name"))}
    return rows.withColumns(parts)


def row_type() -> Column:
    """An aggregate: the merged type of the rows' JSON objects."""
    return F.schema_of_variant_agg(parsed_row())


def decode(rows: DataFrame, merged_type: str, timestamp_column: str, queue: str,
           declared: StructType | None = None) -> DataFrame:
    """`merged_type` from `row_type`; `declared`, the table's columns for CSV (typed from text)."""
    from pyspark.sql.types import DecimalType, NullType, StructType, _parse_datatype_string

    parsed = parsed_row()
    found = _parse_datatype_string(merged_type.replace("OBJECT<", "STRUCT<"))
    found = found if isinstance(found, StructType) else StructType()
    skip = {OP_COLUMN, timestamp_column}
    if declared is not None:
        data = [F.try_variant_get(parsed, _path(f.name), "string").try_cast(f.dataType).alias(f.name)
                for f in declared if f.name not in skip]
    else:
        data = [F.try_variant_get(parsed, _path(f.name), "double" if isinstance(f.dataType, DecimalType)
                                  else f.dataType.simpleString()).alias(f.name)
                for f in found if f.name not in skip and not isinstance(f.dataType, NullType)]
    op = F.try_variant_get(parsed, _path(OP_COLUMN), "string")
    timestamp = F.try_variant_get(parsed, _path(timestamp_column), "string")
    load = F.col("file_name").startswith("LOAD")
    operation = F.when(load, F.lit("load")).otherwise(
        F.coalesce(*[F.when(op == letter, F.lit(name)) for letter, name in OPERATIONS.items()]))
    metadata = F.struct(
        timestamp.alias("timestamp"), F.lit("data").alias("record_type"), operation.alias("operation"),
        F.lit(None).cast("string").alias("partition_key_type"), F.col("schema_name"), F.col("table_name"),
        F.lit(None).cast("bigint").alias("transaction_id"),
        F.regexp_replace(F.regexp_replace("file_name", r"\.[^.]*$", ""), "[^0-9]", "").cast("bigint")
        .alias("transaction_record_id"))
    decoded = rows.select(
        "*",
        F.struct(F.struct(*data).alias("data"), metadata.alias("metadata")).alias("v"),
        F.lit(queue).alias("topic"), F.lit(0).alias("partition"), F.col("_file_row").alias("offset"),
        F.col("_file_event_time").alias("timestamp"), F.lit(None).cast("string").alias("schema_id"),
        F.col("_file_path").alias("file"))
    valid = (parsed.isNotNull() & operation.isNotNull() & F.try_to_timestamp(timestamp).isNotNull())
    return decoded.withColumn(VALID, F.coalesce(valid, F.lit(False)))


def _path(name: str) -> str:
    return f"$['{name}']"
