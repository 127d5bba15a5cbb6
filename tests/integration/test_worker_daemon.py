"""Spark's Python workers fork from `pipeline.runtime.worker_daemon`, so they start with the executors' modules loaded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.runtime.worker_daemon import PRELOADED

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_python_workers_start_with_the_executor_modules_imported(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    @F.udf("array<string>")
    def loaded(_: int) -> list[str]:  # what a worker holds before its task imports anything
        import sys

        return sorted(name for name in PRELOADED if name in sys.modules)

    rows = spark.range(4).repartition(2).select(loaded("id").alias("modules")).collect()
    assert {tuple(row["modules"]) for row in rows} == {tuple(sorted(PRELOADED))}
