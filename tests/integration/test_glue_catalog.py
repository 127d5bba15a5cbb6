"""Glue mode (Athena's catalog) on moto: the stages write Iceberg tables through Iceberg's Glue catalog on an
S3 warehouse; Glue holds what Athena needs, pyiceberg reads what Spark reads, `athena-ddl` prints the views,
and concurrent commits all land."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import boto3
import pytest

from pipeline.config import PipelineConfig
from pipeline.mirror import MirrorStage
from tables.catalog import load_pyiceberg_catalog
from tests.conftest import GLUE_BUCKET, GLUE_CATALOG, with_catalog
from tests.integration.test_mirror import _assert_equal_to_truth, _landed_source
from tests.integration.test_sql_access import assert_athena_ddl_parses

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def glue_cfg(cfg: PipelineConfig, stack) -> PipelineConfig:
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    if GLUE_BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=GLUE_BUCKET)
    return with_catalog(cfg, GLUE_CATALOG)


def _current_metadata(spark, ref: str) -> str:
    return spark.sql(f"SELECT file FROM {ref}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()["file"]


def test_stages_write_glue_tables_that_athena_and_pyiceberg_read(glue_cfg: PipelineConfig, spark,
                                                                  tmp_path: Path) -> None:
    cfg, source, truth = _landed_source(glue_cfg, spark, tmp_path, "gl")
    MirrorStage(cfg, spark).run_once()
    _assert_equal_to_truth(cfg, spark, truth, source.tables())

    glue = boto3.client("glue", **cfg.aws.boto3_kwargs())
    pyiceberg = load_pyiceberg_catalog(cfg.catalog, cfg.aws)
    for namespace in (cfg.changelog.namespace, cfg.mirror.namespace):
        for table in source.tables():
            ref = f"{cfg.catalog.name}.{namespace}.{table}"
            entry = glue.get_table(DatabaseName=namespace, Name=table)["Table"]
            # What Athena reads an Iceberg table by: the type, the current metadata file, the columns.
            assert entry["Parameters"]["table_type"].upper() == "ICEBERG"
            assert entry["Parameters"]["metadata_location"] == _current_metadata(spark, ref)
            assert entry["Parameters"]["metadata_location"].startswith(f"s3://{GLUE_BUCKET}/")
            spark_rows = spark.table(ref)
            assert [c["Name"] for c in entry["StorageDescriptor"]["Columns"]] == spark_rows.columns
            # The simulator added a column half-way: the Glue entry evolved with the table.
            assert "_is_deleted" in spark_rows.columns and len(spark_rows.columns) > 10

            arrow = pyiceberg.load_table((namespace, table)).scan().to_arrow()
            key = cfg.mirror.key_columns(table)[0]
            assert sorted(arrow.column(key).to_pylist()) == sorted(r[key] for r in spark_rows.select(key).collect())
    # Glue keeps no Iceberg views: Athena holds them, from the statements `athena-ddl` prints.
    assert_athena_ddl_parses(cfg, spark, source.tables())


def test_concurrent_commits_through_glue_all_land(glue_cfg: PipelineConfig, spark) -> None:
    """Glue's table version is the optimistic lock: a writer that loses re-reads and retries, none is lost."""
    ref = f"{glue_cfg.catalog.name}.concurrency.t{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {glue_cfg.catalog.name}.concurrency")
    spark.sql(f"CREATE TABLE {ref} (writer INT, n INT) USING iceberg")
    writers, commits = 2, 4
    failures: list[BaseException] = []
    start = threading.Barrier(writers)

    def write(writer: int) -> None:
        session = spark.newSession()
        try:
            start.wait(timeout=60)
            for n in range(commits):
                session.createDataFrame([(writer, n)], "writer INT, n INT").writeTo(ref).append()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures, failures
    rows = {(r["writer"], r["n"]) for r in spark.table(ref).collect()}
    assert rows == {(w, n) for w in range(writers) for n in range(commits)}
    assert spark.sql(f"SELECT count(*) AS c FROM {ref}.snapshots").first()["c"] == writers * commits
    entry = boto3.client("glue", **glue_cfg.aws.boto3_kwargs()).get_table(DatabaseName="concurrency",
                                                                            Name=ref.rsplit(".", 1)[1])["Table"]
    assert entry["Parameters"]["metadata_location"] == _current_metadata(spark, ref)
