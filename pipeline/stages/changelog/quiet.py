"""A Kafka batch's quiet topics of Debezium envelopes decoded by one plan and appended by one Spark job (jvm/cdc
`cdc.spark.QuietTopics`).

Why: in a batch of a whole database most topics bring a few records, and each one decoded by a plan of its own
cost its table a plan built over py4j and compiled on the driver, about a second a table (docs/benchmarks.md). Here
a quiet topic costs the batch its driver lookups (its registry versions, its table, the idempotence check) and a
commit: its records come from one read of all of them, are classified by one plan and decoded in the tasks with the
native decoder's programs (`cdc/native.py`), so both paths land the same rows.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import structlog

from cdc.framing import Kind
from tables.append import COMMIT_PROPERTY, TASKS_PER_CORE, Staged
from tables.names import SourceTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = structlog.get_logger(__name__)

BODY_OFFSET = "body_offset"  # the input's column: where a framed value's Avro body starts (`Framing.body_offset`)
STRAY = "stray"  # the input's column: the record is a dead letter whatever the registry holds (`Landing`)


@dataclass(frozen=True)
class QuietTopic:
    """A quiet topic the one plan lands: its envelopes' writers and reader, its table (`target`) and key."""

    topic: str
    name: str  # its changelog table
    source: SourceTable
    reader: str  # the subject's latest schema's text
    writers: dict[str, str]  # schema id text -> writer schema text
    config: str  # what they are decoded by (`native.config`)
    keys: list[str]
    target: Staged  # its table, or `skipped`: it holds the batch, and its records are only counted


@dataclass(frozen=True)
class Counted:
    """What the job found in one topic's records (jvm/cdc `QuietTopics.append`)."""

    rows: int
    tombstones: int
    rest: int  # not framed envelopes of the topic's writers, or compressed: for the per-topic path
    invalid: int  # envelopes that do not decode
    refused: int  # envelopes that decode but must not land (`native.rejections`)
    written: int
    stray: int  # of the rest: records sure to be dead letters (the input's `STRAY`)
    unlisted: int  # of the rest: uncompressed envelopes of an id of none of the topic's writers
    ids: list[str]  # the writer ids its framed records carried
    unlisted_ids: list[str]  # the ids of the `unlisted` envelopes


@functools.lru_cache(maxsize=4096)
def change_record(spark: SparkSession, config: str) -> StructType:
    """The columns a topic of envelope config `config` (`native.config`) lands in: its change record, stamped.
    Asked once a process per config: a topic's writers are the same from batch to batch."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(_quiet_topics(spark).schema(config)))


def append(spark: SparkSession, rows: DataFrame, topics: Sequence[QuietTopic], writer_id: str, batch_id: int,
           stamps: Mapping[str, int], properties: Mapping[str, str], threads: int) -> list[Counted]:
    """Decodes `topics`' records of `rows` (`Landing._classified`'s columns, `BODY_OFFSET` and `STRAY`) and appends
    them to their tables, each committed with `properties` and the commit tag of (`writer_id`, `batch_id`); `stamps`
    fill `_ingested_at` (micros) and `_batch_id`. In `topics`' order; the job's and the commits' seconds are
    logged."""
    tasks = TASKS_PER_CORE * spark.sparkContext.defaultParallelism
    tables: list[Any] = [None if topic.target.skipped else topic.target.table for topic in topics]
    found = json.loads(_quiet_topics(spark).append(
        rows._jdf, [t.topic for t in topics], [t.config for t in topics], [list(t.keys) for t in topics], tables,
        dict(stamps), {**properties, COMMIT_PROPERTY: f"{writer_id}:{batch_id}"}, Kind.FRAMED.value,
        Kind.TOMBSTONE.value, tasks, threads))
    log.info("changelog.quiet_topics", batch=batch_id, topics=len(topics), job_s=round(found["job_s"], 2),
             commits_s=round(found["commits_s"], 2))
    return [Counted(**counts) for counts in found["topics"]]


def _quiet_topics(spark: SparkSession) -> Any:  # the py4j class cdc.spark.QuietTopics
    from tables.lake import java_class

    return java_class(spark, "cdc.spark.QuietTopics")
