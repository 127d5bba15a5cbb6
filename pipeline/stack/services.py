"""The embedded services: what each runs, which ports it owns, and how its health is read."""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid
from pathlib import Path

import requests

from pipeline.runtime import jvm
from pipeline.config.settings import KafkaSettings, PipelineConfig
from pipeline.stack.base import Port, Service
from pipeline.stack.connect import Connect
from pipeline.stack.java import find_java
from pipeline.stack.log4j import write_log_config
from pipeline.stack.postgres import Postgres
from pipeline.stack.process import port_in_use
from pipeline.stack.spark_cluster import cluster_services
from pipeline.stack.trino import Trino


class Kafka(Service):
    """A single-node KRaft broker+controller from the Maven-resolved kafka_2.13 jars."""

    name = "kafka"

    @property
    def ports(self) -> list[Port]:
        s = self.cfg.stack
        return [Port("stack.kafka_port", s.kafka_port), Port("stack.kafka_controller_port", s.kafka_controller_port)]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.cfg.stack.kafka_port}"

    def command(self) -> list[str]:
        java = find_java(17, "Kafka 4")
        classpath = str(jvm.KAFKA.resolve(self.cfg.jars_dir) / "*")
        properties = self._write_config()
        if not (self.folder / "data" / "meta.properties").exists():
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            subprocess.run(
                [str(java), "-cp", classpath, "kafka.tools.StorageTool", "format",
                 f"--cluster-id={cluster_id}", "-c", str(properties)],  # "=": an id may start with "-"
                check=True, capture_output=True, text=True,
            )
        return [
            str(java), f"-Xmx{self.cfg.stack.kafka_heap}", f"-Xms{self.cfg.stack.kafka_heap}", *self.java_options,
            f"-Dlog4j2.configurationFile={write_log_config(self.folder)}",
            "-cp", classpath, "kafka.Kafka", str(properties),
        ]

    def healthy(self) -> bool:
        from pipeline.config.kafka import KafkaUnavailable, topic_names

        try:
            topic_names(KafkaSettings(bootstrap_servers=self.address), timeout_s=2)
            return True
        except KafkaUnavailable:  # not up yet
            return False

    def _write_config(self) -> Path:
        s = self.cfg.stack
        controller = f"{self.host}:{s.kafka_controller_port}"
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{controller}",
            "listeners": f"PLAINTEXT://{self.address},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.address}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.folder / "data"),
            "num.partitions": str(s.kafka_partitions),
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # One node with thousands of test and demo partitions, mostly idle: no KRaft no-op record every
            # 500 ms for its own broker to fetch, and the partitions' high watermarks written every 30 s, not 5.
            "metadata.max.idle.interval.ms": "0",
            "replica.high.watermark.checkpoint.interval.ms": "30000",
        }
        path = self.folder / "server.properties"
        self.folder.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return path


class Registry(Service):
    """Apicurio Registry 3.x (Quarkus), H2-file or Kafka (kafkasql) storage."""

    name = "registry"

    @property
    def depends_on(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("kafka",) if self.cfg.stack.registry_storage == "kafka" else ()

    @property
    def ports(self) -> list[Port]:
        s = self.cfg.stack
        return [Port("stack.registry_port", s.registry_port),
                Port("stack.registry_management_port", s.registry_management_port)]

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.cfg.stack.registry_port}"

    def command(self) -> list[str]:
        s = self.cfg.stack
        java = find_java(21, "Apicurio Registry 3.x", s.registry_java, setting="stack.registry_java")
        app = jvm.APICURIO.resolve(self.cfg.jars_dir) / "quarkus-run.jar"
        if s.registry_storage == "kafka":
            storage = ["-Dapicurio.storage.kind=kafkasql",
                       f"-Dapicurio.kafkasql.bootstrap.servers={self.host}:{s.kafka_port}"]
        else:
            storage = ["-Dapicurio.storage.kind=sql", "-Dapicurio.storage.sql.kind=h2",
                       f"-Dapicurio.datasource.url=jdbc:h2:file:{self.folder / 'h2' / 'registry'}"]
        return [
            str(java), f"-Xmx{s.registry_heap}", *self.java_options,
            f"-Dquarkus.http.host={self.host}", f"-Dquarkus.http.port={s.registry_port}",
            f"-Dquarkus.management.host={self.host}", f"-Dquarkus.management.port={s.registry_management_port}",
            *storage,
            # Tests and demos clean up after themselves; Apicurio forbids deletes unless asked.
            "-Dapicurio.rest.deletion.artifact.enabled=true",
            "-Dapicurio.rest.deletion.artifact-version.enabled=true",
            "-Dapicurio.rest.deletion.group.enabled=true",
            "-jar", str(app),
        ]

    def healthy(self) -> bool:
        try:
            health = f"http://{self.host}:{self.cfg.stack.registry_management_port}/health/ready"
            return requests.get(health, timeout=2).ok
        except requests.RequestException:
            return False


class Moto(Service):
    """moto server: the local AWS (S3, SQS with S3 event notifications, Glue, Kinesis, STS)."""

    name = "moto"

    @property
    def ports(self) -> list[Port]:
        return [Port("stack.moto_port", self.cfg.stack.moto_port)]

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.cfg.stack.moto_port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "pipeline.stack.moto_server", "-H", self.host, "-p", str(self.cfg.stack.moto_port)]

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.address}/moto-api/", timeout=2).ok
        except requests.RequestException:
            return False


class Metastore(Service):
    """A Thrift Hive metastore (Hive 2.3, from the jars PySpark ships) on an embedded Derby database, so Hive
    and any HMS-speaking engine share the lake's tables (`catalog.type = 'hive'`)."""

    name = "metastore"

    @property
    def ports(self) -> list[Port]:
        return [Port("stack.metastore_port", self.cfg.stack.metastore_port)]

    @property
    def address(self) -> str:
        return f"thrift://{self.host}:{self.cfg.stack.metastore_port}"

    def command(self) -> list[str]:
        import pyspark

        java = find_java(17, "the Hive metastore")
        classpath = str(Path(pyspark.__file__).parent / "jars" / "*")
        settings = {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.folder / 'derby'};create=true",
            "datanucleus.schema.autoCreateAll": "true",  # the first start creates the schema
            "datanucleus.connectionPoolingType": "dbcp",  # Hive 2.3 defaults to BoneCP, which PySpark does not ship
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": str(self.folder / "warehouse"),
            "hive.metastore.event.db.notification.api.auth": "false",
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        # Hive logs asynchronously by default, through a library PySpark does not ship.
        return [str(java), "-Xmx384m", *self.java_options, f"-Dderby.system.home={self.folder}",
                "-Dhive.async.log.enabled=false",
                f"-Dhive.log.dir={self.folder}",
                "-cp", classpath,
                "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(self.cfg.stack.metastore_port),
                *[arg for key, value in settings.items() for arg in ("--hiveconf", f"{key}={value}")]]

    def healthy(self) -> bool:
        """Listening: the metastore opens its port only once its database is ready."""
        return port_in_use(self.host, self.cfg.stack.metastore_port)


def all_services(cfg: PipelineConfig) -> list[Service]:
    """In start order: a service comes after the ones it depends on."""
    metastore = [Metastore(cfg)] if cfg.stack.metastore or cfg.catalog.type == "hive" else []
    source = [Postgres(cfg), Connect(cfg)] if cfg.stack.postgres else []
    trino = [Trino(cfg)] if cfg.stack.trino else []
    cluster = cluster_services(cfg) if cfg.stack.spark_cluster else []
    return [Kafka(cfg), Moto(cfg), Registry(cfg), *metastore, *source, *trino, *cluster]
