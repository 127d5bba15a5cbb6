"""When a run until caught up may stop: the check against a real streaming query, held in the middle of planning.

A Kinesis run until caught up once stopped with records left: it read the query's status, which Spark 4.1
resets to "no data available" at the start of every trigger, so a poll while the next batch was being planned
saw a drained source. The source below blocks its offset call at that moment, so the poll lands there.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.stages.changelog.transports import NO_DATA_PROGRESS_INTERVAL, found_nothing_new
from tables.lake import session_conf


def _gated_source(folder: Path):
    """A source of `feed` rows (a number in a file). Its first offset call answers at once; later ones wait
    while the file `gate` exists, saying so in the file `planning`. Defined here so that Spark's Python workers
    get it by value."""
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


def _wait_for(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s  # a deadline, not a measure
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.05)


def test_a_query_planning_the_batch_after_one_with_rows_has_not_found_nothing_new(spark, tmp_path: Path) -> None:
    (tmp_path / "feed").write_text("3")
    (tmp_path / "gate").touch()
    spark.dataSource.register(_gated_source(tmp_path))
    with session_conf(spark, {NO_DATA_PROGRESS_INTERVAL: "0"}):
        query = (spark.readStream.format("gated").load().writeStream.format("noop")
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="0 seconds")
                 .start())
    assert spark.conf.get(NO_DATA_PROGRESS_INTERVAL, None) is None  # the session's own setting is back
    try:
        _wait_for((tmp_path / "planning").exists, "the trigger after the first batch to plan")
        assert [p["numInputRows"] for p in query.recentProgress] == [3]
        assert not query.status["isDataAvailable"]  # what the old check read: "nothing new", wrongly
        assert not found_nothing_new(query)  # the last finished trigger had rows

        (tmp_path / "feed").write_text("5")
        (tmp_path / "gate").unlink()
        _wait_for(lambda: found_nothing_new(query), "a trigger that found nothing after the new rows")
        assert sum(p["numInputRows"] for p in query.recentProgress) == 5
    finally:
        query.stop()
