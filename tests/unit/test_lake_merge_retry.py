"""An Iceberg MERGE that Spark's `MergeRowsExec` metrics race fails is run once more; any other failure is not."""

from __future__ import annotations

import pytest

from cdc.merge import Clause, MergeClauses
from tables.lake import IcebergLakeTable
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


class FakeSpark:
    """Fails its first `failures` statements with `error`, then runs them; remembers what it ran and when the
    commit's metadata was set."""

    def __init__(self, error: str, failures: int) -> None:
        self.error, self.failures = error, failures
        self.conf, self.ran = FakeConf(), []
        self.catalog = self

    def sql(self, statement: str) -> None:
        self.ran.append((statement, dict(self.conf)))
        if len(self.ran) <= self.failures:
            raise RuntimeError(self.error)

    def dropTempView(self, name: str) -> None:  # noqa: N802 - Spark's catalog API
        self.dropped = name


class FakeSource:
    def createOrReplaceTempView(self, name: str) -> None:  # noqa: N802 - Spark's DataFrame API
        self.view = name


def _merge(spark: FakeSpark) -> None:
    IcebergLakeTable(spark, "orders", "mirror", make_config()).merge(  # type: ignore[arg-type]
        FakeSource(), CLAUSES, {"pipeline.watermark": "42"})  # type: ignore[arg-type]


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
