"""The lakehouse-ready Spark session: Iceberg and Delta side by side, Kafka and Avro connectors loaded.

`local[*]` here; under spark-submit (EMR, EMR Serverless, Kubernetes) set `spark.master` empty and
`spark.connector_jars = "submit"`, and the cluster's master and --packages take over unchanged.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

import structlog

from pipeline import jvm
from pipeline.config import PipelineConfig
from tables.catalog import spark_catalog_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

SQL_EXTENSIONS = (
    "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
    "io.delta.sql.DeltaSparkSessionExtension"
)


def spark_conf(cfg: PipelineConfig) -> dict[str, str]:
    """Every Spark setting the pipeline needs, as plain strings (what spark-submit --conf would take)."""
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
        # Small local tables: skip Delta's statistics collection fan-out and keep snapshots in few tasks.
        "spark.databricks.delta.snapshotPartitions": "2",
        # New Delta tables keep a change data feed: the mirror reads only the rows appended since its watermark.
        "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
    }
    if cfg.spark.master:
        conf["spark.master"] = cfg.spark.master
    if cfg.spark.preload_workers:
        conf["spark.python.daemon.module"] = "pipeline.worker_daemon"
    if cfg.spark.connector_jars == "local":
        conf["spark.jars"] = ",".join(str(jar) for jar in jvm.spark_jars(cfg.jars_dir))
    conf.update(spark_catalog_conf(cfg.catalog, cfg.aws))
    conf.update(s3a_conf(cfg))
    conf.update(cfg.spark.conf)
    return conf


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


def get_spark(cfg: PipelineConfig) -> SparkSession:
    """The process's one Spark session, started on first use."""
    from pyspark.sql import SparkSession

    _export_aws_credentials(cfg)
    if (cfg.spark.master or "").startswith("local"):
        # Python workers (Python data sources such as s3-sqs) need this interpreter's packages, not PATH's python3
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    cfg.home.mkdir(parents=True, exist_ok=True)  # the JDBC catalog's sqlite file lives here
    builder = SparkSession.builder
    for key, value in spark_conf(cfg).items():
        builder = builder.config(key, value)
    started = time.perf_counter()
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    log.info("spark.session", master=spark.sparkContext.master, version=spark.version,
             seconds=round(time.perf_counter() - started, 1))
    return spark


def _export_aws_credentials(cfg: PipelineConfig) -> None:
    """Let the JVM's AWS SDK find configured credentials (it reads the environment the JVM starts with).

    Without configured keys nothing is set and the SDK's default chain (instance role, profile) applies.
    """
    os.environ.setdefault("AWS_REGION", cfg.aws.region)
    if cfg.aws.access_key_id and cfg.aws.secret_access_key:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", cfg.aws.access_key_id.get_secret_value())
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", cfg.aws.secret_access_key.get_secret_value())
