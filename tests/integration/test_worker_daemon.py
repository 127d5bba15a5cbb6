"""Spark's Python workers fork from `pipeline.runtime.worker_daemon`, so they start with the executors' modules loaded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.runtime.worker_daemon import PRELOADED

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_python_workers_start_with_the_executor_modules_imported(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    @F.udf("array<string>")
    def loaded(_):  # what a worker holds before its task imports anything (no type hints: pyspark would read them)
        import sys

        return sorted(name for name in PRELOADED if name in sys.modules)

    rows = spark.range(4).repartition(2).select(loaded("id").alias("modules")).collect()
    assert {tuple(row["modules"]) for row in rows} == {tuple(sorted(PRELOADED))}


def test_python_workers_start_with_what_the_daemon_imported_frozen(spark: SparkSession) -> None:
    """pyspark's worker collects garbage after every task: the preloaded modules' objects are left out of it."""
    from pyspark.sql import functions as F

    @F.udf("long")
    def frozen(_):
        import gc

        return gc.get_freeze_count()

    assert all(row["n"] > 10_000 for row in spark.range(2).select(frozen("id").alias("n")).collect())


def test_python_workers_read_the_zip_archives_on_their_path_once(spark: SparkSession) -> None:
    """pyspark's worker invalidates the import caches before every task; the zip archives Spark puts on the path
    (pyspark.zip) are not read again for it (CPython gh-103200)."""
    from pyspark.sql import functions as F

    @F.udf("array<string>")
    def zip_importers(_):
        import sys
        import zipimport

        return sorted({type(finder).__name__ for finder in sys.path_importer_cache.values()
                       if isinstance(finder, zipimport.zipimporter)})

    assert {tuple(row["kinds"]) for row in spark.range(2).select(zip_importers("id").alias("kinds")).collect()} == {
        ("SteadyZipImporter",)}
