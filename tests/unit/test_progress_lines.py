"""The changelog stage's progress lines: one per landed batch, in order, none lost and none twice; the
progress reports a run until caught up needs; and the batch a SIGTERM refuses."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest
from structlog.testing import capture_logs

from pipeline.config.settings import load_config
from pipeline.stages.changelog import ChangelogStage
from pipeline.stages.changelog.errors import StopRequested
from pipeline.stages.changelog.report import BatchReport
from pipeline.stages.changelog.transports import NO_DATA_PROGRESS_INTERVAL, transport_for


@dataclass
class FakeQuery:
    """What `_log_progress` reads of a streaming query: its retained progress reports and whether it runs."""

    recentProgress: list[dict[str, Any]] = field(default_factory=list)  # Spark's names
    isActive: bool = True


def _report(batch_id: int, lag: int | None = None) -> dict[str, Any]:
    metrics = {} if lag is None else {"maxOffsetsBehindLatest": str(lag)}
    return {"batchId": batch_id, "sources": [{"metrics": metrics}]}


def _stage(*batches: int) -> ChangelogStage:
    stage = ChangelogStage.__new__(ChangelogStage)  # only what the progress lines need
    stage.reports, stage._logged = deque(BatchReport(b, rows_in=10 * b) for b in batches), -1
    return stage


def _logged(stage: ChangelogStage, query: FakeQuery) -> list[tuple[int, int | None]]:
    with capture_logs() as lines:
        stage._log_progress(query)
    return [(line["batch"], line["lag"]) for line in lines if line["event"] == "changelog.batch"]


def test_a_batch_is_logged_once_its_report_is_out_with_the_lag_it_reports() -> None:
    stage = _stage(0, 1)
    query = FakeQuery([_report(0, lag=5)])
    assert _logged(stage, query) == [(0, 5)]  # batch 1 landed, its report is still to come
    query.recentProgress.append(_report(1, lag=0))
    assert _logged(stage, query) == [(1, 0)]
    assert _logged(stage, query) == []


def test_a_batch_whose_report_left_the_retained_ones_is_logged_without_a_lag() -> None:
    stage = _stage(3)
    empty_triggers = FakeQuery([_report(4) for _ in range(100)])  # an empty trigger reports the next batch's id
    assert _logged(stage, empty_triggers) == [(3, None)]


def test_a_stopped_query_has_every_landed_batch_logged() -> None:
    stage = _stage(7, 8)
    assert _logged(stage, FakeQuery([_report(7, lag=2)], isActive=False)) == [(7, 2), (8, None)]


def test_a_batch_replayed_by_a_restarted_query_is_not_logged_twice() -> None:
    stage = _stage(2)
    assert _logged(stage, FakeQuery([_report(2)])) == [(2, 0)]
    stage.reports.append(BatchReport(2))  # the restarted query lands batch 2 again, then 3
    stage.reports.append(BatchReport(3))
    assert _logged(stage, FakeQuery([_report(2), _report(3)])) == [(3, 0)]


@pytest.mark.parametrize("source, settings, interval", [
    ("kafka", ["changelog.topic_pattern=x\\..*"], None),  # available-now stops by itself
    ("s3-sqs", [], None),  # stops on the source's status file
    ("kinesis", ["kinesis.streams=s"], "0"),  # stops on the last progress report: empty triggers reported at once
])
def test_only_a_run_that_stops_on_progress_reports_has_every_empty_trigger_reported(
        source: str, settings: list[str], interval: str | None) -> None:
    transport = transport_for(load_config(overrides=[f"changelog.source={source}", *settings]))
    assert transport.query_conf(until_caught_up=True).get(NO_DATA_PROGRESS_INTERVAL) == interval
    assert transport.query_conf(until_caught_up=False) == {}


class _RecordingTransport:
    """A transport that records the batches handed to it to land."""

    def __init__(self) -> None:
        self.landed: list[int] = []

    def land(self, landing: Any, batch: Any, report: BatchReport) -> None:
        self.landed.append(report.batch_id)


def test_after_sigterm_a_batch_is_refused_before_any_of_it_lands() -> None:
    """Spark then ends the query with the batch planned and uncommitted, and the next start lands it whole;
    returning would have Spark commit it unlanded."""
    stage = ChangelogStage.__new__(ChangelogStage)  # only what `_process` needs
    stage.transport, stage.landing, stage.reports, stage._id = _RecordingTransport(), None, deque(), "writer"
    stage.cfg, stage._stopping = load_config(environ={}), threading.Event()
    stage._process(None, 4)  # type: ignore[arg-type]
    stage._stopping.set()
    with pytest.raises(StopRequested, match="SIGTERM came before batch 5: it is left for the next start"):
        stage._process(None, 5)  # type: ignore[arg-type]
    assert stage.transport.landed == [4]
    assert [report.batch_id for report in stage.reports] == [4]
