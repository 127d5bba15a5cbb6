"""When a run until caught up may stop: the check against a real streaming query, held in the middle of a trigger.

A Kinesis run until caught up once stopped with records left: it read the query's status, which Spark 4.1
resets to "no data available" at the start of every trigger, so a poll while the next batch was being planned
saw a drained source. Reading only the last progress report instead would stop a query landing a batch of
records that arrived after an empty trigger. The source below blocks its offset call, or its read, so that the
check is made at those moments.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.stages.changelog.transports import NO_DATA_PROGRESS_INTERVAL, found_nothing_new
from tables.lake import session_conf


def _gated_source(folder: Path):
    """A source of `feed` rows (a number in a file). Its first offset call answers at once; later ones wait
    while the file `gate` exists, saying so in the file `planning`. A read waits while the file `read-gate`
    exists, saying so in the file `reading`. Defined here so that Spark's Python workers get it by value."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class GatedReader(DataSourceStreamReader):
        def initialOffset(self) -> dict:
            return {"rows": 0}

        def latestOffset(self) -> dict:
            first = not (folder / "asked").exists()
            (folder / "asked").touch()
            while not first and (folder / "gate").exists():
                (folder / "planning").touch()
                time.sleep(0.05)
            return {"rows": int((folder / "feed").read_text())}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return [InputPartition((start["rows"], end["rows"]))]

        def read(self, partition: InputPartition):
            first, end = partition.value
            while (folder / "read-gate").exists():
                (folder / "reading").touch()
                time.sleep(0.05)
            yield from ((row,) for row in range(first, end))

    class Gated(DataSource):
        @classmethod
        def name(cls) -> str:
            return "gated"

        def schema(self) -> str:
            return "row int"

        def streamReader(self, schema):
            return GatedReader()

    return Gated


def _feed(folder: Path, rows: int) -> None:
    """The source's row count, replaced in one step: the query's offset call reads the file at any moment, and
    a file written in place is empty between its truncation and its write."""
    partial = folder / "feed.partial"
    partial.write_text(str(rows))
    partial.replace(folder / "feed")


def _wait_for(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s  # a deadline, not a measure
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.05)


def _start(spark, folder: Path):
    """The gated source into a memory table named after the folder, with no-data triggers reported at once."""
    spark.dataSource.register(_gated_source(folder))
    with session_conf(spark, {NO_DATA_PROGRESS_INTERVAL: "0"}):
        query = (spark.readStream.format("gated").load().writeStream.format("memory").queryName(folder.name)
                 .option("checkpointLocation", str(folder / "checkpoint")).trigger(processingTime="0 seconds")
                 .start())
    assert spark.conf.get(NO_DATA_PROGRESS_INTERVAL, None) is None  # the session's own setting is back
    return query


def test_a_query_planning_the_batch_after_one_with_rows_has_not_found_nothing_new(spark, tmp_path: Path) -> None:
    _feed(tmp_path, 3)
    (tmp_path / "gate").touch()
    query = _start(spark, tmp_path)
    try:
        _wait_for((tmp_path / "planning").exists, "the trigger after the first batch to plan")
        assert [p["numInputRows"] for p in query.recentProgress] == [3]
        assert not query.status["isDataAvailable"]  # what the old check read: "nothing new", wrongly
        assert not found_nothing_new(query)  # the last finished trigger had rows

        _feed(tmp_path, 5)
        (tmp_path / "gate").unlink()
        _wait_for(lambda: found_nothing_new(query), "a trigger that found nothing after the new rows")
        assert spark.table(tmp_path.name).count() == 5
    finally:
        query.stop()


def test_a_query_landing_rows_that_arrived_after_an_empty_trigger_has_not_found_nothing_new(spark,
                                                                                          tmp_path: Path) -> None:
    _feed(tmp_path, 3)
    query = _start(spark, tmp_path)
    try:
        _wait_for(lambda: found_nothing_new(query), "an empty trigger after the first batch")
        (tmp_path / "read-gate").touch()
        _feed(tmp_path, 5)
        _wait_for((tmp_path / "reading").exists, "the next batch to read its rows")
        progress = query.lastProgress
        assert all(s["startOffset"] == s["endOffset"] for s in progress["sources"])  # the last report: empty
        assert not found_nothing_new(query)  # but a batch is landing

        (tmp_path / "read-gate").unlink()
        _wait_for(lambda: found_nothing_new(query), "a trigger that found nothing after the new rows")
        assert spark.table(tmp_path.name).count() == 5
    finally:
        query.stop()
