"""Where simulated messages go. Kafka now; S3 files and Kinesis plug in behind the same two calls.

Nothing counts as sent until the broker acknowledged it: the summary reports delivery reports, not attempts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.config import kafka
from pipeline.config.settings import KafkaSettings
from simulators.faults import Message


class TransportError(RuntimeError):
    """A transport is unreachable or did not acknowledge every message; names it and its address."""


@dataclass
class Delivery:
    acknowledged: int = 0
    failed: int = 0
    first_error: str | None = None


class Transport(Protocol):
    def prepare(self, topics: list[str]) -> None: ...

    def send(self, message: Message) -> None: ...

    def close(self) -> Delivery:
        """Flush; raise TransportError unless every message was acknowledged."""


@dataclass
class KafkaTransport:
    settings: KafkaSettings
    partitions: int = 4
    delivery: Delivery = field(default_factory=Delivery)

    def __post_init__(self) -> None:
        self.address = self.settings.bootstrap_servers
        self._producer = Producer(kafka.client_conf(self.settings, **{
            "enable.idempotence": True, "acks": "all", "batch.num.messages": 10_000,
            "compression.type": "lz4", "queue.buffering.max.messages": 500_000,
            # spread over a dozen partitions, 20 ms of a simulator's output is a few dozen messages a batch, and
            # librdkafka's threads spent more CPU per message than the Python producer; 100 ms batches cut that
            # by more than half, for a latency nobody waits on here
            "linger.ms": 100,
            # librdkafka reports every message exactly once, as delivered or failed; reporting failures only
            # spares a Python callback per message, and `close` counts the rest as acknowledged once flushed
            "delivery.report.only.error": True, "on_delivery": self._on_failure,
        }))
        self._sent = 0

    def prepare(self, topics: list[str]) -> None:
        """Create the topics with the configured partitions (message key = primary key keeps per-key order)."""
        existing = kafka.topic_names(self.settings)
        admin = AdminClient(kafka.client_conf(self.settings))
        missing = [NewTopic(t, num_partitions=self.partitions) for t in topics if t not in existing]
        for topic, future in (admin.create_topics(missing).items() if missing else []):
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise TransportError(f"Kafka at {self.address} could not create topic {topic}: {exc}") from None

    def send(self, message: Message) -> None:
        while True:
            try:
                self._producer.produce(message.topic, message.value, message.key)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self._producer.poll(0.05)
        self._sent += 1
        if self._sent % 1000 == 0:
            self._producer.poll(0)

    def close(self, timeout_s: float = 60.0) -> Delivery:
        """Flush; every message the flush leaves neither queued nor reported failed was acknowledged."""
        unflushed = self._producer.flush(timeout_s)
        d = self.delivery
        d.acknowledged = self._sent - unflushed - d.failed
        if unflushed or d.failed:
            raise TransportError(
                f"Kafka at {self.address} acknowledged {d.acknowledged} of {self._sent} messages "
                f"({d.failed} failed, {unflushed} unflushed); first error: {d.first_error}"
            )
        return d

    def _on_failure(self, err, _msg) -> None:  # type: ignore[no-untyped-def]
        self.delivery.failed += 1
        self.delivery.first_error = self.delivery.first_error or str(err)
