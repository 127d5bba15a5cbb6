"""The dead-letter bound: which batch stops the stage, and what the message says."""

from __future__ import annotations

from cdc.control import control_kind
from pipeline.stages.changelog import BatchReport
from pipeline.config.settings import DeadLetterSettings


def _report(records: int, **dead: int) -> BatchReport:
    return BatchReport(7, records={"shop.public.orders": records}, dead_by_topic={"shop.public.orders": dead})


def test_a_fraction_past_the_bound_names_the_topic_the_class_and_the_count() -> None:
    excess = _report(1000, UnknownSchemaId=180, MalformedAvro=20).dead_letter_excess(DeadLetterSettings())
    assert excess is not None
    assert "batch 7 dead-lettered 200 of 1000 records of topic shop.public.orders (20%" in excess
    assert "UnknownSchemaId: 180" in excess and "changelog.dead_letters.max_fraction = 0.1" in excess


def test_within_the_bound_or_below_min_records_goes_on() -> None:
    assert _report(1000, MalformedAvro=100).dead_letter_excess(DeadLetterSettings()) is None  # 10% is not past
    assert _report(99, MalformedAvro=99).dead_letter_excess(DeadLetterSettings()) is None
    assert _report(99, MalformedAvro=99).dead_letter_excess(DeadLetterSettings(min_records=50)) is not None


def test_a_count_bound_applies_to_any_batch_and_unset_bounds_never_stop() -> None:
    excess = _report(5, WireFormatError=3).dead_letter_excess(DeadLetterSettings(max_count=2))
    assert excess is not None and "changelog.dead_letters.max_count = 2" in excess
    unbounded = DeadLetterSettings(max_fraction=None, max_count=None)
    assert _report(10_000, WireFormatError=10_000).dead_letter_excess(unbounded) is None


def test_debezium_control_records_are_told_by_their_value_schema() -> None:
    heartbeat = {"type": "record", "name": "Heartbeat", "namespace": "io.debezium.connector.common",
                 "fields": [{"name": "ts_ms", "type": "long"}]}
    transaction = {"type": "record", "name": "io.debezium.connector.common.TransactionMetadataValue", "fields": []}
    envelope = {"type": "record", "name": "Envelope", "namespace": "shop.public.orders", "fields": []}
    assert control_kind(heartbeat) == "heartbeat"
    assert control_kind(transaction) == "transaction"
    assert control_kind(envelope) is None


def test_replayed_positions_are_deleted_as_runs_of_consecutive_offsets() -> None:
    from pipeline.stages.dead_letters import offset_runs

    positions = [("a", 0, 5), ("a", 0, 3), ("a", 0, 4), ("a", 1, 4), ("a", 0, 9), ("b", 0, 1), ("a", 0, 4)]
    assert offset_runs(positions) == [("a", 0, 3, 5), ("a", 0, 9, 9), ("a", 1, 4, 4), ("b", 0, 1, 1)]
