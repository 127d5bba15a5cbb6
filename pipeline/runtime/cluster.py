"""What a run on a cluster needs, checked when it starts rather than found missing by an executor minutes in.

On a cluster the executors are other processes on other hosts: they cannot read the driver's disk, they load only
the jars `--jars` (or `--packages`) gave the application, and they import only what their own Python has or
`--py-files` / `--archives` shipped. Each check names what is missing and how to provide it
(`python -m pipeline package` writes all of it, docs/operations.md).
"""

from __future__ import annotations

import importlib.util
import re
import socket
from typing import TYPE_CHECKING, Iterator
from urllib.parse import urlparse

from pipeline.config.settings import PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROVIDE = "python -m pipeline package writes them and prints the spark-submit lines (docs/operations.md)"
# a class of each connector the stages load, and the artifact that brings it
CONNECTORS = {
    "org.apache.iceberg.spark.SparkCatalog": "iceberg-spark-runtime-4.1_2.13",
    "io.delta.sql.DeltaSparkSessionExtension": "delta-spark_4.1_2.13",
    "org.apache.spark.sql.kafka010.KafkaSourceProvider": "spark-sql-kafka-0-10_2.13",
    "org.apache.spark.sql.avro.AvroFileFormat": "spark-avro_2.13",
}
GLUE = {"org.apache.iceberg.aws.glue.GlueCatalog": "iceberg-aws-bundle"}
S3A = {"org.apache.hadoop.fs.s3a.S3AFileSystem": "hadoop-aws (the cluster's Hadoop version)"}
# what the executors' Python imports: the project's packages, and what its readers and worker daemon use
EXECUTOR_MODULES = ("pipeline", "cdc", "tables", "registry", "boto3", "rocksdict", "pyarrow", "pandas", "structlog",
                    "pydantic")
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


class ClusterError(RuntimeError):
    """The cluster lacks what the run needs; the message names it and how to provide it."""


def is_local(master: str | None) -> bool:
    """Whether the driver is its own executor (`local`, `local[*]`, `local[4,2]`): none unset means spark-submit
    decided, and it is checked once known."""
    return master is None or master.startswith("local")


def check_before_start(cfg: PipelineConfig, master: str) -> None:
    """Settings that name this machine's disk, then the master's address: both refused before a JVM waits on them."""
    local = [f"{name} = {value!r}" for name, value in _storage_settings(cfg) if on_local_disk(value)]
    if local:
        raise ClusterError(
            f"spark.master is {master}: executors on other hosts cannot reach this machine's disk, but "
            f"{'; '.join(local)}. Point each at shared storage (s3://bucket/prefix, or hdfs://…) or run with a "
            "local master (spark.master = 'local[*]')")
    if master.startswith("spark://"):
        addresses = [address.rsplit(":", 1) for address in master.removeprefix("spark://").split(",")]
        if not any(_answers(host, int(port)) for host, port in addresses):
            raise ClusterError(f"the Spark master {master} does not answer: start it (python -m pipeline stack up "
                               "--with spark-cluster, or the cluster's own start-master.sh) or correct --master / "
                               "spark.master")


def check_after_start(spark: SparkSession, cfg: PipelineConfig) -> None:
    """The connector jars on the application's class path and the executors' Python modules, every lack named in
    one message: a run that lacks both is put right in one round, not found to lack the second after the first."""
    problems = [problem for problem in (_jar_problem(spark, cfg), _python_problem(spark)) if problem]
    if problems:
        raise ClusterError(f"{'; '.join(problems)}; {PROVIDE}")


def _jar_problem(spark: SparkSession, cfg: PipelineConfig) -> str | None:
    """The connector jars missing from the application's class path, and how to add them; None when none is."""
    wanted = {**CONNECTORS, **(S3A if cfg.spark.s3_scheme == "s3a" else {})}
    missing = [artifact for name, artifact in wanted.items() if not _loads(spark, name)]
    if cfg.catalog.type == "glue" and not missing:  # its classes link against Iceberg's: without those, named alone
        missing = [artifact for name, artifact in GLUE.items() if not _loads(spark, name)]
    if not missing:
        return None
    its = "its jar" if len(missing) == 1 else "their jars"
    return f"the application's class path lacks {', '.join(missing)}: add {its} to --jars (or --packages)"


def _python_problem(spark: SparkSession) -> str | None:
    """The modules the executors' Python cannot import, and how to ship them; None when it imports every one."""
    lacking = _executor_lacks(spark)
    if not lacking:
        return None
    return (f"the executors' Python cannot import {', '.join(lacking)}: ship the project with --py-files "
            "<package>/pipeline.zip and install <package>/requirements.txt on every node (a bootstrap action, the "
            "image, or a packed virtualenv with --archives and spark.pyspark.python)")


def _storage_settings(cfg: PipelineConfig) -> list[tuple[str, str | None]]:
    """The settings naming where the stages write data or state that executors read or write."""
    table_root = ("catalog.warehouse", cfg.catalog.warehouse) if cfg.lake.format == "iceberg" else (
        "lake.delta_root", cfg.lake.delta_root)
    return [table_root, ("changelog.checkpoint", cfg.changelog.checkpoint),
            ("kinesis.metadata_path", cfg.kinesis.metadata_path)]


def on_local_disk(value: str | None) -> bool:
    """Whether a location is a path on this machine's disk (`/a`, `file:/a`), not a store's (`s3://`)."""
    return value is not None and urlparse(value).scheme in ("", "file")


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


def _loads(spark: SparkSession, class_name: str) -> bool:
    jvm = spark.sparkContext._jvm
    try:
        jvm.java.lang.Class.forName(class_name, False, jvm.Thread.currentThread().getContextClassLoader())
        return True
    except Exception as exc:  # py4j wraps ClassNotFoundException in its own error type
        if "ClassNotFoundException" in str(exc) or "NoClassDefFoundError" in str(exc):
            return False
        raise


def _executor_lacks(spark: SparkSession) -> list[str]:
    """Modules some executor cannot import, by a small job on every core; a Python worker that cannot even start
    (Spark's worker daemon imports `pipeline`) names the module in its error."""
    import pyarrow as pa

    modules = EXECUTOR_MODULES
    slots = max(spark.sparkContext.defaultParallelism, 2)

    def lacking(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            missing = [name for name in modules if importlib.util.find_spec(name) is None]
            yield pa.record_batch([pa.array(missing, pa.string())], names=["module"])

    try:  # DataFrame code, as the sources' reads: run by the Python they run (spark.sql.execution.pyspark.python)
        found = [row.module for row in spark.range(slots, numPartitions=slots).mapInArrow(lacking, "module string")
                 .distinct().collect()]
    except Exception as exc:  # the job failed: the worker's own error says which import
        named = _NO_MODULE.findall(str(exc))
        if not named:
            raise
        found = named
    return sorted(set(found))
