"""A Kafka batch's topics and offset ranges, read from the query's offset log without reading the batch."""

from __future__ import annotations

import json

import pytest

from pipeline.stages.changelog.transports.kafka_offsets import (EARLIEST, ONE_TASK_RECORDS, TASKS_PER_CORE, TopicRange,
                                                                ranges_in)


def _offset_log(offsets: dict[str, dict[str, int]]) -> str:
    """An offset log file as Spark writes it: the version, the batch's metadata, then the one source's offsets."""
    return "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1}) + "\n" + json.dumps(offsets)


def _reader(files: dict[str, str]):
    return files.get


def test_a_batch_spans_the_previous_batch_end_to_its_own_and_skips_topics_without_records() -> None:
    files = {"offsets/4": _offset_log({"a": {"0": 10, "1": 20}, "b": {"0": 5}}),
             "offsets/5": _offset_log({"a": {"0": 15, "1": 20}, "b": {"0": 5}, "c": {"0": 3}})}
    assert ranges_in(_reader(files), 5) == [TopicRange("a", {0: (10, 15)}),  # partition 1 and topic b: nothing new
                                            TopicRange("c", {0: (EARLIEST, 3)})]  # new since: from its start


def test_the_first_batch_starts_at_the_offsets_the_kafka_source_wrote_first() -> None:
    files = {"sources/0/0": "\x00v1\n" + json.dumps({"a": {"0": 7, "1": 0}}),
             "offsets/0": _offset_log({"a": {"0": 9, "1": 4}})}
    [found] = ranges_in(_reader(files), 0)
    assert found.partitions == {0: (7, 9), 1: (0, 4)} and found.upper_bound == 6


def test_a_topic_of_few_records_is_read_by_one_task_and_a_busy_one_by_a_task_a_partition() -> None:
    few = TopicRange("t", {0: (0, ONE_TASK_RECORDS // 2), 1: (10, 10 + ONE_TASK_RECORDS // 2)})
    busy = TopicRange("t", {0: (0, ONE_TASK_RECORDS), 1: (0, 1)})
    from_start = TopicRange("t", {0: (EARLIEST, ONE_TASK_RECORDS + 1), 1: (0, 1)})  # counted from offset 0
    assert (few.one_task, busy.one_task, from_start.one_task) == (True, False, False)
    assert not TopicRange("t", {0: (0, 5)}).one_task  # one partition is one task already
    # quiet, whatever its partitions: the batch's one job writes its table (`Landing.land_topics`)
    assert (few.quiet, busy.quiet, from_start.quiet, TopicRange("t", {0: (0, 5)}).quiet) == (True, False, False, True)


def test_on_a_cluster_a_busy_topic_of_few_partitions_is_split_so_that_no_executor_waits_on_another() -> None:
    busy = TopicRange("t", {p: (0, 100_000) for p in range(4)})
    assert busy.min_tasks(None) is None  # local: the task threads take the next task, whichever partition it reads
    assert busy.min_tasks(4) == 4 * TASKS_PER_CORE  # 4 partitions on 4 cores: split, so the tasks balance
    assert busy.min_tasks(1) is None  # 4 partitions on 1 core: TASKS_PER_CORE tasks and more already
    wide = TopicRange("t", {p: (0, 100_000) for p in range(16)})
    assert wide.min_tasks(4) is None  # enough tasks already: each partition stays on the executor that read it
    few = TopicRange("t", {p: (0, ONE_TASK_RECORDS // 8) for p in range(4)})
    assert few.min_tasks(4) is None  # one task reads it
    assert TopicRange("t", {0: (0, ONE_TASK_RECORDS)}).min_tasks(4) is None  # a task's worth: not split


def test_a_file_that_is_not_an_offset_log_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="offsets/3 is not a Spark offset log file"):
        ranges_in(_reader({"offsets/3": "garbage"}), 3)
