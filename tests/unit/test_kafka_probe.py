"""The brokers' check (`pipeline.config.kafka.topic_names`) on addresses that refuse or take a connection."""

from __future__ import annotations

import socket

import pytest

from pipeline.config import kafka
from pipeline.config.settings import KafkaSettings
from tests.conftest import free_port


def test_brokers_that_refuse_connections_are_named_without_asking_librdkafka(monkeypatch) -> None:
    def no_client(*args, **kwargs):
        raise AssertionError("librdkafka was asked, and would have waited out its timeout")

    monkeypatch.setattr("confluent_kafka.admin.AdminClient", no_client)
    ports = [free_port(), free_port()]
    servers = ",".join(f"127.0.0.1:{port}" for port in ports)
    with pytest.raises(kafka.KafkaUnavailable, match=rf"Kafka at {servers} is unreachable: "
                                                     rf"127\.0\.0\.1:{ports[0]}: .*; 127\.0\.0\.1:{ports[1]}: "):
        kafka.topic_names(KafkaSettings(bootstrap_servers=servers))


def test_an_address_that_takes_a_connection_is_asked_through_librdkafka(monkeypatch) -> None:
    asked = []

    class Client:
        def __init__(self, conf) -> None:
            asked.append(conf["bootstrap.servers"])

        def list_topics(self, timeout):
            return type("Metadata", (), {"topics": {"a": None}})()

    monkeypatch.setattr("confluent_kafka.admin.AdminClient", Client)
    with socket.create_server(("127.0.0.1", 0)) as listening:
        servers = f"127.0.0.1:{free_port()},PLAINTEXT://127.0.0.1:{listening.getsockname()[1]}"
        assert kafka.topic_names(KafkaSettings(bootstrap_servers=servers)) == {"a"}
    assert asked == [servers]
