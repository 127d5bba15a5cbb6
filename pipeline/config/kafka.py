"""Kafka client settings in the two shapes the pipeline needs: librdkafka's and Spark's `kafka.*` options."""

from __future__ import annotations

import hashlib
import logging
import socket

from pipeline.config.settings import KafkaSettings

# librdkafka logs every refused connection, many a second while a broker is down; a probe reports the outage
# itself, once, by name and address (KafkaUnavailable).
_QUIET = logging.getLogger("pipeline.config.kafka.probe")
_QUIET.setLevel(logging.CRITICAL)


class KafkaUnavailable(RuntimeError):
    """The brokers did not answer; names the bootstrap address."""


# librdkafka's own log lines (`%4|…|FAIL|…` on stderr by default) go through Python logging under this name,
# which `pipeline.runtime.logs.configure` shows only at --log-level DEBUG or with --verbose.
LIBRDKAFKA = logging.getLogger("librdkafka")


def _settings(kafka: KafkaSettings) -> dict[str, str]:
    return {"bootstrap.servers": kafka.bootstrap_servers or "", **kafka.properties}


def client_conf(kafka: KafkaSettings, **extra: object) -> dict[str, object]:
    """confluent-kafka (librdkafka) configuration: bootstrap servers, pass-through security settings, extras,
    and the Python logger that receives librdkafka's log lines."""
    return {**_settings(kafka), "logger": LIBRDKAFKA, **extra}


# Spark's Kafka reader asks for offset ranges it already knows exist, yet each partition's task ends with a
# fetch the broker holds for Kafka's default 500 ms: a batch of 48 small partitions took 14.6 s, 2.7 s without.
SPARK_SOURCE_DEFAULTS = {"kafka.fetch.max.wait.ms": "10"}


def reader_group(kafka: KafkaSettings, checkpoint: str) -> str:
    """The consumer group of the changelog stage's reads of its batches' offset ranges, one per checkpoint
    (`kafka.properties.group.id` when set). Spark keeps an executor's Kafka consumers between reads, by group and
    partition, but gives every read a new group of its own unless one is set: each batch then opened a consumer
    a partition, and a consumer's first fetch costs 40-80 ms (16.8 s of a 200-partition batch, bench/database.py).
    The reads assign their partitions and commit nothing, so the group coordinates nothing."""
    digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
    return kafka.properties.get("group.id") or f"pipeline-changelog-{digest}"


def spark_options(kafka: KafkaSettings, headers: bool = False) -> dict[str, str]:
    """Options for Spark's Kafka source, where client settings carry a `kafka.` prefix; `kafka.properties`
    override the source defaults. `headers` adds the records' headers as a `headers` column (where Apicurio's
    serdes put schema ids)."""
    client = {f"kafka.{key}": value for key, value in _settings(kafka).items()}
    options = {**SPARK_SOURCE_DEFAULTS, **client}
    return {**options, "includeHeaders": "true"} if headers else options  # type: ignore[return-value]


def topic_names(kafka: KafkaSettings, timeout_s: float = 10.0) -> set[str]:
    """The cluster's topics; asking is also the check that the brokers answer at all. When no bootstrap address
    takes a connection (a stopped broker's port refuses it), that is said at once: librdkafka would try again for
    the whole `timeout_s` first, which held a running stage's outage line back by that long."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    refused = _refused(kafka.bootstrap_servers or "", timeout_s)
    if refused:
        raise KafkaUnavailable(f"Kafka at {kafka.bootstrap_servers} is unreachable: {refused}")
    try:
        return set(AdminClient({**client_conf(kafka), "logger": _QUIET}).list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise KafkaUnavailable(f"Kafka at {kafka.bootstrap_servers} is unreachable: {exc.args[0]}") from None


def _refused(servers: str, timeout_s: float) -> str:
    """Why none of the bootstrap `servers` takes a TCP connection, or "" when one does (or one is written in a
    form this does not read: librdkafka judges it)."""
    addresses = [server.strip() for server in servers.split(",") if server.strip()]
    errors = []
    for server in addresses:
        host, _, port = server.split("://", 1)[-1].rpartition(":")
        if not host or not port.isdigit():
            return ""
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s / len(addresses)):
                return ""
        except OSError as exc:
            errors.append(f"{server}: {exc.strerror or exc}")
    return "; ".join(errors)
