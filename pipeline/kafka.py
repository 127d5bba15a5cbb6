"""Kafka client settings in the two shapes the pipeline needs: librdkafka's and Spark's `kafka.*` options."""

from __future__ import annotations

from pipeline.config import KafkaSettings


def client_conf(kafka: KafkaSettings, **extra: str | int | bool) -> dict[str, str | int | bool]:
    """confluent-kafka (librdkafka) configuration: bootstrap servers, pass-through security settings, extras."""
    return {"bootstrap.servers": kafka.bootstrap_servers or "", **kafka.properties, **extra}


def spark_options(kafka: KafkaSettings) -> dict[str, str]:
    """Options for Spark's Kafka source and sink, where client settings carry a `kafka.` prefix."""
    return {f"kafka.{key}": value for key, value in client_conf(kafka).items()}  # type: ignore[misc]
