"""`pipeline dead-letters list | replay`: what the changelog stage could not land, and landing it once the cause
is fixed (a schema registered, a converter or registry setting corrected).

A replay runs the stored records through the stage's own decode, normalise and append, under a writer id of
its own, then deletes from the dead-letter table the records that are now in their changelog table. It is
exactly once by transport position (topic, partition, offset): records already in a changelog table, from a
replay that crashed before its delete or from a re-read of the source meanwhile, are deleted, never landed
twice. Records that still fail stay where they are, counted by reason.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

import structlog

from cdc.normalize import TRANSPORT_EXTRAS
from pipeline.stages.changelog.landing import Landing
from pipeline.stages.changelog.report import BatchReport
from pipeline.stages.changelog.transports import transport_for
from pipeline.config.settings import PipelineConfig
from tables.lake import lake_table
from tables.names import UnmappableName, sql_string

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = structlog.get_logger(__name__)

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")
POSITION = ("topic", "partition", "offset")


@dataclass(frozen=True)
class Reason:
    """Dead letters of one topic with one error class and message."""

    topic: str
    table: str  # the changelog table the topic lands in ("-" for none)
    error_class: str
    error_message: str
    count: int
    first_seen: str
    last_seen: str


@dataclass
class ReplayReport:
    selected: int = 0
    landed: dict[str, int] = field(default_factory=dict)  # changelog table -> records now in it
    still_failing: dict[str, int] = field(default_factory=dict)  # error class -> records left in dead letters

    def line(self) -> str:
        landed = ", ".join(f"{table}={n}" for table, n in sorted(self.landed.items())) or "none"
        failing = ", ".join(f"{cls}={n}" for cls, n in sorted(self.still_failing.items())) or "none"
        return f"replayed {self.selected} dead letters: landed {landed}; still failing {failing}"


def changelog_table_of(cfg: PipelineConfig, topic: str) -> str | None:
    """The changelog table a topic `<db>.<schema>.<table>` lands in, as the stage names it (`names.*`); None
    when its name maps to no table (its dead letters say why)."""
    try:
        return cfg.names.rule().of_topic(topic)
    except UnmappableName:
        return None


def read(cfg: PipelineConfig, spark: SparkSession, topics: list[str] = (), error_class: str | None = None,
         ) -> DataFrame | None:
    """The dead letters (of `topics` and `error_class` when given), or None when there is no such table yet."""
    from pyspark.sql import functions as F

    table = lake_table(cfg, spark, cfg.changelog.namespace, cfg.changelog.dead_letter_table)
    if not table.exists():
        return None
    letters = table.read()
    if topics:
        letters = letters.where(F.col("topic").isin(list(topics)))
    if error_class:
        letters = letters.where(F.col("error_class") == error_class)
    return letters


def reasons(cfg: PipelineConfig, spark: SparkSession, topics: list[str] = ()) -> list[Reason]:
    """Dead letters grouped by topic, error class and message, most numerous first."""
    from pyspark.sql import functions as F

    letters = read(cfg, spark, topics)
    if letters is None:
        return []
    groups = (letters.groupBy("topic", "error_class", "error_message")
              .agg(F.count(F.lit(1)).alias("n"), F.min("_ingested_at").alias("first"),
                   F.max("_ingested_at").alias("last"))
              .orderBy(F.desc("n"), "topic", "error_class").collect())
    return [Reason(g["topic"], changelog_table_of(cfg, g["topic"]) or "-", g["error_class"], g["error_message"], g["n"],
                   str(g["first"]), str(g["last"])) for g in groups]


def replay(cfg: PipelineConfig, spark: SparkSession, topics: list[str] = (), error_class: str | None = None,
           ) -> ReplayReport:
    """Land the selected dead letters through the changelog stage and delete the ones that landed."""
    letters = read(cfg, spark, topics, error_class)
    report = ReplayReport()
    if letters is None:
        return report
    letters = letters.persist()
    try:
        report.selected = letters.count()
        if not report.selected:
            return report
        found = sorted(row["topic"] for row in letters.select("topic").distinct().collect())
        # cut from the changelog tables it was read against: landing may add columns to those tables
        pending = _against_changelog(cfg, spark, letters, found, landed=False).localCheckpoint()
        columns = [c for c in (*KAFKA_COLUMNS, *TRANSPORT_EXTRAS) if c in pending.columns]
        landing = BatchReport(0, writer=f"replay-{uuid.uuid4()}")
        transport_for(_subscribed(cfg, found)).replay(Landing(cfg, spark), pending.select(*columns), landing)
        report.still_failing = {cls: n for classes in landing.dead_by_topic.values() for cls, n in classes.items()}
        landed = _against_changelog(cfg, spark, letters, found, landed=True)
        for row in landed.groupBy("topic").count().collect():
            table = str(changelog_table_of(cfg, row["topic"]))  # landed, so it names a table
            report.landed[table] = report.landed.get(table, 0) + row["count"]
        _delete(cfg, spark, landed.select(*POSITION).distinct())
        log.info("dead_letters.replayed", selected=report.selected, landed=report.landed,
                 still_failing=report.still_failing, writer=landing.writer)
    finally:
        letters.unpersist()
    return report


def _subscribed(cfg: PipelineConfig, topics: list[str]) -> PipelineConfig:
    """The configuration with the dead letters' topics as the subscription (Kafka's transport requires one;
    the others read theirs from their own settings)."""
    return cfg.model_copy(update={"changelog": cfg.changelog.model_copy(update={"topics": topics,
                                                                                "topic_pattern": None})})


def _positions(cfg: PipelineConfig, spark: SparkSession, topics: list[str]) -> DataFrame | None:
    """Transport positions of every record in the topics' changelog tables."""
    from functools import reduce

    from pyspark.sql import functions as F

    parts = []
    for name in sorted({name for name in (changelog_table_of(cfg, topic) for topic in topics) if name}):
        table = lake_table(cfg, spark, cfg.changelog.namespace, name)
        if table.exists():
            parts.append(table.read().select(*[F.col("_transport")[c].alias(c) for c in POSITION]))
    return reduce(lambda a, b: a.unionByName(b), parts) if parts else None


def _against_changelog(cfg: PipelineConfig, spark: SparkSession, letters: DataFrame, topics: list[str],
                       landed: bool) -> DataFrame:
    """The dead letters whose position is (`landed`) or is not in their changelog table."""
    positions = _positions(cfg, spark, topics)
    if positions is None:
        return letters.limit(0) if landed else letters
    return letters.join(positions, list(POSITION), "left_semi" if landed else "left_anti")


def _delete(cfg: PipelineConfig, spark: SparkSession, positions: DataFrame) -> None:
    """Delete the dead letters at `positions` in one commit, so a crash leaves all or none of them deleted.

    The condition names runs of consecutive offsets per topic partition (a misconfiguration dead-letters
    runs, so there are few). A MERGE would be the obvious tool, but Spark cannot resolve a MERGE into a table
    that accepts any schema (`write.spark.accept-any-schema`, which the stage's tables take)."""
    condition = " OR ".join(
        f"(topic = {sql_string(topic)} AND `partition` = {partition} AND `offset` BETWEEN {first} AND {last})"
        for topic, partition, first, last in offset_runs(tuple(row) for row in positions.collect()))
    if not condition:
        return
    table = lake_table(cfg, spark, cfg.changelog.namespace, cfg.changelog.dead_letter_table)
    if cfg.lake.format == "delta":
        from delta.tables import DeltaTable

        DeltaTable.forPath(spark, table.ref).delete(condition)
    else:
        spark.sql(f"DELETE FROM {table.ref} WHERE {condition}")


def offset_runs(positions: Iterable[tuple[str, int, int]]) -> list[tuple[str, int, int, int]]:
    """(topic, partition, first offset, last offset) for each run of consecutive offsets."""
    runs: list[tuple[str, int, int, int]] = []
    for topic, partition, offset in sorted(set(positions)):
        if runs and runs[-1][:2] == (topic, partition) and runs[-1][3] == offset - 1:
            runs[-1] = (topic, partition, runs[-1][2], offset)
        else:
            runs.append((topic, partition, offset, offset))
    return runs
