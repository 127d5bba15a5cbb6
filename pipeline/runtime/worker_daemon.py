"""Spark's Python worker daemon, with the modules the executors' Python code needs imported before it forks.

Spark forks every Python worker of an executor from one daemon, and stops a worker that has been idle for a
minute. Each new worker then imported what the `s3-sqs` reader needs (structlog, pyarrow, boto3) and loaded
botocore's S3 model before its first task could start: 0.35-0.41 s a worker on 2 cores, 0.04-0.10 s once
preloaded, paid by a query's first batch after every quiet minute. Imported here, once, every forked worker
starts with them. `spark.preload_workers` selects this module as `spark.python.daemon.module`
(`pipeline/runtime/spark.py`); it then serves exactly as `pyspark.daemon` does.
"""

from __future__ import annotations

import gc
import importlib

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


if __name__ == "__main__":
    preload()
    daemon.manager()
