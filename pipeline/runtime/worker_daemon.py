"""Spark's Python worker daemon, with the modules the executors' Python code needs imported before it forks.

Spark forks every Python worker of an executor from one daemon, and stops a worker that has been idle for a
minute. Each new worker then imported what the `s3-sqs` reader needs (structlog, pyarrow, boto3) and loaded
botocore's S3 model before its first task could start: 0.35-0.41 s a worker on 2 cores, 0.04-0.10 s once
preloaded, paid by a query's first batch after every quiet minute. Imported here, once, every forked worker
starts with them. `spark.preload_workers` selects this module as `spark.python.daemon.module`
(`pipeline/runtime/spark.py`); it then serves exactly as `pyspark.daemon` does.

Its workers' zip importers also read their archive again only when it changed (`SteadyZipImporter`).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import zipimport

from pyspark import daemon

PRELOADED = ("pyarrow.csv", "pyarrow.json", "pyarrow.parquet", "boto3", "pyspark.sql.pandas.types",
             "pipeline.sources.s3sqs.reader", "pipeline.sources.kinesis.reader", "cdc.framing")


def preload() -> None:
    """Import the executors' modules and load botocore's S3 model into the default session that `boto3.client`
    uses; no client is made, so no credentials are looked up before a task needs them. Best effort: a module
    that fails to import here fails, with its own error, in the task that needs it."""
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    import boto3
    import botocore.session

    core = botocore.session.get_session()
    boto3.setup_default_session(botocore_session=core)
    core.get_service_model("s3")
    core.get_component("data_loader").load_service_model("s3", "endpoint-rule-set-1")
    # pyspark's worker collects garbage after every task, which walked all of the ~110k objects imported here
    # (0.02 s a task); frozen, the collector leaves them out and no longer writes to their pages (reference
    # counts still do, so a forked worker shares most of them, not all)
    gc.freeze()


class SteadyZipImporter(zipimport.zipimporter):
    """A zip importer whose `invalidate_caches` reads the archive's directory again only when the file changed.

    pyspark's worker calls `importlib.invalidate_caches()` before every task, and on Python 3.10 and 3.11 every
    zip importer then reads its archive's whole directory again (CPython gh-103200, made lazy in 3.12). Spark
    puts pyspark.zip (1,300 entries) on the workers' path, with one importer per package imported from it:
    65 ms of a worker's CPU before each task, a fifth of a Kinesis shard read's Python time."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._stamp = _stamp(self.archive)

    def invalidate_caches(self) -> None:
        stamp = _stamp(self.archive)
        if stamp != self._stamp:
            self._stamp = stamp
            super().invalidate_caches()


def _stamp(archive: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(archive)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def steady_zip_imports() -> None:
    """Zip archives on the path are read by `SteadyZipImporter`s: those imported from already, and any next one."""
    sys.path_hooks[:] = [SteadyZipImporter if hook is zipimport.zipimporter else hook for hook in sys.path_hooks]
    for path, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            sys.path_importer_cache[path] = SteadyZipImporter(path)


if __name__ == "__main__":
    steady_zip_imports()
    preload()
    daemon.manager()
