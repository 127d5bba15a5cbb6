"""What the pipeline reads besides Spark's own sources: the streaming sources it adds through the Python data source
API, `s3-sqs` (S3 objects announced on SQS) and `aws-kinesis` (`pipeline/sources/kinesis`), and a PostgreSQL
table's snapshot read by key ranges for `pipeline backfill` (`postgres_snapshot.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `spark.readStream.format("s3-sqs")` available in this session."""
    from pipeline.sources.s3sqs.source import S3SqsDataSource

    spark.dataSource.register(S3SqsDataSource)
