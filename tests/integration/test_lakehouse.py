"""Spark writes and reads Iceberg and Delta in one session; pyiceberg reads what Spark wrote."""

from __future__ import annotations

import os
import threading
import uuid

import boto3
import pytest

from pipeline.ops import smoke
from pipeline.runtime import scratch
from pipeline.config.settings import PipelineConfig
from pipeline.runtime.sessions import SessionPool
from tables.catalog import load_pyiceberg_catalog, pyiceberg_properties, spark_catalog_conf
from tables.lake import create_namespace
from tests.conftest import make_config

pytestmark = pytest.mark.integration

ROWS = [(1, "Ansel Adams", "American"), (2, "Berenice Abbott", "American"), (3, "Man Ray", None)]


def test_a_local_session_keeps_its_scratch_under_the_home(spark, cfg: PipelineConfig) -> None:
    """Not in /tmp, where a killed driver's blocks stayed for good: under the home, swept by the next session."""
    folder = cfg.home.resolve() / scratch.FOLDER / str(os.getpid())
    assert spark.sparkContext.getConf().get("spark.local.dir") == str(folder)
    assert any(child.name.startswith("spark-") for child in folder.iterdir())  # Spark's own temporary folder


def test_iceberg_written_by_spark_is_read_by_pyiceberg(spark, cfg: PipelineConfig) -> None:
    table = f"artists_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.it")
    spark.createDataFrame(ROWS, "id long, name string, nationality string") \
        .writeTo(f"{cfg.catalog.name}.it.{table}").using("iceberg").create()
    assert sorted(tuple(r) for r in spark.table(f"it.{table}").collect()) == ROWS  # the default catalog
    arrow = load_pyiceberg_catalog(cfg.catalog, cfg.aws).load_table(("it", table)).scan().to_arrow()
    assert sorted(zip(*arrow.to_pydict().values())) == ROWS


def test_sessions_create_one_namespace_at_the_same_moment(spark, cfg: PipelineConfig) -> None:
    """Tables merged at once each create the mirror's namespaces; the JDBC catalog's check-then-insert must not
    fail the sessions that lose the race."""
    pool = SessionPool(spark)
    for _ in range(3):
        namespace = f"ns_{uuid.uuid4().hex[:8]}"
        together = threading.Barrier(4, timeout=120)

        def create(_: int) -> bool:
            together.wait()
            create_namespace(pool.current, cfg.catalog.name, namespace)
            return pool.current.catalog.databaseExists(f"{cfg.catalog.name}.{namespace}")

        assert pool.map(create, range(4), workers=4, name="ns") == [True] * 4


def test_delta_round_trip_with_time_travel(spark, cfg: PipelineConfig) -> None:
    path = f"{cfg.lake.delta_root}/it/artists_{uuid.uuid4().hex[:8]}"
    spark.createDataFrame(ROWS[:2], "id long, name string, nationality string").write.format("delta").save(path)
    spark.createDataFrame(ROWS[2:], "id long, name string, nationality string").write.format("delta").mode("append").save(path)
    assert spark.read.format("delta").load(path).count() == 3
    assert spark.read.format("delta").option("versionAsOf", 0).load(path).count() == 2


def test_glue_catalog_on_s3(spark, stack, cfg: PipelineConfig) -> None:
    """The Glue + S3 alternative, registered in the running session, against moto."""
    bucket = f"lake-{uuid.uuid4().hex[:8]}"
    glue_cfg = make_config("catalog.name=glue_it", "catalog.type=glue", f"catalog.warehouse=s3://{bucket}/warehouse")
    boto3.client("s3", **cfg.aws.boto3_kwargs()).create_bucket(Bucket=bucket)
    for key, value in spark_catalog_conf(glue_cfg.catalog, glue_cfg.aws).items():
        spark.conf.set(key, value)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS glue_it.gl")
    spark.createDataFrame(ROWS, "id long, name string, nationality string").writeTo("glue_it.gl.artists").using("iceberg").createOrReplace()
    entry = boto3.client("glue", **cfg.aws.boto3_kwargs()).get_table(DatabaseName="gl", Name="artists")["Table"]
    assert entry["Parameters"]["table_type"].upper() == "ICEBERG"
    assert entry["Parameters"]["metadata_location"].startswith(f"s3://{bucket}/warehouse/")
    from pyiceberg.catalog import load_catalog

    glue_catalog = load_catalog("glue_it", **pyiceberg_properties(glue_cfg.catalog, glue_cfg.aws))
    assert sorted(zip(*glue_catalog.load_table(("gl", "artists")).scan().to_arrow().to_pydict().values())) == ROWS


def test_demo_smoke_path_end_to_end(spark, stack, cfg: PipelineConfig) -> None:
    report = smoke.run(cfg, spark, rows=250)
    assert (report.produced, report.iceberg_rows, report.delta_rows, report.pyiceberg_rows) == (250, 250, 250, 250)
    decoded = spark.table(f"{smoke.NAMESPACE}.{smoke.TABLE}").where("id = 7").collect()[0]
    assert (decoded["name"], decoded["email"]) == ("customer 7", "c7@example.com")
