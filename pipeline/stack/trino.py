"""Trino, the engine Athena (engine version 3) is built on, reading the lake the way Athena does.

Catalog `awsdatacatalog`, as Athena names its own: Trino's Iceberg connector on the Glue Data Catalog and S3
that the `aws` settings name (the stack's moto by default), with Trino's native S3 file system. That is
Athena's configuration, so a table or view Trino reads here is one Athena has a chance to read, and an error
Trino gives here is the one to expect there (docs/sql-access.md). Athena reads the Delta tables of the same
Glue databases natively; a Trino connector reads one table format, so catalog `delta` is Trino's Delta Lake
connector on the same Glue and S3, showing only the Delta tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import requests
import trino.dbapi
import trino.exceptions

from pipeline.config.settings import PipelineConfig
from pipeline.runtime import jvm
from pipeline.stack.base import Port, Service
from pipeline.stack.java import find_java

CATALOG = "awsdatacatalog"
DELTA_CATALOG = "delta"
JAVA_MAJOR = 24  # Trino 476 checks for Java 24.0.1 at start-up and stops on anything older
# Trino's deployment guide's JVM settings, as a production Trino (and so Athena's engine) runs. Measured on the
# 10M-row mirror (docs/benchmarks.md): with a 1 GiB heap and the JVM's defaults, G1's collections took about as
# much CPU per query as the query itself.
JVM_OPTIONS = (
    "-XX:+UseG1GC", "-XX:G1HeapRegionSize=32M", "-XX:+ExplicitGCInvokesConcurrent", "-XX:+ExitOnOutOfMemoryError",
    "-XX:-OmitStackTraceInFastThrow", "-XX:ReservedCodeCacheSize=512M", "-XX:PerMethodRecompilationCutoff=10000",
    "-XX:PerBytecodeRecompilationCutoff=10000", "-Djdk.nio.maxCachedBufferSize=2000000",
)


class Trino(Service):
    """A single-node Trino (coordinator and worker in one JVM); healthy once it answers a query."""

    name = "trino"
    depends_on = ("moto",)

    @property
    def ports(self) -> list[Port]:
        return [Port("stack.trino_port", self.cfg.stack.trino_port)]

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.cfg.stack.trino_port}"

    def command(self) -> list[str]:
        s = self.cfg.stack
        java = find_java(JAVA_MAJOR, "Trino 476", s.trino_java, setting="stack.trino_java")
        server = jvm.TRINO.resolve(self.cfg.jars_dir)
        etc = self._write_config(server)
        return [
            str(java), f"-Xmx{s.trino_heap}", *JVM_OPTIONS, *self.java_options,
            "-Djdk.attach.allowAttachSelf=true", "-XX:+EnableDynamicAgentLoading", "-Dfile.encoding=UTF-8",
            "--enable-native-access=ALL-UNNAMED", "--sun-misc-unsafe-memory-access=allow",
            f"-Dconfig={etc / 'config.properties'}", f"-Dnode.data-dir={self.folder / 'data'}",
            "-Dnode.environment=pipeline", "-Dnode.id=pipeline",
            "-cp", str(server / "lib" / "*"), "io.trino.server.TrinoServer",
        ]

    def healthy(self) -> bool:
        """A query, not `/v1/info`: Trino says it has started seconds before its node is registered to run one
        (a query then fails with NO_NODES_AVAILABLE)."""
        try:
            cursor = connect(self.cfg, max_attempts=1, request_timeout=2).cursor()
            cursor.execute("SELECT 1")
            return cursor.fetchall() == [[1]]
        except (trino.exceptions.Error, trino.exceptions.HttpError, requests.RequestException):
            return False

    def _write_config(self, server: Path) -> Path:
        etc = self.folder / "etc"
        (etc / "catalog").mkdir(parents=True, exist_ok=True)
        _write_properties(etc / "config.properties", {
            "coordinator": "true",
            "node-scheduler.include-coordinator": "true",
            "http-server.http.port": str(self.cfg.stack.trino_port),
            "discovery.uri": self.address,
            "plugin.dir": str(server / "plugin"),
            "catalog.config-dir": str(etc / "catalog"),
        })
        _write_properties(etc / "catalog" / f"{CATALOG}.properties", self._catalog())
        _write_properties(etc / "catalog" / f"{DELTA_CATALOG}.properties", self._delta_catalog())
        return etc

    def _catalog(self) -> dict[str, str]:
        """Iceberg on Glue and S3, as the pipeline's own clients reach them (`aws` settings)."""
        return {
            "connector.name": "iceberg",
            "iceberg.catalog.type": "glue",
            # Trino would otherwise write the columns it reads into each Glue table's parameters, a write
            # that races the pipeline's commits on Glue's version lock; Athena only reads.
            "iceberg.glue.cache-table-metadata": "false",
            **self._glue_and_s3(),
        }

    def _delta_catalog(self) -> dict[str, str]:
        """Delta Lake on the same Glue and S3; the Iceberg tables beside the Delta ones are not its own."""
        return {"connector.name": "delta-lake", "hive.metastore": "glue", "delta.hide-non-delta-lake-tables": "true",
                **self._glue_and_s3()}

    def _glue_and_s3(self) -> dict[str, str]:
        aws = self.cfg.aws
        settings = {
            "hive.metastore.glue.region": aws.region,
            "fs.native-s3.enabled": "true",
            "s3.region": aws.region,
        }
        if aws.endpoint_url:
            settings.update({"hive.metastore.glue.endpoint-url": aws.endpoint_url, "s3.endpoint": aws.endpoint_url,
                             "s3.path-style-access": "true"})
        if aws.access_key_id and aws.secret_access_key:  # else the default credential chain, as boto3 does
            key, secret = aws.access_key_id.get_secret_value(), aws.secret_access_key.get_secret_value()
            settings.update({"hive.metastore.glue.aws-access-key": key, "hive.metastore.glue.aws-secret-key": secret,
                             "s3.aws-access-key": key, "s3.aws-secret-key": secret})
        return settings


def connect(cfg: PipelineConfig, **options: Any) -> trino.dbapi.Connection:
    """A client session on the stack's Trino in the catalog named as Athena's, so Athena's statements, which
    name databases and tables only, run as printed."""
    return trino.dbapi.connect(host=cfg.stack.host, port=cfg.stack.trino_port, user="pipeline", catalog=CATALOG,
                               **options)


def _write_properties(path: Path, settings: dict[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
