"""`pipeline status` without services: what it makes of a lake's commit history, and how it prints it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from pipeline.ops.status.collect import _transport_of
from pipeline.ops.status.lake import CommitFacts, TableFacts, changelog_history, dead_letters_by_table, mirror_state
from pipeline.ops.status.model import Commit, LakeStatus, MirrorState, SourceLag, TableStatus
from pipeline.ops.status.render import as_html, as_json, as_text
from tables.names import LakeNames

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _commit(commit_id: int, minutes_ago: float, rows: int = 10, operation: str = "append",
            watermark: int | None = None) -> CommitFacts:
    at = NOW - timedelta(minutes=minutes_ago)
    return CommitFacts(commit_id, at, operation, rows, at - timedelta(seconds=30), watermark,
                       batch_started=at - timedelta(seconds=2))


def test_the_mirror_lags_by_the_oldest_changelog_commit_it_has_not_merged() -> None:
    changelog = TableFacts("t", 30, [_commit(1, 30), _commit(2, 20), _commit(3, 10)])
    mirror = TableFacts("t", 12, [_commit(7, 25, operation="overwrite", watermark=1)])
    state = mirror_state(changelog, mirror, NOW)
    assert state == MirrorState(watermark=1, merged_at=NOW - timedelta(minutes=30), pending_commits=2,
                                lag_seconds=20 * 60)
    caught_up = TableFacts("t", 12, [*mirror.commits, _commit(8, 5, operation="overwrite", watermark=3)])
    assert mirror_state(changelog, caught_up, NOW).lag_seconds == 0.0  # type: ignore[union-attr]
    assert mirror_state(changelog, None, NOW) is None


def test_each_append_knows_its_rate_and_how_far_behind_the_source_it_was() -> None:
    history = changelog_history(TableFacts("t", 20, [_commit(1, 10, rows=100), _commit(2, 5, rows=0),
                                                     _commit(3, 1, operation="replace")]))
    assert history == [Commit(NOW - timedelta(minutes=10), 100, 30.0, 2.0)]  # no empty commit, no compaction


def test_dead_letters_count_under_the_table_their_topic_names() -> None:
    rows = [("db.public.orders", "MalformedAvro", 2), ("db.public.orders", "NoTableName", 1),
            ("db.other.orders", "MalformedAvro", 3), ("nodots", "NoTableName", 4)]
    found = dead_letters_by_table(rows, LakeNames())
    assert found["db_orders"] == {"MalformedAvro": 5, "NoTableName": 1}
    assert set(found) == {"db_orders", "nodots_nodots"}
    apart = dead_letters_by_table(rows, LakeNames(with_schema=frozenset({"other"})))  # names.with_schema
    assert apart["db_orders"] == {"MalformedAvro": 2, "NoTableName": 1}
    assert apart["db_other_orders"] == {"MalformedAvro": 3}


def test_a_kafka_topic_lag_reaches_only_its_own_table() -> None:
    lags = [SourceLag("kafka", "db.public.orders", 5, 12.0), SourceLag("kafka", "db.public.items", 0, 0.0)]
    assert _transport_of("db_orders", lags, LakeNames()) == lags[0]
    assert _transport_of("db_customers", lags, LakeNames()) is None
    assert _transport_of("db_public_orders", lags, LakeNames(with_schema=frozenset({"*"}))) == lags[0]
    assert _transport_of("db_orders", lags, LakeNames(with_schema=frozenset({"*"}))) is None
    queue = [SourceLag("s3-sqs", "dms-cdc-events", 3, None)]
    assert _transport_of("db_orders", queue, LakeNames()) == queue[0]  # one queue feeds every table


def _status(max_lag: float | None) -> LakeStatus:
    history = [Commit(NOW - timedelta(minutes=m), 10, 40.0 + m, 1.0) for m in (30, 20, 10)]
    table = TableStatus("db_orders", 30, history[-1].at, 10, 10.0, history, SourceLag("kafka", "db.public.orders", 4,
                        90.0), MirrorState(1, NOW - timedelta(minutes=30), 2, 1200.0), {"MalformedAvro": 2})
    return LakeStatus(NOW, [table], [table.transport], max_lag)  # type: ignore[list-item]


def test_a_table_is_stale_past_the_bound_by_its_oldest_waiting_change() -> None:
    assert _status(None).stale == [] and _status(1500).stale == []
    assert _status(600).stale == ["db_orders"]  # the mirror's 20 minutes, not the transport's 90 s


def test_the_three_renderings_say_the_same() -> None:
    status = _status(600)
    text = as_text(status)
    assert "db_orders" in text and "4 / 1.5m" in text and "20.0m (2 commits)" in text and "MalformedAvro 2" in text
    assert "stale (lag over status.max_lag = 600 s): db_orders" in text
    document = json.loads(as_json(status))
    assert document["stale"] == ["db_orders"] and document["tables"][0]["lag_seconds"] == 1200.0
    page = as_html(status)
    assert page.count("<circle") == 3 and "<script" not in page and "http" not in page.split("<body>")[1]


def test_an_unreachable_transport_is_named_and_the_lake_still_reported() -> None:
    status = LakeStatus(NOW, _status(None).tables, [], None, ["Kafka at 127.0.0.1:1 is unreachable: timed out"])
    text = as_text(status)
    assert "db_orders" in text and "transport lag unknown: Kafka at 127.0.0.1:1 is unreachable" in text


def test_dead_letters_of_a_table_with_no_changelog_table_are_printed_too() -> None:
    """A gone file of a table that never landed, a file outside DMS's layout: no table row shows them."""
    elsewhere = {"db_new": {"MissingDmsFile": 1}, "..": {"UnroutableFile": 2}}
    status = LakeStatus(NOW, _status(None).tables, [], None, [], elsewhere)
    text = as_text(status)
    assert "dead letters of .., which has no changelog table: UnroutableFile 2" in text
    assert "dead letters of db_new, which has no changelog table: MissingDmsFile 1" in text
    assert json.loads(as_json(status))["dead_letters_elsewhere"] == elsewhere
    assert "db_new, which has no changelog table: MissingDmsFile 1" in as_html(status)


def test_in_the_pending_layout_the_newest_watermark_of_base_or_pending_counts() -> None:
    changelog = TableFacts("t", 30, [_commit(1, 30), _commit(2, 20), _commit(3, 10)])
    base = TableFacts("t", 12, [_commit(7, 25, operation="overwrite", watermark=1)])
    pending = TableFacts("t", 5, [_commit(8, 15, watermark=2)])
    state = mirror_state(changelog, base, NOW, pending)
    assert state is not None and (state.watermark, state.pending_commits) == (2, 1)
