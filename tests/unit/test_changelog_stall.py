"""When the changelog stage probes the services while its query runs: only once a trigger hangs, then backing off."""

from __future__ import annotations

from pipeline.stages.changelog import Stall


def test_a_trigger_is_stalled_after_the_interval_without_a_progress_report() -> None:
    stall = Stall(after_s=30)
    assert not stall.stalled(True, "t1", now=0)
    assert not stall.stalled(True, "t1", now=29)
    assert stall.stalled(True, "t1", now=30)


def test_a_progress_report_or_an_idle_moment_starts_the_wait_again() -> None:
    stall = Stall(after_s=30)
    stall.stalled(True, "t1", now=0)
    assert not stall.stalled(True, "t2", now=31)  # back-to-back batches: busy, not stalled
    assert not stall.stalled(True, "t2", now=60)
    assert not stall.stalled(False, "t2", now=62)  # between triggers
    assert not stall.stalled(True, "t2", now=63)
    assert not stall.stalled(True, "t2", now=92)
    assert stall.stalled(True, "t2", now=93)


def test_probes_back_off_to_a_minute_and_start_over_after_the_stall() -> None:
    stall = Stall(after_s=30)
    stall.stalled(True, "t1", now=0)
    now, delays = 30.0, []
    while now < 400:
        assert stall.stalled(True, "t1", now)
        delay = stall.probe(now)
        if delay is not None:
            delays.append((now, delay))
        now += 1
    assert delays[:4] == [(30, 1), (31, 2), (33, 4), (37, 8)]
    assert {delay for _, delay in delays[6:]} == {60}
    assert stall.probe(now) is None
    assert not stall.stalled(False, "t1", now)  # the trigger got through
    stall.stalled(True, "t2", now)
    assert stall.stalled(True, "t2", now + 30) and stall.probe(now + 30) == 1
