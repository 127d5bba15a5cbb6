"""`pipeline sql-server`: Spark's Thrift server, the HiveServer2 protocol, over the pipeline's catalogs.

beeline, JDBC tools (`jdbc:hive2://host:port/mirror`) and PyHive run Spark SQL on the changelog, mirror and
view names the stages use, including Iceberg/Delta time travel (`VERSION AS OF`, `TIMESTAMP AS OF`). The
server runs in this process's Spark session, so it sees exactly the catalogs the stages write; each client
connection gets its own session of it. Delta path tables and their views are named in the session catalog.

The server opens client sessions on threads that load catalog plugins with the JVM's system class loader, so
the connector jars must be on the driver's class path from the start (`server_config`), not only in
`spark.jars`: the server needs a Spark session of its own.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import structlog

from pipeline.runtime import jvm
from pipeline.config.settings import PipelineConfig
from pipeline.stack.process import port_in_use
from pipeline.ops.timetravel import register_delta_tables
from tables.lake import create_namespace

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)


class SqlServerError(RuntimeError):
    """The Thrift server cannot start; the message names the address and the fix."""


def server_config(cfg: PipelineConfig) -> PipelineConfig:
    """`cfg` with the connector jars on the driver's class path (unless spark-submit provides them)."""
    if cfg.spark.connector_jars != "local":
        return cfg
    classpath = ":".join(str(jar) for jar in jvm.spark_jars(cfg.jars_dir))
    conf = {"spark.driver.extraClassPath": classpath, **cfg.spark.conf}
    return cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"conf": conf})})


def start_sql_server(cfg: PipelineConfig, spark: SparkSession, host: str, port: int) -> Any:
    """Start the Thrift server on host:port in `spark`'s JVM; returns the server (call `.stop()`)."""
    if port_in_use(host, port):
        raise SqlServerError(f"sql-server: port {port} on {host} is already in use; pick another with --port")
    for namespace in (cfg.changelog.namespace, cfg.mirror.namespace):  # a client's `USE <namespace>` must work
        create_namespace(spark, cfg.catalog.name, namespace)
    if cfg.lake.format == "delta":
        register_delta_tables(cfg, spark)
    # The server reads its address from the session's Hadoop configuration, which session settings feed.
    spark.conf.set("hive.server2.thrift.bind.host", host)
    spark.conf.set("hive.server2.thrift.port", str(port))
    server = spark._jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        spark._jsparkSession.sqlContext())  # type: ignore[attr-defined]
    log.info("sql_server.started", url=jdbc_url(host, port, cfg.mirror.namespace), catalog=cfg.catalog.name)
    return server


def jdbc_url(host: str, port: int, namespace: str) -> str:
    """The URL clients connect to; its path is the namespace they start in (names need no catalog prefix)."""
    return f"jdbc:hive2://{host}:{port}/{namespace}"


def serve(cfg: PipelineConfig, spark: SparkSession, host: str, port: int, stopping: threading.Event) -> None:
    """Serve until `stopping` is set (SIGTERM or Ctrl-C)."""
    server = start_sql_server(cfg, spark, host, port)
    url = jdbc_url(host, port, cfg.mirror.namespace)
    print(f"sql-server: {url} (beeline -u {url}); Ctrl-C stops", flush=True)
    try:
        while not stopping.wait(1.0):  # wakes up to let the signal handlers run
            pass
    finally:
        server.stop()
        log.info("sql_server.stopped", url=url)
