"""`spark.readStream.format("s3-sqs")`: the data source Spark registers; it checks options and schema up front."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from pipeline.sources.s3sqs.files import FILE_ROWS_SCHEMA, METADATA_COLUMNS, VALUE_COLUMN
from pipeline.sources.s3sqs.options import S3SqsOptionError, parse_options
from pipeline.sources.s3sqs.reader import S3SqsStreamReader

JSON_ROWS_SCHEMA = f"{VALUE_COLUMN} string, " + ", ".join(f"{n} {t}" for n, t in METADATA_COLUMNS.items())


class S3SqsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "s3-sqs"

    def schema(self) -> str:
        """Called only when the query gave no schema: that is fine for rowFormat=json or files alone."""
        row_format = parse_options(self.options).row_format
        if row_format != "columns":
            return JSON_ROWS_SCHEMA if row_format == "json" else FILE_ROWS_SCHEMA
        raise S3SqsOptionError("the s3-sqs source needs the files' schema: spark.readStream.format('s3-sqs')"
                               ".schema('id int, name string')…, or rowFormat=json for one JSON string per row, or "
                               "rowFormat=files for one row per file")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_options(self.options)
        names = schema.fieldNames()
        missing = [c for c in options.partition_columns if c not in names]
        if missing:
            raise S3SqsOptionError(f"partitionColumns {', '.join(missing)} must be columns of the schema "
                                   f"(it has {', '.join(names)})")
        if options.row_format == "json" and VALUE_COLUMN not in names:
            raise S3SqsOptionError(f"rowFormat=json puts each row in a string column {VALUE_COLUMN!r}: "
                                   "the schema must have it")
        return S3SqsStreamReader(options, schema)
