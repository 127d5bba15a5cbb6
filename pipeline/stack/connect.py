"""Kafka Connect in distributed mode: Debezium's Postgres connector and Apicurio's converter on its classpath.

Distributed, not standalone, so connectors are registered, replaced and deleted through the REST API while the
worker runs (`pipeline.stack.connect_api`); its configs, offsets and statuses live in the stack's Kafka.
"""

from __future__ import annotations

from pathlib import Path

import requests

from pipeline.runtime import jvm
from pipeline.stack.base import Port, Service
from pipeline.stack.java import find_java
from pipeline.stack.log4j import write_log_config

POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


class Connect(Service):
    """One Connect worker; healthy once its REST API lists Debezium's Postgres connector among its plugins."""

    name = "connect"
    depends_on = ("kafka", "registry", "postgres")

    @property
    def ports(self) -> list[Port]:
        return [Port("stack.connect_port", self.cfg.stack.connect_port)]

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.cfg.stack.connect_port}"

    def command(self) -> list[str]:
        java = find_java(17, "Kafka Connect 4")
        classpath = str(jvm.CONNECT.resolve(self.cfg.jars_dir) / "*")
        return [str(java), f"-Xmx{self.cfg.stack.connect_heap}", *self.java_options,
                f"-Dlog4j2.configurationFile={write_log_config(self.folder)}",
                "-cp", classpath, "org.apache.kafka.connect.cli.ConnectDistributed", str(self._write_config())]

    def healthy(self) -> bool:
        try:
            plugins = requests.get(f"{self.address}/connector-plugins", timeout=2)
            return plugins.ok and any(p.get("class") == POSTGRES_CONNECTOR for p in plugins.json())
        except (requests.RequestException, ValueError):
            return False

    def _write_config(self) -> Path:
        s = self.cfg.stack
        settings = {
            "bootstrap.servers": f"{self.host}:{s.kafka_port}",
            "group.id": "pipeline-connect",
            "listeners": self.address,
            "rest.advertised.host.name": self.host,
            "rest.advertised.port": str(s.connect_port),
            "config.storage.topic": "_connect-configs",
            "offset.storage.topic": "_connect-offsets",
            "status.storage.topic": "_connect-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            # Connectors name their own (Apicurio) converters; these only serve Connect's internal topics.
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "offset.flush.interval.ms": "1000",
            "plugin.discovery": "only_scan",  # everything is on the classpath; no plugin folders to index
        }
        path = self.folder / "connect-distributed.properties"
        self.folder.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return path
