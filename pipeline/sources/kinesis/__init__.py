"""The `aws-kinesis` Spark data source (GetRecords consumer and PutRecords sink); `register` makes it known."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    from pipeline.sources.kinesis.source import KinesisDataSource

    spark.dataSource.register(KinesisDataSource)
