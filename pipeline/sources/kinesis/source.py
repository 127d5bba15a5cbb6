"""The `aws-kinesis` data source: the seed connector's schema, a GetRecords stream reader and a sink."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, DataSourceWriter, SimpleDataSourceStreamReader
from pyspark.sql.types import StructType

from pipeline.sources.kinesis.options import sink_options, source_options
from pipeline.sources.kinesis.reader import KinesisStreamReader
from pipeline.sources.kinesis.sink import KinesisStreamWriter, KinesisWriter, check_schema

NAME = "aws-kinesis"
# the seed's columns, then the shard the record came from (the changelog's transport partition)
SCHEMA = ("data binary, streamName string, partitionKey string, sequenceNumber string, "
          "approximateArrivalTimestamp timestamp, shardId string")


class KinesisDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return KinesisStreamReader(source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        check_schema(schema)
        return KinesisWriter(sink_options(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_schema(schema)
        return KinesisStreamWriter(sink_options(self.options))
