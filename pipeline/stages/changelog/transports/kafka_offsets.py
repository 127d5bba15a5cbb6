"""One micro-batch of Kafka records, topic by topic, each read once, without scanning the batch to find them.

Spark writes a batch's end offsets to the query's offset log (`<checkpoint>/offsets/<batch id>`) before it runs
the batch; its start offsets are the previous batch's end, or for the first batch the initial offsets the Kafka
source wrote (`<checkpoint>/sources/0/0`). A partition new since then starts at its earliest offset, as Spark's
own source starts it. So the topics a batch holds, and each topic's exact offset ranges, are known before a
record is read, and each topic's records are read by a batch query over just those ranges: a batch of ten topics
reads each record once, where filtering the streaming batch by topic would read all ten topics ten times.

The logs are read through Hadoop's file system (`pipeline/runtime/hadoop_files.py`), so checkpoints on S3 work as
local ones do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection

from pipeline.config import kafka
from pipeline.config.settings import KafkaSettings
from pipeline.runtime.hadoop_files import read_text
from tables.append import TASKS_PER_CORE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession

EARLIEST = -2  # Spark's Kafka offset JSON: the partition's earliest offset
# A topic with at most this many records in a batch is read by one task, whatever its partitions: such a topic's
# job is all fixed cost (a task, a Kafka consumer and a data file per partition), and a batch of a whole database
# is mostly such topics (bench/database.py). One task decodes and writes this many records in well under a second.
ONE_TASK_RECORDS = 20_000
# How long a read waits for a partition that yields nothing before it fails, naming it: Spark's Kafka source's
# default (`kafkaConsumer.pollTimeoutMs`, from `spark.network.timeout`).
POLL_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class TopicRange:
    """Where one topic's records of a batch are: partition -> (start offset, end offset exclusive)."""

    topic: str
    partitions: dict[int, tuple[int, int]]

    @property
    def upper_bound(self) -> int:
        """Records at most (fewer where a start is the earliest offset, or a compacted topic has gaps)."""
        return sum(end - max(start, 0) for start, end in self.partitions.values())

    @property
    def quiet(self) -> bool:
        """Whether the records are few enough for one task (`ONE_TASK_RECORDS`)."""
        return self.upper_bound <= ONE_TASK_RECORDS

    @property
    def one_task(self) -> bool:
        """Whether the records of several partitions are read by one task (`quiet`)."""
        return len(self.partitions) > 1 and self.quiet

    def min_tasks(self, parallelism: int | None) -> int | None:
        """Spark's `minPartitions` for reading the ranges on a cluster of `parallelism` cores (None: a local
        master, whose task threads take the next task whichever partition it reads): `TASKS_PER_CORE` a core
        for a topic of more than `ONE_TASK_RECORDS` records and fewer partitions than that, else None (a task a
        partition, each on the executor that read it before).

        Why: a task a Kafka partition ties each partition to one executor (Spark's Kafka source gives the task the
        executor that read the partition before, its cached consumer), so a batch of 4 partitions on two 1-core
        executors ran 2 tasks on each, and ended with the slower executor's second task while the other waited
        (0.7-1.3 s of a 5-7 s job idle, bench/cluster.py). Split finer, the ranges have no preferred executor,
        and an executor that is done takes the next one."""
        wanted = TASKS_PER_CORE * (parallelism or 0)
        return wanted if self.upper_bound > ONE_TASK_RECORDS and len(self.partitions) < wanted else None

    def read(self, spark: SparkSession, settings: KafkaSettings, headers: bool, parallelism: int | None = None,
             group: str | None = None) -> DataFrame:
        """The topic's records in these ranges, in the columns the streaming source gives; a few records in
        one task (`one_task`), so the job that lands them runs one task and writes one file per day; on a cluster
        of `parallelism` cores, in at least `min_tasks`. With `group` (`kafka.reader_group`), the executors'
        consumers of earlier reads in that group read these ranges too, instead of new ones."""
        tasks = self.min_tasks(parallelism)
        reader = _reader(spark, settings, headers, group, [self])
        rows = (reader.option("minPartitions", str(tasks)) if tasks else reader).load()
        return rows.coalesce(1) if self.one_task else rows


@dataclass(frozen=True)
class BatchReads:
    """A batch's topics (`ranges`), each read by itself (`TopicRange.read`), or several by one read (`together`)."""

    ranges: list[TopicRange]
    spark: SparkSession
    settings: KafkaSettings
    headers: bool
    parallelism: int | None = None  # a cluster's cores (`TopicRange.read`); None: a local master
    group: str | None = None  # `kafka.reader_group`
    poll_timeout_ms: int = POLL_TIMEOUT_MS  # `together`: how long a partition may yield nothing

    @property
    def names(self) -> list[str]:
        return [r.topic for r in self.ranges]

    @property
    def quiet(self) -> frozenset[str]:
        """The topics of a few records each (`TopicRange.quiet`)."""
        return frozenset(r.topic for r in self.ranges if r.quiet)

    def read(self, topic: str) -> DataFrame:
        return next(r for r in self.ranges if r.topic == topic).read(
            self.spark, self.settings, self.headers, self.parallelism, self.group)

    def together(self, topics: Collection[str]) -> DataFrame:
        """The records of `topics` by one read, in the columns the streaming source gives: `TASKS_PER_CORE` tasks
        a core, each reading its share of the partitions with one Kafka consumer (jvm/cdc `KafkaRanges`; Spark's
        source makes a consumer a partition, 2,000 for a batch of 500 topics). Needs the pipeline's jar."""
        from pyspark.sql import DataFrame

        from tables.lake import java_class

        ranges = [(r.topic, p, start, end) for r in self.ranges if r.topic in topics
                  for p, (start, end) in sorted(r.partitions.items())]
        options = kafka.spark_options(self.settings)
        config = {key.removeprefix("kafka."): value for key, value in options.items() if key.startswith("kafka.")}
        if self.group:
            config["group.id"] = self.group
        columns = [list(column) for column in zip(*ranges)] if ranges else [[], [], [], []]
        jdf = java_class(self.spark, "cdc.spark.KafkaRanges").read(
            self.spark._jsparkSession, *columns, config, self.headers,  # noqa: SLF001
            TASKS_PER_CORE * self.spark.sparkContext.defaultParallelism, self.poll_timeout_ms)
        return DataFrame(jdf, self.spark)


def _reader(spark: SparkSession, settings: KafkaSettings, headers: bool, group: str | None,
            ranges: list[TopicRange]) -> DataFrameReader:
    """A batch read of exactly these ranges, in the columns the streaming source gives."""
    options = kafka.spark_options(settings, headers=headers)
    if group:
        options["kafka.group.id"] = group
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for r in ranges:
        for p, (start, end) in sorted(r.partitions.items()):
            assign.setdefault(r.topic, []).append(p)
            starts.setdefault(r.topic, {})[str(p)] = start
            ends.setdefault(r.topic, {})[str(p)] = end
    return (spark.read.format("kafka").options(**options).option("assign", json.dumps(assign))
            .option("startingOffsets", json.dumps(starts)).option("endingOffsets", json.dumps(ends))
            .option("failOnDataLoss", "false"))


def batch_ranges(spark: SparkSession, checkpoint: str, batch_id: int) -> list[TopicRange]:
    """The topics with records in batch `batch_id` of the Kafka query checkpointed at `checkpoint`, by name."""
    return ranges_in(lambda path: read_text(spark, f"{checkpoint}/{path}"), batch_id)


def ranges_in(read: Callable[[str], str | None], batch_id: int) -> list[TopicRange]:
    """`batch_ranges` over `read`, which gives a checkpoint file's text by its path in the checkpoint."""
    end = end_offsets(read, batch_id)
    start = end_offsets(read, batch_id - 1) if batch_id else _initial(read)
    found = []
    for topic, partitions in sorted(end.items()):
        since = start.get(topic, {})
        ranges = {p: (since.get(p, EARLIEST), e) for p, e in partitions.items() if since.get(p, EARLIEST) != e}
        if ranges:
            found.append(TopicRange(topic, ranges))
    return found


def end_offsets(read: Callable[[str], str | None], batch_id: int) -> dict[str, dict[int, int]]:
    """Topic -> partition -> the offset batch `batch_id` reads up to (exclusive), from the query's offset log."""
    return _offsets(read(f"offsets/{batch_id}"), f"offsets/{batch_id}")


def _offsets(text: str | None, name: str) -> dict[str, dict[int, int]]:
    """The Kafka source's offsets in an offset log file: `v1`, the batch's metadata, then the one source's JSON."""
    lines = (text or "").splitlines()
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise ValueError(f"the changelog checkpoint's {name} is not a Spark offset log file of one source")
    return _parsed(lines[2])


def _initial(read: Callable[[str], str | None]) -> dict[str, dict[int, int]]:
    """What the first batch started from; the file starts with a NUL byte, then `v1` and the JSON."""
    lines = (read("sources/0/0") or "").lstrip("\x00").splitlines()
    return _parsed(lines[1]) if len(lines) > 1 else {}


def _parsed(line: str) -> dict[str, dict[int, int]]:
    return {topic: {int(p): int(o) for p, o in partitions.items()} for topic, partitions in json.loads(line).items()}
