"""The source's rows: the seed connector's columns, then the shard a record came from (the changelog's
transport partition); as Spark DDL for `DataSource.schema` and as the Arrow schema executors build batches in."""

from __future__ import annotations

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, StringType, StructField, StructType, TimestampType

SCHEMA = StructType([
    StructField("data", BinaryType()), StructField("streamName", StringType()), StructField("partitionKey", StringType()),
    StructField("sequenceNumber", StringType()), StructField("approximateArrivalTimestamp", TimestampType()),
    StructField("shardId", StringType()),
])
ARROW_SCHEMA = to_arrow_schema(SCHEMA)
