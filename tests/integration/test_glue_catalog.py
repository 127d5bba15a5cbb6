"""Glue mode (Athena's catalog) on moto: the stack's Glue keeps AWS's optimistic lock, concurrent commits all
land, and Delta tables are registered as Athena reads them. What the stages write as Iceberg tables in Glue
is checked in `test_trino.py`, on the Glue-mode landing that Trino reads."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import boto3
import pytest

from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import MirrorStage
from tables.glue_delta import DeltaGlue
from tables.lake import lake_table
from tests.conftest import GLUE_BUCKET, GLUE_CATALOG, with_catalog
from tests.integration.test_mirror import _assert_equal_to_truth, _landed_source

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def glue_cfg(cfg: PipelineConfig, stack) -> PipelineConfig:
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    if GLUE_BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=GLUE_BUCKET)
    return with_catalog(cfg, GLUE_CATALOG)


def _current_metadata(spark, ref: str) -> str:
    return spark.sql(f"SELECT file FROM {ref}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()["file"]


def test_the_stacks_glue_refuses_an_update_at_a_stale_version_as_aws_does(glue_cfg: PipelineConfig) -> None:
    """The optimistic lock the next test relies on (`pipeline/stack/moto_server.py`): moto alone ignores it."""
    glue = boto3.client("glue", **glue_cfg.aws.boto3_kwargs())
    database, name = f"versions{uuid.uuid4().hex[:8]}", "t"
    glue.create_database(DatabaseInput={"Name": database})
    glue.create_table(DatabaseName=database, TableInput={"Name": name, "Parameters": {"metadata_location": "v1"}})
    read = glue.get_table(DatabaseName=database, Name=name)["Table"]["VersionId"]
    glue.update_table(DatabaseName=database, TableInput={"Name": name, "Parameters": {"metadata_location": "v2"}},
                      VersionId=read)
    with pytest.raises(glue.exceptions.ConcurrentModificationException):
        glue.update_table(DatabaseName=database, TableInput={"Name": name, "Parameters": {"metadata_location": "v3"}},
                          VersionId=read)
    assert glue.get_table(DatabaseName=database, Name=name)["Table"]["Parameters"]["metadata_location"] == "v2"


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


def test_delta_tables_on_s3_are_registered_in_glue_as_athena_reads_them(glue_cfg: PipelineConfig, spark,
                                                                        tmp_path: Path) -> None:
    """`lake.format = delta` on s3:// (S3A) with `lake.delta_glue`: the stages register each Delta table in
    Glue as Athena's native Delta support expects, and the entry leads back to the same rows."""
    run = uuid.uuid4().hex[:6]
    cfg = glue_cfg.model_copy(update={
        # Namespaces of its own: the Iceberg tests keep `changelog.dead_letters` in the same Glue catalog.
        "lake": glue_cfg.lake.model_copy(update={"delta_root": f"s3://{GLUE_BUCKET}/delta-{run}", "delta_glue": True}),
        "changelog": glue_cfg.changelog.model_copy(update={"namespace": f"changelog_{run}"}),
        "mirror": glue_cfg.mirror.model_copy(update={"namespace": f"mirror_{run}"}),
    })
    cfg, source, truth = _landed_source(cfg, spark, tmp_path, "gd", lake_format="delta")
    MirrorStage(cfg, spark).run_once()
    _assert_equal_to_truth(cfg, spark, truth, source.tables())

    glue = boto3.client("glue", **cfg.aws.boto3_kwargs())
    changelog_tables = source.tables() + [cfg.changelog.dead_letter_table]
    for namespace, tables in ((cfg.changelog.namespace, changelog_tables), (cfg.mirror.namespace, source.tables())):
        assert sorted(t["Name"] for t in glue.get_tables(DatabaseName=namespace)["TableList"]) == sorted(tables)
        for table in tables:
            entry = glue.get_table(DatabaseName=namespace, Name=table)["Table"]
            location = entry["StorageDescriptor"]["Location"]
            assert entry["TableType"] == "EXTERNAL_TABLE"
            assert entry["Parameters"]["table_type"] == "DELTA"
            assert location == f"s3://{GLUE_BUCKET}/delta-{run}/{namespace}/{table}"
            # Athena reads the table at that location; Spark does the same, through S3A.
            at_location = spark.read.format("delta").load(location)
            assert [c["Name"] for c in entry["StorageDescriptor"]["Columns"]] == at_location.columns
            assert at_location.count() == lake_table(cfg, spark, namespace, table).read().count() > 0
    # A column the table gains reaches Glue at the next sync; a sync with nothing new changes nothing.
    table, namespace = f"{source.prefix}_artists", cfg.mirror.namespace
    path = f"{cfg.lake.delta_root}/{namespace}/{table}"
    registrar = DeltaGlue(cfg, spark)
    assert not registrar.sync(namespace, table)
    spark.read.format("delta").load(path).limit(1).selectExpr("*", "'x' AS added_later").write.format("delta") \
        .mode("append").option("mergeSchema", "true").save(path)
    assert registrar.sync(namespace, table)
    columns = glue.get_table(DatabaseName=namespace, Name=table)["Table"]["StorageDescriptor"]["Columns"]
    assert columns[-1] == {"Name": "added_later", "Type": "string"}
