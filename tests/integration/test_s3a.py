"""S3A on the stack's moto: Spark reads and writes `s3a://` and `s3://` paths (Parquet and Delta) with the
settings `spark_conf` derives from `aws`."""

from __future__ import annotations

import uuid

import boto3
import pytest

from pipeline.config.settings import PipelineConfig

pytestmark = pytest.mark.integration

BUCKET = "s3a-test"


@pytest.fixture(scope="module")
def bucket(cfg: PipelineConfig, stack) -> str:
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    if BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=BUCKET)
    return BUCKET


def test_s3a_and_s3_paths_read_and_write(cfg: PipelineConfig, spark, bucket: str) -> None:
    run = uuid.uuid4().hex[:8]
    rows = spark.range(0, 1000).selectExpr("id", "CAST(id % 7 AS INT) AS k", "concat('v', id) AS v")
    rows.write.mode("overwrite").parquet(f"s3a://{bucket}/{run}/parquet")
    assert spark.read.parquet(f"s3a://{bucket}/{run}/parquet").count() == 1000

    # What Spark wrote is plain objects in the bucket, seen by any S3 client.
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{run}/parquet/")["Contents"]]
    assert any(key.endswith(".parquet") for key in keys)

    # s3:// is S3A too: a Delta table at an s3:// location, as Glue and Athena name it.
    delta = f"s3://{bucket}/{run}/delta"
    rows.write.format("delta").partitionBy("k").save(delta)
    spark.range(1000, 1010).selectExpr("id", "CAST(id % 7 AS INT) AS k", "concat('v', id) AS v") \
        .write.format("delta").mode("append").save(delta)
    back = spark.read.format("delta").load(delta)
    assert back.count() == 1010
    assert back.where("k = 3").count() == len([i for i in range(1010) if i % 7 == 3])
    assert s3.get_object(Bucket=bucket, Key=f"{run}/delta/_delta_log/00000000000000000001.json")["ContentLength"] > 0
    # The same table through s3a://
    assert spark.read.format("delta").load(delta.replace("s3://", "s3a://")).count() == 1010
