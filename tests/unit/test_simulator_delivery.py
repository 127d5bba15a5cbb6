"""What the simulator's fast paths must not change: delivery accounting, the truth's index, bound serializers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pipeline.config.settings import KafkaSettings
from registry.avro import avro_schema
from registry.serde import AvroSerde
from simulators.faults import Message
from simulators.simulation import Simulation, SimulationOptions
from simulators.source import SourceDatabase
from simulators.tables import TABLE_SETS
from simulators.transport import KafkaTransport, TransportError
from simulators.truth import TruthStore
from tests.conftest import free_port
from tests.unit.test_simulator import _ListTransport, _MemoryRegistry

KEY = {"type": "record", "name": "Key", "namespace": "t", "fields": [{"name": "id", "type": "long"}]}


def test_messages_no_broker_acknowledged_are_not_counted_as_sent() -> None:
    """Only failures are reported by librdkafka here: each one must still fail the close, none count as sent."""
    settings = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}", properties={"message.timeout.ms": "500"})
    transport = KafkaTransport(settings)
    for i in range(3):
        transport.send(Message("nowhere", str(i).encode(), b"value"))
    with pytest.raises(TransportError, match=r"acknowledged 0 of 3 messages \(3 failed, 0 unflushed\)"):
        transport.close(timeout_s=10)


def _indexes(path: Path) -> list[str]:
    return [name for (name,) in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type = 'index'")]


def test_the_key_index_is_built_after_recording_by_the_run_or_by_the_first_query(tmp_path: Path) -> None:
    options = SimulationOptions(events=300, snapshot_rows=20, tables="employees")
    simulation = Simulation(options, _ListTransport(), TruthStore(tmp_path / "run.db"), AvroSerde(_MemoryRegistry()))
    simulation.run(progress=False)
    assert _indexes(tmp_path / "run.db") == ["changes_by_key"]

    truth = TruthStore(tmp_path / "recorded.db")
    truth.record(SourceDatabase(TABLE_SETS["employees"], rows_per_table=5).snapshot())
    assert _indexes(tmp_path / "recorded.db") == []
    assert truth.tables() == ["hr.public.employee"] and _indexes(tmp_path / "recorded.db") == ["changes_by_key"]


def test_a_bound_serializer_writes_what_serialize_writes_and_registers_once() -> None:
    registry = _MemoryRegistry()
    serde = AvroSerde(registry)
    serializer = serde.serializer("topic", avro_schema(KEY), is_key=True)
    assert serializer({"id": 7}) == serde.serialize("topic", KEY, {"id": 7}, is_key=True)
    assert len(registry._ids) == 1
