"""A Kafka batch's topics land at once, up to `changelog.concurrent_topics`, and their reports add up."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from pipeline.config.settings import PipelineConfig, load_config
from pipeline.stages.changelog import BatchReport
from pipeline.stages.changelog.landing import Landing
from tables.owners import Owners


class _Landing(Landing):
    """Landing with the Spark parts replaced: each topic 'lands' by counting, after waiting at `barrier`."""

    def __init__(self, cfg: PipelineConfig, barrier: threading.Barrier | None) -> None:
        super().__init__(cfg, spark=None)  # type: ignore[arg-type]
        self.owners = Owners(cfg.names.rule(), lambda name: SimpleNamespace(exists=lambda: False))  # new tables
        self.barrier = barrier
        self.stored: list[str] = []

    def _classified(self, batch, registry_frames=True):  # type: ignore[no-untyped-def]
        return batch

    def _one_pass(self, raw, topic, report):  # type: ignore[no-untyped-def]
        if self.barrier is not None:
            self.barrier.wait()  # breaks (BrokenBarrierError) unless the other topic is landing meanwhile
        report.rows_in += raw
        report.records[topic] = raw
        report.tables[topic.replace(".", "_")] = raw
        return [f"dead {topic}"]

    def append_dead_letters(self, dead, report, store=True):  # type: ignore[no-untyped-def]
        self.stored = dead


@pytest.mark.parametrize("concurrent", [1, 2])
def test_topics_land_at_once_and_the_batch_report_adds_theirs_up(concurrent: int, monkeypatch) -> None:
    monkeypatch.setattr("pyspark.inheritable_thread_target", lambda spark: lambda target: target)  # no JVM here
    cfg = load_config(overrides=["changelog.topics=a.s.x", f"changelog.concurrent_topics={concurrent}"], environ={})
    barrier = threading.Barrier(2, timeout=10) if concurrent > 1 else None
    landing, report = _Landing(cfg, barrier), BatchReport(3, writer="q")
    counts = {"a.s.x": 5, "a.s.y": 7}
    landing.land_topics(SimpleNamespace(names=list(counts), quiet=frozenset(), read=counts.get), report)
    assert report.rows_in == 12 and report.records == {"a.s.x": 5, "a.s.y": 7}
    assert report.tables == {"a_s_x": 5, "a_s_y": 7}
    assert landing.stored == ["dead a.s.x", "dead a.s.y"]  # in topic order, whichever finished first


def test_a_part_report_keeps_the_batch_and_writer_and_merges_every_count() -> None:
    report = BatchReport(9, writer="q", rows_in=1, tables={"t": 1}, skipped=["u"], control={"heartbeat": 1})
    part = report.part()
    assert (part.batch_id, part.writer, part.started_ms, part.rows_in) == (9, "q", report.started_ms, 0)
    part.rows_in, part.tombstones, part.tables, part.skipped = 4, 2, {"t": 3, "v": 4}, ["w"]
    part.control, part.one_pass, part.planned, part.records = {"heartbeat": 2}, {"a": 4}, ["b"], {"a": 2}
    report.merge(part)
    assert (report.rows_in, report.tombstones, report.tables, report.skipped) == (5, 2, {"t": 4, "v": 4}, ["u", "w"])
    assert (report.control, report.one_pass, report.planned, report.records) == ({"heartbeat": 3}, {"a": 4}, ["b"],
                                                                                 {"a": 2})
