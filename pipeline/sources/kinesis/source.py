"""The `aws-kinesis` data source: the seed connector's schema, a GetRecords stream reader read in executors,
and a sink."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from pipeline.sources.kinesis.options import sink_options, source_options
from pipeline.sources.kinesis.reader import KinesisStreamReader
from pipeline.sources.kinesis.schema import SCHEMA
from pipeline.sources.kinesis.sink import KinesisStreamWriter, KinesisWriter, check_schema

NAME = "aws-kinesis"


class KinesisDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KinesisStreamReader(source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        check_schema(schema)
        return KinesisWriter(sink_options(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_schema(schema)
        return KinesisStreamWriter(sink_options(self.options))
