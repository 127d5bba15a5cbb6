"""The lakehouse-ready Spark session: Iceberg and Delta side by side, Kafka and Avro connectors loaded.

`local[*]` here; under spark-submit (EMR, EMR Serverless, Kubernetes) set `spark.master` empty and
`spark.connector_jars = "submit"`, and the cluster's master and --packages take over unchanged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import urlparse

import structlog

from pipeline.runtime import class_data, class_lookups, cluster, jvm, scratch
from pipeline.config.redaction import java_replacements
from pipeline.config.settings import PipelineConfig
from tables.catalog import spark_catalog_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

SQL_EXTENSIONS = (
    "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
    "io.delta.sql.DeltaSparkSessionExtension,"
    "cdc.spark.CdcExtensions"  # jvm/cdc; a session without its jar logs a warning and decodes without it
)

# jvm/localfs: Hadoop's local file system without a `chmod` process for every file it creates
LOCAL_FILE_SYSTEM = "cdc.hadoop.LocalFileSystem"
# jvm/cdc: Iceberg's files on the local disk; Hadoop's FileIO sends the whole Hadoop configuration with every table
# a scan or a write sends to its tasks
LOCAL_FILE_IO = "cdc.iceberg.LocalFileIO"
# `spark.jvm = batch`: C2 compiles a method once it is called (or loops) ten times as often as the JVM's own
# thresholds say; C1 compiles the rest. A local driver runs the tasks too: their per-row code gets there within
# the first rows, while the start's and the planning's code, which C2 would compile for a run that ends before it
# pays back, stays with C1. And the parallel collector, whose simpler write barrier the compiled code pays for
# every stored reference. The initial load of 1M rows: 35.2 -> 28.7-29.9 CPU-s with the thresholds, then 1.4 CPU-s
# less with the collector (docs/benchmarks.md).
BATCH_JAVA_OPTIONS = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=20000 "
                      "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=400000")
BATCH_COLLECTOR = "-XX:+UseParallelGC"  # unless the user's driver options choose one: two fail the JVM's start
CHOSEN_COLLECTOR = re.compile(r"-XX:\+Use\w+GC\b")


def spark_conf(cfg: PipelineConfig, bounded: bool = False) -> dict[str, str]:
    """Every Spark setting the pipeline needs, as plain strings (what spark-submit --conf would take). `bounded`:
    the run ends when its work does (a backfill), so a local driver's JVM is `spark.jvm`'s batch one unless set
    otherwise."""
    conf = {
        "spark.app.name": cfg.spark.app_name,
        "spark.sql.extensions": SQL_EXTENSIONS,
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.defaultCatalog": cfg.catalog.name,
        "spark.sql.warehouse.dir": str(cfg.home / "spark-warehouse"),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(cfg.spark.shuffle_partitions),
        "spark.default.parallelism": str(cfg.spark.shuffle_partitions),
        "spark.ui.enabled": str(cfg.spark.ui).lower(),
        "spark.ui.showConsoleProgress": "false",  # progress is logged per job, not drawn over the logs
        "spark.driver.memory": cfg.spark.driver_memory,
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.kafka.consumer.cache.capacity": str(cfg.kafka.executor_consumers),
        # PySpark 4 records the Python call site of every Column call for its error messages: in a thread with an
        # active session, five py4j round trips a call, a third of building a projection (docs/benchmarks.md).
        # A static setting: `spark.conf` may turn it back on.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Small local tables: skip Delta's statistics collection fan-out and keep snapshots in few tasks.
        "spark.databricks.delta.snapshotPartitions": "2",
        # New Delta tables keep a change data feed: the mirror reads only the rows appended since its watermark.
        "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
    }
    if cfg.spark.master:
        conf["spark.master"] = cfg.spark.master
    if _local(cfg):
        # The driver on the loopback address: no "hostname resolves to a loopback address" warning, no lookup.
        conf["spark.driver.host"] = "127.0.0.1"
    conf["spark.driver.extraJavaOptions"] = " ".join(filter(None, [
        f"-Dlog4j2.configurationFile={log_config_path(cfg).as_uri()}", class_data.java_option(cfg, _local(cfg)),
        *_batch_java_options(cfg, bounded)]))
    if cfg.spark.preload_workers:
        conf["spark.python.daemon.module"] = "pipeline.runtime.worker_daemon"
    if _own_jars(cfg):
        conf["spark.jars"] = ",".join(str(jar) for jar in jvm.spark_jars(cfg.jars_dir))
    # a local driver whose JVM the pipeline starts with its jars (not spark-submit's, whose class path is set)
    launched_here = _local(cfg) and _own_jars(cfg)
    local_fs = [str(jar) for jar in jvm.local_fs_jars(cfg.jars_dir)] if launched_here else []
    if local_fs:
        conf["spark.hadoop.fs.file.impl"] = LOCAL_FILE_SYSTEM
    conf.update(spark_catalog_conf(cfg.catalog, cfg.aws))
    if _own_jars(cfg) and cluster.on_local_disk(cfg.catalog.warehouse):
        conf.setdefault(f"spark.sql.catalog.{cfg.catalog.name}.io-impl", LOCAL_FILE_IO)  # unless the catalog names one
    conf.update(s3a_conf(cfg))
    mine = conf["spark.driver.extraJavaOptions"]
    conf.update(cfg.spark.conf)
    if local_fs:  # on the driver's class path, beside the user's: spark-submit reads `spark.jars` through it
        paths = [path for path in conf.get("spark.driver.extraClassPath", "").split(":") if path]
        conf["spark.driver.extraClassPath"] = ":".join([*paths, *(jar for jar in local_fs if jar not in paths)])
    if mine not in conf["spark.driver.extraJavaOptions"] and "log4j2.configurationFile" not in conf[
            "spark.driver.extraJavaOptions"]:  # the user's JVM options, and the log configuration unless they name one
        conf["spark.driver.extraJavaOptions"] = f"{mine} {conf['spark.driver.extraJavaOptions']}"
    return conf


def _batch_java_options(cfg: PipelineConfig, bounded: bool) -> list[str]:
    """A local batch driver's JIT thresholds and collector (`spark.jvm`); none for a service or a remote driver."""
    if not _local(cfg) or (cfg.spark.jvm or ("batch" if bounded else "service")) != "batch":
        return []
    theirs = cfg.spark.conf.get("spark.driver.extraJavaOptions", "")
    return [BATCH_JAVA_OPTIONS, *([] if CHOSEN_COLLECTOR.search(theirs) else [BATCH_COLLECTOR])]


def _own_jars(cfg: PipelineConfig) -> bool:
    """Whether the driver loads the pipeline's resolved jars (`spark.jars`), jvm/cdc's among them; under
    spark-submit's `--packages` it may not have jvm/cdc's classes."""
    return cfg.spark.connector_jars == "local"


def _local(cfg: PipelineConfig) -> bool:
    return (cfg.spark.master or "").startswith("local")


def log_config_path(cfg: PipelineConfig) -> Path:
    return cfg.home.resolve() / "logs" / "log4j2-spark.properties"


def log_file(cfg: PipelineConfig) -> Path:
    return cfg.home.resolve() / "logs" / "spark.log"


def log_config(cfg: PipelineConfig) -> str:
    """log4j2 for the driver JVM: every line from INFO up to `<home>/logs/spark.log` (rolled at 50 MB, five
    kept), only `spark.console_log_level` and up on the console. A configuration file of our own also keeps
    Spark from printing its default-profile lines ("Using Spark's default log4j profile", "Setting default log
    level")."""
    return "\n".join([
        "status = error",
        "name = pipeline",
        "rootLogger.level = info",
        "rootLogger.appenderRef.file.ref = file",
        "rootLogger.appenderRef.console.ref = console",
        "appender.file.type = RollingFile",
        "appender.file.name = file",
        f"appender.file.fileName = {log_file(cfg)}",
        f"appender.file.filePattern = {log_file(cfg)}.%i",
        "appender.file.layout.type = PatternLayout",
        f"appender.file.layout.pattern = %d{{ISO8601}} %p %c: {_masked('%m')}%n{_masked('%ex')}",
        "appender.file.layout.alwaysWriteExceptions = false",  # the exception is in the pattern, masked
        "appender.file.policies.type = Policies",
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
        "appender.file.policies.size.size = 50MB",
        "appender.file.strategy.type = DefaultRolloverStrategy",
        "appender.file.strategy.max = 5",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        f"appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: {_masked('%m')}%n{_masked('%ex')}",
        "appender.console.layout.alwaysWriteExceptions = false",
        "appender.console.filter.threshold.type = ThresholdFilter",
        f"appender.console.filter.threshold.level = {cfg.spark.console_log_level.lower()}",
        # PySpark's gateway counts as an interpreter: unless this logger has its own level equal to the root's,
        # Spark prints "Setting default log level" and holds its console appenders at WARN.
        "logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer",
        "logger.gateway.level = info",
        # Spark's own defaults: third-party loggers that are noisy even at INFO
        "logger.jetty.name = org.sparkproject.jetty",
        "logger.jetty.level = warn",
        "logger.parquet.name = org.apache.parquet",
        "logger.parquet.level = error",
        "logger.hive.name = org.apache.hadoop.hive.metastore.RetryingHMSHandler",
        "logger.hive.level = fatal",
        # A Kafka client logs its whole configuration at INFO when it is made, and an executor makes one a topic
        # partition: through the redaction's regexes, that was half the tasks' CPU of a 500-table batch
        "logger.kafka.name = org.apache.kafka",
        "logger.kafka.level = warn",
        "",
    ])


def _masked(converter: str) -> str:
    """A PatternLayout converter with the one redaction rule applied (`%replace`), escaped for a .properties
    value: a secret that Spark or a library logs (a setting, a URL's userinfo) never reaches the log."""
    for regex, replacement in java_replacements():
        converter = f"%replace{{{converter}}}{{{regex}}}{{{replacement}}}"
    return converter.replace("\\", "\\\\")


S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
ENV_CREDENTIALS = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
DEFAULT_CREDENTIALS = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"


def s3a_conf(cfg: PipelineConfig) -> dict[str, str]:
    """Hadoop's S3A file system (`s3a://`, and `s3://` unless the cluster keeps its own) from `aws`.

    Never a secret: PySpark hands its settings to spark-submit on the command line, where any user of the
    machine can read them. Configured keys reach the JVM through its environment (`_export_aws_credentials`),
    read by the SDK's environment provider; without keys the SDK's default chain applies (environment, web
    identity, profile, container and instance roles).
    """
    aws = cfg.aws
    hadoop = {
        "fs.s3a.endpoint.region": aws.region,
        "fs.s3a.aws.credentials.provider": (
            ENV_CREDENTIALS if aws.access_key_id and aws.secret_access_key else DEFAULT_CREDENTIALS),
    }
    if aws.endpoint_url:  # moto, MinIO, a VPC endpoint: path-style requests to that address
        hadoop["fs.s3a.endpoint"] = aws.endpoint_url
        hadoop["fs.s3a.path.style.access"] = "true"
        hadoop["fs.s3a.connection.ssl.enabled"] = str(aws.endpoint_url.startswith("https:")).lower()
    if cfg.spark.s3_scheme == "s3a":
        # No s3:// file system outside EMR: EMR maps it to EMRFS, plain Hadoop has none. Mapping it to S3A lets
        # tables keep the s3:// locations Glue and Athena use. On EMR set spark.s3_scheme = "cluster".
        hadoop["fs.s3.impl"] = S3A
        hadoop["fs.AbstractFileSystem.s3.impl"] = "org.apache.hadoop.fs.s3a.S3A"
    return {f"spark.hadoop.{key}": value for key, value in hadoop.items()}


def get_spark(cfg: PipelineConfig, bounded: bool = False) -> SparkSession:
    """The process's one Spark session, started on first use (`bounded` as `spark_conf` takes it)."""
    from pyspark.sql import SparkSession

    _export_aws_credentials(cfg)
    if _local(cfg):
        # Python workers (Python data sources such as s3-sqs) need this interpreter's packages, not PATH's python3
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cfg.home.mkdir(parents=True, exist_ok=True)  # the JDBC catalog's sqlite file lives here
    conf = spark_conf(cfg, bounded)
    started = time.perf_counter()
    submitted = _submitted_conf()
    master = conf.get("spark.master") or submitted.get("spark.master")
    if cluster.is_local(master) and "spark.local.dir" not in {**submitted, **conf}:
        conf["spark.local.dir"] = str(scratch.claim(cfg.home))
    if not cluster.is_local(master):
        cluster.check_before_start(cfg, master)
        conf.update(_daemon_path(cfg, submitted))
    launched = _launch_gateway(cfg, conf)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if _own_jars(cfg):
        class_lookups.remember_class_misses(spark)
    if not cluster.is_local(master):
        cluster.check_after_start(spark, cfg)
    if launched:
        log.info("spark.logs", file=str(log_file(cfg)), console=cfg.spark.console_log_level)
    elif "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit started the JVM with the cluster's logging
        spark.sparkContext.setLogLevel("WARN")
    log.info("spark.session", master=spark.sparkContext.master, version=spark.version,
             seconds=round(time.perf_counter() - started, 1))
    return spark


def _submitted_conf() -> dict[str, str]:
    """The settings spark-submit gave the JVM it started (nothing when this process starts its own)."""
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


def _daemon_path(cfg: PipelineConfig, submitted: dict[str, str]) -> dict[str, str]:
    """Spark adds `--py-files` to a Python worker's path in each task, after the worker daemon has started; the
    preloading daemon (`pipeline.runtime.worker_daemon`) is itself shipped in them, so it gets them on its
    PYTHONPATH, by the names the executors fetch them under into their working folder. The driver's own Python
    workers get that PYTHONPATH too, and the planners of the Python streaming sources (`s3-sqs`,
    `aws-kinesis`) get no `--py-files` from Spark at all: they find the files by their paths on the driver's
    disk (client mode), which an executor on another host simply does not have."""
    files = [urlparse(f) for f in submitted.get("spark.submit.pyFiles", "").split(",") if f]
    shipped = [Path(f.path).name for f in files]
    on_driver = [f.path for f in files if f.scheme in ("", "file") and Path(f.path).is_file()]
    if not (cfg.spark.preload_workers and shipped):
        return {}
    key = "spark.executorEnv.PYTHONPATH"
    given = filter(None, [submitted.get(key) or cfg.spark.conf.get(key)])
    return {key: os.pathsep.join([*shipped, *on_driver, *given])}


# The JVM itself prints this when Spark's launcher adds `--add-modules=jdk.incubator.vector`; no JVM flag turns
# it off, so the gateway's stderr passes through a filter that drops it.
_JVM_NOISE = (b"WARNING: Using incubator modules",)


def _launch_gateway(cfg: PipelineConfig, conf: dict[str, str]) -> bool:
    """Start the driver JVM (what `getOrCreate` would do) with our log configuration in place and its stderr
    filtered; False when a JVM already runs (spark-submit, or a session started before)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._gateway is not None:
        return False
    path = log_config_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(log_config(cfg))
    gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(list(conf.items())),
                             popen_kwargs={"stderr": subprocess.PIPE})
    threading.Thread(target=_forward, args=(gateway.proc.stderr, cfg.spark.console_log_level != "ERROR"),
                     name="spark-stderr", daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway)  # PySpark's own entry for a gateway launched by the caller
    return True


def _forward(stream: IO[bytes], verbose: bool) -> None:
    """Copy the JVM's stderr to ours, line by line, without the JVM's start-up notice unless verbose."""
    for line in iter(stream.readline, b""):
        if not verbose and line.startswith(_JVM_NOISE):
            continue
        try:
            sys.stderr.buffer.write(line) if hasattr(sys.stderr, "buffer") else sys.stderr.write(line.decode())
            sys.stderr.flush()
        except (ValueError, OSError):  # our stderr was closed or swapped: keep draining the pipe
            pass


def _export_aws_credentials(cfg: PipelineConfig) -> None:
    """Let the JVM's AWS SDK find configured credentials (it reads the environment the JVM starts with).

    Without configured keys nothing is set and the SDK's default chain (instance role, profile) applies.
    """
    os.environ.setdefault("AWS_REGION", cfg.aws.region)
    if cfg.aws.access_key_id and cfg.aws.secret_access_key:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", cfg.aws.access_key_id.get_secret_value())
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", cfg.aws.secret_access_key.get_secret_value())
