"""The simulator through the real Kafka and Apicurio: what arrives equals what the source committed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from pipeline.config import kafka
from pipeline.config.settings import PipelineConfig
from registry.ccompat import ConfluentCompatClient
from registry.serde import AvroSerde
from simulators.formats import FILE_FORMATS, FORMATS
from simulators.simulation import Simulation, SimulationOptions, Summary
from simulators.tables import TABLE_SETS
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore
from tests.conftest import REPO, TEST_SETTINGS, free_port

pytestmark = pytest.mark.integration


def _simulate(cfg: PipelineConfig, tmp_path: Path, **options) -> tuple[Summary, TruthStore]:
    prefix = f"sim{uuid.uuid4().hex[:8]}"
    truth = TruthStore(tmp_path / f"{prefix}.db")
    serde = AvroSerde(ConfluentCompatClient.from_settings(cfg.registry))
    summary = Simulation(SimulationOptions(topic_prefix=prefix, **options), KafkaTransport(cfg.kafka), truth, serde).run(progress=False)
    return summary, truth


def _consume(cfg: PipelineConfig, topics: list[str], expected: int) -> list:
    consumer = Consumer(kafka.client_conf(cfg.kafka, **{"group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest"}))
    consumer.subscribe(topics)
    messages, deadline = [], time.monotonic() + 60
    while len(messages) < expected and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            messages.append(msg)
    consumer.close()
    return messages


def _identity(fmt: str, topic: str, record: dict) -> tuple:
    table = next(t for t in TABLE_SETS["all"] if topic.endswith(f".{t.schema}.{t.name}"))
    if fmt == "debezium":
        row = record["after"] or record["before"]
        return table.qualified, row[table.key], record["source"]["lsn"]
    if fmt == "debezium-unwrapped":
        return table.qualified, record[table.key], record["__lsn"]
    meta, sep = record["metadata"], ("-" if fmt == "dms-json" else "_")
    return table.qualified, record["data"][table.key], meta[f"transaction{sep}id"], meta[f"transaction{sep}record{sep}id"]


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f not in FILE_FORMATS])  # files: test_s3_sqs_changelog
def test_every_format_round_trips_with_faults(fmt: str, stack, cfg: PipelineConfig, tmp_path: Path) -> None:
    summary, truth = _simulate(cfg, tmp_path, format=fmt, events=900, snapshot_rows=30, duplicates=0.03,
                               reorder=0.03, poison=0.03, evolve_at=450, seed=21)
    messages = _consume(cfg, summary.topics, summary.messages_acknowledged)
    assert len(messages) == summary.messages_acknowledged
    format_ = FORMATS[fmt]()
    serde = AvroSerde(ConfluentCompatClient.from_settings(cfg.registry))  # fetches writer schemas by id
    decoded, failures = [], 0
    for msg in messages:
        try:
            if format_.avro:
                table = next(t for t in TABLE_SETS["all"] if msg.topic().endswith(t.name))
                record = serde.deserialize(msg.value(), format_.value_schema(table, 2))  # the latest reader
            else:
                record = json.loads(msg.value())
                record["metadata"]  # noqa: B018 - a poison message lacks it
            decoded.append(_identity(fmt, msg.topic(), record))
        except Exception:
            failures += 1
    poison = sum(n for kind, n in summary.faults.items() if kind.startswith("poison:"))
    assert failures == poison > 0
    expected = [(c.table, c.key, c.lsn) if fmt.startswith("debezium") else (c.table, c.key, c.tx_id, c.tx_position)
                for c in truth.changes()]
    assert set(decoded) == set(expected)
    assert len(decoded) - len(expected) == summary.faults["duplicates"] > 0
    assert max(Counter(decoded).values()) >= 2


def test_old_and_new_writers_interleave_after_evolution(stack, cfg: PipelineConfig, tmp_path: Path) -> None:
    summary, _ = _simulate(cfg, tmp_path, format="debezium-unwrapped", tables="employees", events=600,
                           snapshot_rows=50, evolve_at=200)
    client = ConfluentCompatClient.from_settings(cfg.registry)
    topic = summary.topics[0]
    messages = _consume(cfg, [topic], summary.messages_acknowledged)
    ids_in_order = [int.from_bytes(m.value()[1:5], "big") for m in sorted(messages, key=lambda m: (m.partition(), m.offset()))]
    v1, v2 = ids_in_order[0], next(i for i in ids_in_order if i != ids_in_order[0])
    after_first_v2 = ids_in_order[ids_in_order.index(v2):]
    assert v1 in after_first_v2  # an old writer still writes after the new one started
    assert '"email"' in client.schema(v2) and '"email"' not in client.schema(v1)


def _cli(*args: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    settings = [a for s in [*TEST_SETTINGS, *extra] for a in ("--set", s)]
    return subprocess.run([sys.executable, "-m", "pipeline", *settings, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_cli_run_prints_a_summary(stack, tmp_path: Path) -> None:
    done = _cli("simulate", "--format", "dms-json", "--tables", "employees", "--events", "300", "--topic-prefix",
                f"cli{uuid.uuid4().hex[:6]}", "--truth", str(tmp_path / "t.db"), "--duplicates", "0.1")
    assert done.returncode == 0, done.stderr
    assert "events: 300" in done.stdout and "hr.public.employee" in done.stdout and "duplicates=" in done.stdout
    assert TruthStore(tmp_path / "t.db").count() == 300


def test_kafka_down_is_named_and_nothing_is_reported_sent(stack, tmp_path: Path) -> None:
    port = free_port()
    done = _cli("simulate", "--format", "dms-json", "--events", "10", "--truth", str(tmp_path / "t.db"),
                extra=(f"kafka.bootstrap_servers=127.0.0.1:{port}",))
    assert done.returncode == 1
    assert f"Kafka at 127.0.0.1:{port} is unreachable" in done.stderr
    assert "events:" not in done.stdout


def test_registry_down_is_named(stack, tmp_path: Path) -> None:
    port = free_port()
    done = _cli("simulate", "--format", "debezium", "--events", "10", "--truth", str(tmp_path / "t.db"),
                extra=(f"registry.url=http://127.0.0.1:{port}",))
    assert done.returncode == 1
    assert f"127.0.0.1:{port}" in done.stderr and "unreachable" in done.stderr
    assert "events:" not in done.stdout
