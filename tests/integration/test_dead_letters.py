"""The dead-letter bound stops the stage; `dead-letters list | replay` shows and re-lands what it stored.

The cause is a real misconfiguration: records framed the Confluent way (4-byte id) read as Apicurio's legacy
frame (8-byte id), so every id is one the registry does not know, as when a converter's id setting and the
stage's disagree.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from confluent_kafka import Producer

from pipeline.stages import dead_letters
from pipeline.stages.changelog import DeadLetterBoundExceeded
from pipeline.config.settings import PipelineConfig
from registry.factory import serde_from_settings
from tests.integration.test_changelog import _simulate, _stage, _table

pytestmark = pytest.mark.integration

BOUND = {"max_fraction": 0.5, "min_records": 5}


HEARTBEAT = {"type": "record", "name": "Heartbeat", "namespace": "io.debezium.connector.common",
             "fields": [{"name": "ts_ms", "type": "long"}]}
TRANSACTION = {"type": "record", "name": "TransactionMetadataValue", "namespace": "io.debezium.connector.common",
               "fields": [{"name": "status", "type": "string"}, {"name": "id", "type": "string"},
                          {"name": "event_count", "type": ["null", "long"], "default": None},
                          {"name": "ts_ms", "type": "long"}]}


def _send_control_records(cfg: PipelineConfig, prefix: str) -> dict[str, int]:
    """Debezium's heartbeats and transaction BEGIN/END records, on topics the stage's pattern matches."""
    serde = serde_from_settings(cfg.registry, cfg.aws)
    producer = Producer({"bootstrap.servers": cfg.kafka.bootstrap_servers})
    for i in range(3):
        producer.produce(f"{prefix}.heartbeat", serde.serialize(f"{prefix}.heartbeat", HEARTBEAT, {"ts_ms": i}))
    for status in ("BEGIN", "END"):
        record = {"status": status, "id": "571:53195832", "event_count": None if status == "BEGIN" else 2, "ts_ms": 1}
        producer.produce(f"{prefix}.transaction", serde.serialize(f"{prefix}.transaction", TRANSACTION, record))
    assert producer.flush(30) == 0
    return {"heartbeat": 3, "transaction": 2}


def _misread(cfg: PipelineConfig) -> PipelineConfig:
    return cfg.model_copy(update={"registry": cfg.registry.model_copy(update={"wire_format": "apicurio-legacy"})})


def test_a_table_past_the_bound_stops_the_stage_and_replay_lands_it_once(cfg: PipelineConfig, stack, spark,
                                                                          tmp_path: Path) -> None:
    prefix = f"dl{uuid.uuid4().hex[:6]}"
    summary, _ = _simulate(cfg, tmp_path, prefix, format="debezium", events=30, snapshot_rows=5)
    misread = _misread(cfg)
    bound = misread.changelog.dead_letters.model_copy(update=BOUND)
    stage = _stage(misread, spark, prefix, tmp_path / "checkpoint", dead_letters=bound)

    with pytest.raises(DeadLetterBoundExceeded) as stopped:
        stage.run(until_caught_up=True)
    message = str(stopped.value)
    assert f"topic {prefix}." in message and "UnknownSchemaId" in message
    assert "changelog.dead_letters.max_fraction = 0.5" in message and "dead-letters replay" in message

    topics = sorted(row["topic"] for row in _table(spark, cfg, "dead_letters").where(f"topic LIKE '{prefix}.%'")
                    .select("topic").distinct().collect())
    found = dead_letters.reasons(cfg, spark, topics)
    stored = sum(reason.count for reason in found)
    assert stored == summary.messages_acknowledged > 0  # every record, none lost
    assert {reason.error_class for reason in found} == {"UnknownSchemaId"}
    assert {reason.table for reason in found} == {f"{prefix}_{t.rsplit('.', 1)[-1]}" for t in topics}

    # A restart goes on past the stopped batch: its dead letters were stored and judged.
    _stage(misread, spark, prefix, tmp_path / "checkpoint", dead_letters=bound).run(until_caught_up=True)

    report = dead_letters.replay(cfg, spark, topics)  # the right framing now
    assert report.selected == stored and report.still_failing == {}
    assert sum(report.landed.values()) == stored
    landed = sum(_table(spark, cfg, table).count() for table in report.landed)
    assert landed == stored
    assert dead_letters.reasons(cfg, spark, topics) == []

    again = dead_letters.replay(cfg, spark, topics)
    assert again.selected == 0
    assert sum(_table(spark, cfg, table).count() for table in report.landed) == landed  # nothing twice


def test_replay_never_lands_twice_what_landed_meanwhile(cfg: PipelineConfig, stack, spark, tmp_path: Path) -> None:
    """The source is read again with the right setting before the replay: the replay lands nothing and only
    clears the dead letters."""
    prefix = f"dl{uuid.uuid4().hex[:6]}"
    _simulate(cfg, tmp_path, prefix, format="debezium", events=30, snapshot_rows=5)
    misread = _misread(cfg)
    unbounded = misread.changelog.dead_letters.model_copy(update={"max_fraction": None})
    _stage(misread, spark, prefix, tmp_path / "misread", dead_letters=unbounded).run(until_caught_up=True)
    letters = _table(spark, cfg, "dead_letters").where(f"topic LIKE '{prefix}.%'")
    stored = letters.count()
    topics = sorted(row["topic"] for row in letters.select("topic").distinct().collect())
    assert stored > 0

    control = _send_control_records(cfg, prefix)
    right = _stage(cfg, spark, prefix, tmp_path / "right")
    right.run(until_caught_up=True)
    skipped = {kind: sum(report.control.get(kind, 0) for report in right.reports) for kind in control}
    assert skipped == control  # counted and skipped, never a table or a dead letter
    assert _table(spark, cfg, f"{prefix}_heartbeat") is None and _table(spark, cfg, f"{prefix}_transaction") is None
    tables = {dead_letters.changelog_table_of(cfg, topic) for topic in topics}
    before = sum(_table(spark, cfg, table).count() for table in tables)

    report = dead_letters.replay(cfg, spark, topics)
    assert report.selected == stored and sum(report.landed.values()) == stored
    assert sum(_table(spark, cfg, table).count() for table in tables) == before
    assert dead_letters.reasons(cfg, spark, topics) == []
