"""The session around an Iceberg MERGE: a MERGE that Spark's `MergeRowsExec` metrics race fails is run once more
(any other failure is not), and a storage-partitioned join is on for the MERGE alone, never for the multi-join
plans before it (SPARK-59050)."""

from __future__ import annotations

import pytest

from pyspark.sql.types import IntegerType, StringType, StructField

from cdc.merge import Clause, MergeClauses
from tables.history import write_versions
from tables.lake import STORAGE_PARTITIONED_JOIN, IcebergLakeTable
from tests.conftest import make_config

RACE = ("org.apache.spark.SparkException: Job aborted due to stage failure: java.lang.NullPointerException: "
        "Cannot invoke \"org.apache.spark.sql.classic.SparkSession.sparkContext()\" because the return value of "
        "\"org.apache.spark.sql.execution.SparkPlan.session()\" is null\n"
        "\tat org.apache.spark.sql.execution.datasources.v2.MergeRowsExec.metrics$lzycompute(MergeRowsExec.scala:53)")
CLAUSES = MergeClauses(on="t.`id` = s.`id`", matched=(Clause("update", None, {"`v`": "s.`v`"}),), not_matched=())


class FakeConf(dict):
    def get(self, key, default=None):  # type: ignore[override]
        return super().get(key, default)

    def set(self, key, value) -> None:
        self[key] = value

    def unset(self, key) -> None:
        self.pop(key, None)


class FakeFrame:
    """A DataFrame as `write_versions` and `merge` use one: named as a view, materialised, counted."""

    def __init__(self, schema=None) -> None:
        self.schema = schema

    def createOrReplaceTempView(self, name: str) -> None:  # noqa: N802 - Spark's DataFrame API
        self.view = name

    def localCheckpoint(self) -> FakeFrame:  # noqa: N802
        return self

    def count(self) -> int:
        return 3


class FakeSpark:
    """Fails its first `failures` statements with `error`, then runs them; remembers each statement with the
    session settings it ran under."""

    def __init__(self, error: str = "", failures: int = 0, fields: list[StructField] | None = None) -> None:
        self.error, self.failures, self.fields = error, failures, fields or []
        self.conf, self.ran = FakeConf(), []
        self.catalog = self

    def sql(self, statement: str) -> FakeFrame:
        self.ran.append((statement, dict(self.conf)))
        if len(self.ran) <= self.failures:
            raise RuntimeError(self.error)
        return FakeFrame()

    def table(self, ref: str) -> FakeFrame:
        return FakeFrame(schema=type("Schema", (), {"fields": self.fields}))

    def dropTempView(self, name: str) -> None:  # noqa: N802 - Spark's catalog API
        self.dropped = name



def _merge(spark: FakeSpark) -> None:
    IcebergLakeTable(spark, "orders", "mirror", make_config()).merge(  # type: ignore[arg-type]
        FakeFrame(), CLAUSES, {"pipeline.watermark": "42"})  # type: ignore[arg-type]


def test_a_merge_the_metrics_race_failed_runs_again_with_its_commit_metadata() -> None:
    spark = FakeSpark(RACE, failures=1)
    _merge(spark)
    (first, first_conf), (second, second_conf) = spark.ran
    assert first == second and first.startswith("MERGE INTO")
    assert first_conf == second_conf == {"spark.sql.iceberg.snapshot-property.pipeline.watermark": "42"}
    assert spark.conf == {} and spark.dropped == "changes_orders"


@pytest.mark.parametrize(("error", "failures"), [
    (RACE, 2),  # the race twice in a row is not hidden
    ("java.lang.NullPointerException at org.apache.iceberg.SnapshotProducer.commit", 1),  # another NPE
    ("[MERGE_CARDINALITY_VIOLATION] The ON search condition of the MERGE statement matched a single row", 1),
])
def test_other_failures_are_raised(error: str, failures: int) -> None:
    spark = FakeSpark(error, failures)
    with pytest.raises(RuntimeError, match=error.split(" ")[0].replace("[", r"\[")):
        _merge(spark)
    assert len(spark.ran) == min(failures, 2)


def test_an_scd2_rebuild_joins_by_storage_partitions_in_its_merge_alone(monkeypatch) -> None:
    cfg = make_config("mirror.keys.t=id", "mirror.partition_by.t=bucket(4, id)", "lake.format=iceberg")
    fields = [StructField(name, IntegerType() if name == "id" else StringType())
              for name in ("id", "v", "_op", "_is_deleted", "_source_ts", "_seq", "_unchanged", "_valid_from",
                           "_valid_to", "_seq_from", "_seq_to", "_is_current")]
    spark = FakeSpark(fields=fields)
    # The JVM pass that makes the versions, as a statement run under the session's settings of the moment.
    monkeypatch.setattr("tables.history.versions_of",
                        lambda rows, keys, tracked: type("Made", (), {"rows": spark.sql("versions")}))
    base = IcebergLakeTable(spark, "t", "mirror", cfg)  # type: ignore[arg-type]
    assert write_versions(cfg, spark, base, FakeFrame(), {}) == 3  # type: ignore[arg-type]
    *rebuild, (merge, merge_conf) = spark.ran
    assert [statement for statement, _ in rebuild][2] == "versions"
    assert len(rebuild) == 4 and merge.startswith("MERGE INTO")
    assert all(key not in conf for _, conf in rebuild for key in STORAGE_PARTITIONED_JOIN)
    assert STORAGE_PARTITIONED_JOIN.items() <= merge_conf.items()
    assert all(key not in spark.conf for key in STORAGE_PARTITIONED_JOIN)  # and off again after it
