"""Real PostgreSQL -> real Debezium (Kafka Connect, Apicurio's converter as seed 002 configures it) -> changelog
-> mirror: the mirror's live rows equal `SELECT *`, value by value, and each column has its lake type.

The same seeded DML (inserts, updates, deletes, re-inserts, TOAST-unchanged updates, an added column, a truncate,
primary-key changes) runs in two databases, each captured by one connector: the full envelope and the unwrap SMT
(without the truncate, which that transform drops).
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass
from typing import Iterator

import fastavro
import pytest
import requests

from pipeline.stages.changelog import ChangelogStage
from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import MirrorStage
from pipeline.stack import Stack
from pipeline.stack.debezium import PostgresSource, register, unregister, wait_flushed
from pipeline.stack.psql import Psql
from simulators.postgres import KEYS, ShopDriver, Summary, compare_mirror
from tables.lake import lake_table
from tests.conftest import PORT_OFFSET, make_config

pytestmark = pytest.mark.integration

SHAPES = ("debezium", "debezium-unwrapped")
PLACEHOLDER = "__debezium_unavailable_value"


@dataclass(frozen=True)
class Run:
    """One connector and the DML it captured, in a database of its own."""

    source: PostgresSource
    summary: Summary
    truncated: frozenset[int]  # order keys the TRUNCATE removed and nothing brought back


@dataclass(frozen=True)
class Captured:
    cfg: PipelineConfig
    runs: dict[str, Run]  # by record shape

    def psql(self, shape: str) -> Psql:
        return Psql(self.cfg.stack, self.runs[shape].source.database)


@pytest.fixture(scope="module")
def postgres_cfg(stack) -> Iterator[PipelineConfig]:
    """The test stack plus PostgreSQL and Connect, on this session's offset ports."""
    cfg = make_config("stack.postgres=true", f"stack.postgres_port={15432 + PORT_OFFSET}",
                      f"stack.connect_port={18083 + PORT_OFFSET}")
    real = Stack(cfg, only=["postgres", "connect"])
    started = real.up()
    yield cfg
    for svc in reversed(real.services):
        if svc.name in started:
            svc.process.stop()


@pytest.fixture(scope="module")
def captured(postgres_cfg: PipelineConfig) -> Iterator[Captured]:
    """The same seeded DML in two new databases, each captured by one connector: the full envelope, and the
    unwrap SMT. The unwrapped run has no TRUNCATE: the SMT drops truncate events (Debezium 3.3), so no consumer
    of a flattened stream can follow one; the envelope run has it."""
    cfg, tag = postgres_cfg, uuid.uuid4().hex[:6]
    tables = tuple(f"public.{table}" for table in KEYS)
    sources = {"debezium": PostgresSource(f"env_{tag}", f"pgenv{tag}", tables, database=f"shop_env_{tag}"),
               "debezium-unwrapped": PostgresSource(f"flat_{tag}", f"pgflat{tag}", tables, unwrap=True,
                                                    database=f"shop_flat_{tag}")}
    runs: dict[str, Run] = {}
    registered: list[PostgresSource] = []
    try:
        for shape, source in sources.items():
            Psql(cfg.stack, "postgres").execute(f"CREATE DATABASE {source.database};")
            driver = ShopDriver(Psql(cfg.stack, source.database), seed=23)
            driver.create(customers=30, orders=30)
            registered.append(source)
            register(cfg, source)  # waits for the snapshot of the 60 rows
            summary = driver.run(operations=300, truncate=shape == "debezium")
            wait_flushed(cfg, source.name, driver.mark_end())
            runs[shape] = Run(source, summary, frozenset(driver.truncated - driver.orders))
        yield Captured(cfg, runs)
    finally:
        for source in registered:
            unregister(cfg, source)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_dml_covers_every_kind_of_change(captured: Captured, shape: str) -> None:
    run = captured.runs[shape]
    kinds = ["insert_customer", "update_customer", "delete_customer", "reinsert_customer", "insert_order",
             "update_order", "delete_order", "reinsert_order", "change_order_key", "add_column"]
    for kind in kinds + (["truncate"] if shape == "debezium" else []):
        assert run.summary.counts.get(kind, 0) > 0, f"the run made no {kind}: {run.summary.line()}"
    assert bool(run.truncated) == (shape == "debezium")


@pytest.mark.parametrize("shape", SHAPES)
def test_records_carry_the_seed_002_framing(captured: Captured, shape: str) -> None:
    """Apicurio's converter with seed 002's settings: plain Avro values (no magic byte, no id in the payload)
    whose schema's 8-byte global id is in the `apicurio.value.globalId` header."""
    from confluent_kafka import Consumer, TopicPartition

    topic = f"{captured.runs[shape].source.topic_prefix}.public.customers"
    consumer = Consumer({"bootstrap.servers": captured.cfg.kafka.bootstrap_servers, "group.id": f"peek-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        message = None
        while message is None or message.value() is None:  # the first record with a value (not a tombstone)
            message = consumer.poll(10)
            assert message is not None, f"no record with a value in {topic}"
    finally:
        consumer.close()
    headers = dict(message.headers())
    assert headers["apicurio.value.encoding"] == b"BINARY"
    global_id = int.from_bytes(headers["apicurio.value.globalId"], "big")
    assert len(headers["apicurio.value.globalId"]) == 8 and "apicurio.key.globalId" in headers
    schema = requests.get(f"{captured.cfg.registry.url}/apis/registry/v2/ids/globalIds/{global_id}", timeout=10)
    schema.raise_for_status()
    payload = io.BytesIO(message.value())
    record = fastavro.schemaless_reader(payload, fastavro.parse_schema(json.loads(schema.text)))
    assert payload.tell() == len(message.value()), "the value is more than one plain Avro record"
    assert {"before", "after", "source", "op"} <= set(record) if shape == "debezium" else "__op" in record


@pytest.fixture(scope="module")
def landed(captured: Captured, spark, tmp_path_factory) -> PipelineConfig:
    """Both shapes landed by the changelog stage, until caught up, as `pipeline changelog` runs it; the
    configuration names the mirrors' keys."""
    cfg = captured.cfg
    prefixes = [run.source.topic_prefix for run in captured.runs.values()]
    keys = {f"{prefix}_{table}": key for prefix in prefixes for table, key in KEYS.items()}
    cfg = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"keys": keys, "tables": list(keys)})})
    changelog = cfg.changelog.model_copy(update={"topic_pattern": rf"({'|'.join(prefixes)})\..*",
                                                 "checkpoint": str(tmp_path_factory.mktemp("checkpoint"))})
    ChangelogStage(cfg.model_copy(update={"changelog": changelog}), spark).run(until_caught_up=True)
    return cfg


@pytest.fixture(scope="module")
def mirrored(landed: PipelineConfig, spark) -> PipelineConfig:
    """The mirrors merged from the changelog, as `pipeline mirror` runs the stage."""
    MirrorStage(landed, spark).run_once()
    return landed


@pytest.mark.parametrize("shape", SHAPES)
def test_nothing_is_dead_lettered(captured: Captured, landed: PipelineConfig, spark, shape: str) -> None:
    dead = lake_table(landed, spark, landed.changelog.namespace, landed.changelog.dead_letter_table)
    prefix = captured.runs[shape].source.topic_prefix
    reasons = (dead.read().where(f"topic LIKE '{prefix}.%'").groupBy("error_class", "error_message").count().collect()
               if dead.exists() else [])
    assert not reasons, "dead letters: " + "; ".join(f"{r['count']} x {r['error_class']}: {r['error_message'][:300]}"
                                                      for r in reasons)


@pytest.mark.parametrize("table", list(KEYS))
@pytest.mark.parametrize("shape", SHAPES)
def test_mirror_equals_select_star_types_included(captured: Captured, mirrored: PipelineConfig, spark, shape: str,
                                                  table: str) -> None:
    lake_name = f"{captured.runs[shape].source.topic_prefix}_{table}"
    comparison = compare_mirror(mirrored, spark, captured.psql(shape), table, lake_name)
    report = "\n".join(comparison.lines())
    assert not comparison.type_mismatches, report
    assert comparison.verdict.mismatches == 0, report
    assert comparison.verdict.rows > 0


def test_truncated_rows_are_soft_deleted(captured: Captured, mirrored: PipelineConfig, spark) -> None:
    run = captured.runs["debezium"]
    orders = lake_table(mirrored, spark, mirrored.mirror.namespace, f"{run.source.topic_prefix}_orders")
    rows = {r["order_id"]: r["_is_deleted"] for r in orders.read().select("order_id", "_is_deleted").collect()}
    assert {key: rows.get(key) for key in run.truncated} == {key: True for key in run.truncated}


@pytest.mark.parametrize("shape", SHAPES)
def test_toast_placeholders_never_reach_the_mirror(captured: Captured, mirrored: PipelineConfig, spark,
                                                   shape: str) -> None:
    customers = lake_table(mirrored, spark, mirrored.mirror.namespace,
                           f"{captured.runs[shape].source.topic_prefix}_customers").read()
    assert customers.where(f"notes = '{PLACEHOLDER}'").count() == 0
    assert customers.where("NOT _is_deleted AND length(notes) > 1000").count() > 0  # the large values themselves
