"""A Kafka batch's quiet topics landed together (`changelog.one_job_topics`) land exactly what each topic's own
write lands: the same rows, columns, partitioning and table properties, the same batch report; a replay of the batch
is skipped table by table, and a batch some of whose tables were committed lands the rest once. Both ways of
landing them together are held to it: Debezium envelopes decoded by one plan and appended by one job (jvm/cdc
`QuietTopics`, `pipeline/stages/changelog/quiet.py`), and, with the native decoder off, each topic's plan staged
and written by one job (jvm/cdc `ManyTables`, `tables/append.py` `ManyTablesAppender`); both commit each table
through Iceberg's Java API.

The batch is what `simulate --tables synthetic:12 --poison 0.02` sends (Debezium, two partitions a topic, some
records dead letters) and a DMS JSON record on one of its topics (which one pass of the topic leaves, to be
landed the planned way in the table its metadata names), read by the ranges the stage reads
(`kafka_offsets.TopicRange`), landed once by each path into a namespace of its own."""

from __future__ import annotations

import functools
import json
import re
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import DataFrame

from cdc.framing import Framing
from pipeline.config import kafka
from pipeline.config.settings import PipelineConfig
from pipeline.stages.changelog import BatchReport
from pipeline.stages.changelog.landing import Landing
from pipeline.stages.changelog.transports.kafka_offsets import EARLIEST, BatchReads, TopicRange
from registry.factory import serde_from_settings
from simulators.simulation import Simulation, SimulationOptions
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore
from tables.append import COMMIT_PROPERTY, TASKS_PER_CORE, iceberg_table
from tables.keys import stored_keys
from tables.lake import table_names
from tables.names import quote

TABLES = 12
BATCH = 7
DMS_RECORD = {"data": {"id": 7, "name": "x"}, "metadata": {
    "timestamp": "2026-01-02T03:04:05.000000Z", "record-type": "data", "operation": "insert",
    "schema-name": "shop", "table-name": "orders", "transaction-id": 1, "transaction-record-id": 1}}


@pytest.fixture(scope="module")
def ranges(cfg: PipelineConfig, stack, tmp_path_factory) -> list[TopicRange]:
    """The simulated database's topics, each with the offset range of all its records (one batch)."""
    prefix = f"onejob{uuid.uuid4().hex[:6]}"
    options = SimulationOptions(format="debezium", tables=f"synthetic:{TABLES}", events=1200, snapshot_rows=3,
                                evolve_at=600, poison=0.02, topic_prefix=prefix)
    Simulation(options, KafkaTransport(cfg.kafka, partitions=2),
               TruthStore(tmp_path_factory.mktemp("onejob") / "truth.db"),
               serde_from_settings(cfg.registry, cfg.aws)).run(progress=False)
    consumer = Consumer(kafka.client_conf(cfg.kafka, **{"group.id": "one-job-test"}))
    try:
        topics = sorted(t for t in consumer.list_topics(timeout=10).topics if t.startswith(f"{prefix}."))
        producer = Producer(kafka.client_conf(cfg.kafka))
        producer.produce(topics[0], json.dumps(DMS_RECORD).encode(), partition=0)
        assert producer.flush(10) == 0
        return [TopicRange(topic, {p: (EARLIEST, consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                                                timeout=10)[1])
                                   for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions})
                for topic in topics]
    finally:
        consumer.close()


def _config(cfg: PipelineConfig, one_job: bool, native: bool = True) -> PipelineConfig:
    """`cfg` with a changelog namespace of its own, landing quiet topics by one job or each by its own write;
    `native` off: no envelope is decoded by the native decoder, so no topic by the one plan."""
    namespace = f"{'one' if one_job else 'own'}_{uuid.uuid4().hex[:6]}"
    return cfg.model_copy(update={"changelog": cfg.changelog.model_copy(
        update={"namespace": namespace, "one_job_topics": one_job, "native_decode": native})})


def _land(cfg: PipelineConfig, spark, ranges: list[TopicRange], writer: str = "q") -> BatchReport:
    """Batch `BATCH` of `ranges`' records landed as the Kafka transport lands one (`KafkaTransport.land`)."""
    landing = Landing(cfg, spark)
    landing.prepare()
    headers = Framing.of(cfg.registry.wire_format).reads_headers
    report = BatchReport(BATCH, writer=writer)
    landing.land_topics(BatchReads(ranges, spark, cfg.kafka, headers), report)
    return report


@pytest.fixture(scope="module")
def landed(cfg: PipelineConfig, spark, ranges: list[TopicRange]) -> dict[str, tuple[PipelineConfig, BatchReport]]:
    """The batch landed by the one plan ("plan"), by the one job of staged plans, without the native decoder
    ("job"), and by each topic's own write ("own")."""
    assert all(r.quiet for r in ranges) and any(len(r.partitions) > 1 for r in ranges)
    return {path: (config, _land(config, spark, ranges))
            for path, config in (("plan", _config(cfg, True)), ("job", _config(cfg, True, native=False)),
                                 ("own", _config(cfg, False)))}


def _table(cfg: PipelineConfig, name: str) -> str:
    return quote(cfg.catalog.name, cfg.changelog.namespace, name)


def _contents(spark, cfg: PipelineConfig, name: str) -> dict:
    """What a landed table holds and how it is made: its rows (but `_ingested_at`), columns, partitioning and
    properties, and its snapshots' commit tags."""
    table = iceberg_table(spark, f"{cfg.catalog.name}.{cfg.changelog.namespace}.{name}")
    rows = spark.table(_table(cfg, name)).drop("_ingested_at")
    return {"rows": sorted(map(str, rows.collect())), "columns": rows.schema.jsonValue(),
            "spec": str(table.spec()), "properties": dict(table.properties()),
            "format": table.operations().current().formatVersion(),
            "tags": [s.summary().get(COMMIT_PROPERTY) for s in table.snapshots()]}


def _landed_tables(spark, cfg: PipelineConfig) -> list[str]:
    return sorted(table_names(cfg, spark, cfg.changelog.namespace))


def _report(report: BatchReport, cfg: PipelineConfig) -> dict:
    """A report's counts, its tables named without their namespace."""
    strip = f"{cfg.catalog.name}.{cfg.changelog.namespace}."
    return {"rows_in": report.rows_in, "tombstones": report.tombstones, "records": report.records,
            "tables": {t.removeprefix(strip): n for t, n in report.tables.items()},
            "skipped": sorted(t.removeprefix(strip) for t in report.skipped), "dead": report.dead_by_topic,
            "dead_letters": report.dead_letters, "one_pass": report.one_pass, "planned": report.planned}


def test_one_job_lands_what_each_topics_own_write_lands(spark, ranges, landed) -> None:
    (own_cfg, own), one_jobs = landed["own"], (landed["plan"], landed["job"])
    names = _landed_tables(spark, own_cfg)
    # + the DMS record's table, + dead_letters; the poison dead-lettered from what one pass counted, the DMS
    # record landed the planned way
    assert len(names) == TABLES + 2 and own.dead_letters > 0 and own.planned == [ranges[0].topic], (names, own)
    # every topic is Debezium envelopes the native decoder reads: decoded by the one plan (`quiet.py`)
    assert sorted(landed["plan"][1].one_plan) == [r.topic for r in ranges]
    assert not own.one_plan and not landed["job"][1].one_plan
    for one_cfg, one in one_jobs:
        assert _report(one, one_cfg) == _report(own, own_cfg)
        assert _landed_tables(spark, one_cfg) == names
        for name in names:
            assert _contents(spark, one_cfg, name) == _contents(spark, own_cfg, name), name


@pytest.mark.parametrize("path", ["plan", "job"])
def test_the_tables_were_committed_through_icebergs_java_api(spark, landed, path: str) -> None:
    """Spark's writes put the application's id in a snapshot's summary; the one job's commits do not. (What one
    pass of a topic did not cover, under `q+rest`, and the dead letters are Spark's writes.)"""
    one_cfg, one = landed[path]
    for table in one.tables:
        if not table.endswith(f".{one_cfg.changelog.dead_letter_table}"):
            summaries = {s.summary().get(COMMIT_PROPERTY): s.summary() for s in iceberg_table(spark, table).snapshots()}
            if f"q+rest:{BATCH}" in summaries:  # the DMS record's table
                assert f"q:{BATCH}" not in summaries and summaries[f"q+rest:{BATCH}"].get("spark.app.id"), table
            else:
                assert summaries[f"q:{BATCH}"].get("spark.app.id") is None, table


def test_a_replayed_batch_is_skipped_table_by_table(spark, ranges, landed) -> None:
    one_cfg, one = landed["plan"]
    before = {name: _contents(spark, one_cfg, name) for name in _landed_tables(spark, one_cfg)}
    again = _land(one_cfg, spark, ranges)
    assert (again.tables, set(again.skipped), again.dead_letters_skipped) == ({}, set(one.tables), True)
    assert {name: _contents(spark, one_cfg, name) for name in before} == before  # 0 doubled


def test_a_batch_some_of_whose_tables_were_committed_lands_the_rest_once(cfg, spark, ranges, landed) -> None:
    """A crash after four topics' appends, before the batch's dead letters: a replay lands the rest once."""
    own_cfg, _ = landed["own"]
    config = _config(cfg, one_job=True)
    landing, first = Landing(config, spark), BatchReport(BATCH, writer="q")
    landing.prepare()
    headers = Framing.of(config.registry.wire_format).reads_headers
    for r in ranges[:4]:
        landing._one_pass(landing._classified(r.read(spark, config.kafka, headers)), r.topic, first)
    replayed = _land(config, spark, ranges)
    assert set(replayed.skipped) == set(first.tables) and len(first.tables) >= 4, (replayed.skipped, first.tables)
    assert not set(replayed.tables) & set(first.tables)
    for name in _landed_tables(spark, own_cfg):
        assert _contents(spark, config, name)["rows"] == _contents(spark, own_cfg, name)["rows"], name


def test_a_table_whose_columns_the_batch_changes_lands_by_a_write_of_its_own(cfg, spark, ranges) -> None:
    """A table that lacks a column the batch brings is not the one job's: a write of its own adds the column."""
    config = _config(cfg, one_job=True)
    quiet = ranges[1:3]  # two topics of Debezium envelopes alone
    _land(config, spark, quiet)
    changed, kept = [name for name in _landed_tables(spark, config) if name != config.changelog.dead_letter_table]
    table = iceberg_table(spark, f"{config.catalog.name}.{config.changelog.namespace}.{changed}")
    keys = stored_keys(dict(table.properties()))
    column = next(f.name for f in spark.table(_table(config, changed)).schema.fields
                  if not f.name.startswith("_") and f.name not in keys)
    spark.sql(f"ALTER TABLE {_table(config, changed)} DROP COLUMN {quote(column)}")
    report = BatchReport(BATCH + 1, writer="q")
    landing = Landing(config, spark)
    headers = Framing.of(config.registry.wire_format).reads_headers
    landing.land_topics(BatchReads(quiet, spark, config.kafka, headers), report)
    assert column in spark.table(_table(config, changed)).columns
    for name, own_write in ((changed, True), (kept, False)):
        [summary] = [s.summary() for s in iceberg_table(spark, f"{config.catalog.name}."
                                                              f"{config.changelog.namespace}.{name}").snapshots()
                     if s.summary().get(COMMIT_PROPERTY) == f"q:{BATCH + 1}"]
        assert (summary.get("spark.app.id") is not None) == own_write, name


def _consumers(spark, group: str) -> set[str]:
    """The client ids of the Kafka consumers of `group` alive in this (local) JVM, from their JMX registrations."""
    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    # Through the interface's method: py4j cannot call one on the JDK's server class, which its module hides.
    signature = gateway.new_array(jvm.java.lang.Class, 2)
    signature[0], signature[1] = (jvm.java.lang.Class.forName(f"javax.management.{n}") for n in ("ObjectName", "QueryExp"))
    arguments = gateway.new_array(jvm.java.lang.Object, 2)
    arguments[0] = jvm.javax.management.ObjectName("kafka.consumer:type=app-info,*")
    names = (jvm.java.lang.Class.forName("javax.management.MBeanServer").getMethod("queryNames", signature)
             .invoke(jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer(), arguments))
    ids = {name.getKeyProperty("client-id") or name.getKeyProperty("id") for name in names}  # a consumer has both
    return {client for client in ids if f"-{group}-" in client}


def test_the_reads_of_a_group_reuse_the_executors_consumers(cfg, spark, ranges) -> None:
    """Each batch's reads used to open a consumer a partition (Spark gives every read a group of its own); the
    stage's reads now share one group (`kafka.reader_group`), whose consumers Spark keeps between reads."""
    group = kafka.reader_group(cfg.kafka, f"checkpoint-{uuid.uuid4().hex[:6]}")
    headers = Framing.of(cfg.registry.wire_format).reads_headers

    def read_all() -> int:
        return functools.reduce(DataFrame.unionByName, [r.read(spark, cfg.kafka, headers, group=group)
                                                        for r in ranges]).count()

    first = read_all()
    opened = _consumers(spark, group)
    assert first == read_all() > 0
    assert opened and _consumers(spark, group) == opened  # the second read opened none
    assert len(opened) == sum(len(r.partitions) for r in ranges)  # a consumer a partition, kept


def test_the_quiet_topics_one_read_gives_what_sparks_kafka_source_reads(cfg, spark, ranges) -> None:
    """`BatchReads.together` reads its share of the partitions with one consumer a task (jvm/cdc `KafkaRanges`),
    where Spark's source makes one a partition: the same rows, column for column, from a partition's earliest
    offset and from inside it, for the topics asked and no other."""
    mixed = [TopicRange(r.topic, {p: (end // 2, end) if n % 2 else (start, end)
                                  for p, (start, end) in r.partitions.items()}) for n, r in enumerate(ranges)]
    asked = mixed[:-1]
    ours = BatchReads(mixed, spark, cfg.kafka, headers=True).together([r.topic for r in asked])
    theirs = functools.reduce(DataFrame.unionByName, [r.read(spark, cfg.kafka, headers=True) for r in asked])
    assert ours.schema == theirs.schema
    order = ["topic", "partition", "offset"]
    rows = ours.orderBy(*order).collect()
    assert rows == theirs.orderBy(*order).collect()
    assert len(rows) == sum(end - max(start, 0) for r in asked for start, end in r.partitions.values())
    assert ours.rdd.getNumPartitions() == TASKS_PER_CORE * spark.sparkContext.defaultParallelism


def test_a_range_kafka_cannot_give_fails_its_read_naming_the_partition(cfg, spark, ranges) -> None:
    first = ranges[0]
    partition, (_, end) = min(first.partitions.items())
    beyond = BatchReads([TopicRange(first.topic, {partition: (end, end + 5)})], spark, cfg.kafka, headers=False,
                        poll_timeout_ms=3000)
    with pytest.raises(Exception, match=rf"{re.escape(first.topic)}-{partition} at {end} of {end + 5}"):
        beyond.together([first.topic]).count()
