"""Streaming sources the pipeline adds to Spark through the Python data source API: `s3-sqs` (S3 objects
announced on SQS) and `aws-kinesis` (`pipeline/sources/kinesis`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `spark.readStream.format("s3-sqs")` available in this session."""
    from pipeline.sources.s3sqs.source import S3SqsDataSource

    spark.dataSource.register(S3SqsDataSource)
