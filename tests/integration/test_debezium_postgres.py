"""Real PostgreSQL -> real Debezium (Kafka Connect, Apicurio's converter as seed 002 configures it) -> changelog
-> mirror: the mirror's live rows equal `SELECT *`, value by value, and each column has its lake type.

The same seeded DML (inserts, updates, deletes, re-inserts, TOAST-unchanged updates, an added column, a truncate,
primary-key changes) runs in two databases, each captured by one connector: the full envelope and the unwrap SMT
(without the truncate, which that transform drops). A third database is captured without a snapshot
(`snapshot.mode=no_data`) and its rows taken by `pipeline backfill`, killed once, with DML before and after it.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import Iterator

import fastavro
import pytest
import requests

from pipeline.stages.backfill import Backfill, BackfillError, BackfillReport
from pipeline.stages.changelog import ChangelogStage
from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import MirrorStage
from pipeline.stack import Stack
from pipeline.stack.debezium import PostgresSource, register, unregister, wait_delivered
from pipeline.stack.psql import Psql
from simulators.postgres import KEYS, ShopDriver, Summary, compare_mirror
from tables.lake import lake_table
from tests.conftest import PORT_OFFSET, PROCESS_SETTINGS, REPO, make_config

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
            wait_delivered(cfg, source.name, driver.mark_end())
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


# -- pipeline backfill ------------------------------------------------------------------------------------

BACKFILLED = ("customers", "orders")
REFUSED_DDL = """
CREATE TABLE keyless (a int, b text);
CREATE TABLE loose (id int PRIMARY KEY, code text, label text UNIQUE);
CREATE TABLE spans (id int PRIMARY KEY, took interval);
CREATE TABLE notes (id int PRIMARY KEY, body text);
"""


@dataclass(frozen=True)
class Backfilled:
    cfg: PipelineConfig
    source: PostgresSource
    psql: Psql
    at_backfill: dict[str, int]  # each table's rows when its backfill ran
    killed_after: int  # rows of orders the killed process had committed
    resumed: BackfillReport  # the run after the kill
    mirrored_while_running: list[str]  # what a mirror run merged while the orders' backfill was half done

    def lake(self, table: str) -> str:
        return f"{self.source.topic_prefix}_{table}"

    def topic(self, table: str) -> str:
        return f"{self.source.topic_prefix}.public.{table}"


@pytest.fixture(scope="module")
def backfilled(postgres_cfg: PipelineConfig, spark, tmp_path_factory) -> Iterator[Backfilled]:
    """A database whose connector streams without a snapshot, the rows it held taken by `pipeline backfill`.

    DML runs before the backfill (landed in the changelog first) and after it (landed after it). The orders'
    backfill runs as `pipeline backfill` in a process of its own, in batches of ~200 rows, SIGKILLed once it has
    logged its second batch; a mirror run then (the backfill half done) and the backfill run again here. The
    customers' (TOASTed notes, every semantic type) runs here once."""
    tag = uuid.uuid4().hex[:6]
    database = f"shop_bf_{tag}"
    source = PostgresSource(f"bf_{tag}", f"pgbf{tag}", tuple(f"public.{t}" for t in (*BACKFILLED, "notes")),
                            database=database, snapshot_mode="no_data")
    Psql(postgres_cfg.stack, "postgres").execute(f"CREATE DATABASE {database};")
    psql = Psql(postgres_cfg.stack, database)
    driver = ShopDriver(psql, seed=31)
    driver.create(customers=150, orders=1500)
    psql.execute(REFUSED_DDL)
    url = f"jdbc:postgresql://{postgres_cfg.stack.host}:{postgres_cfg.stack.postgres_port}/{database}"
    settings = [f"backfill.url={url}", "backfill.batch_rows=200"]
    cfg = make_config(*settings, f"stack.postgres_port={postgres_cfg.stack.postgres_port}",
                      f"stack.connect_port={postgres_cfg.stack.connect_port}")
    changelog = cfg.changelog.model_copy(update={"topic_pattern": rf"{source.topic_prefix}\..*",
                                                 "checkpoint": str(tmp_path_factory.mktemp("checkpoint"))})
    cfg = cfg.model_copy(update={"changelog": changelog})
    register(postgres_cfg, source)
    psql.execute("INSERT INTO notes VALUES (1, 'a'), (2, 'b');")  # streamed: `notes` is mirrored from its stream alone
    try:
        def stream(operations: int, truncate: bool) -> None:
            driver.run(operations=operations, truncate=truncate)
            wait_delivered(postgres_cfg, source.name, driver.mark_end())
            ChangelogStage(cfg, spark).run(until_caught_up=True)

        stream(120, truncate=False)  # lands before the backfill: the changelog tables exist, with the record key
        at_backfill = {table: psql.rows(f"SELECT count(*) AS n FROM {table}")[0]["n"] for table in BACKFILLED}
        command = [sys.executable, "-m", "pipeline", "--log-format", "json", *[f"--set={s}" for s in PROCESS_SETTINGS],
                   *[f"--set={s}" for s in settings], "backfill", "--table", f"{source.topic_prefix}.public.orders"]
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert process.stdout is not None
        batches = []
        for line in process.stdout:
            if '"backfill.batch"' in line:
                batches.append(json.loads(line))
                if len(batches) == 2:
                    break
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        assert len(batches) == 2, "the backfill process ended before its second batch"
        orders = f"{source.topic_prefix}_orders"
        mirrored_while_running = [r.table for r in MirrorStage(cfg, spark).run_once([orders])]
        resumed = Backfill(cfg, spark, f"{source.topic_prefix}.public.orders").run()
        Backfill(cfg, spark, f"{source.topic_prefix}.public.customers").run()
        stream(150, truncate=True)  # lands after it: updates (TOAST left out), deletes, a truncate of orders
        MirrorStage(cfg, spark).run_once([f"{source.topic_prefix}_{t}" for t in BACKFILLED])
        yield Backfilled(cfg, source, psql, at_backfill, batches[-1]["rows_total"], resumed, mirrored_while_running)
    finally:
        unregister(postgres_cfg, source)


def _snapshot_rows(backfilled: Backfilled, spark, table: str):  # type: ignore[no-untyped-def]
    changelog = lake_table(backfilled.cfg, spark, backfilled.cfg.changelog.namespace, backfilled.lake(table)).read()
    return changelog.where("_source.format = 'backfill'")


@pytest.mark.parametrize("table", BACKFILLED)
def test_a_backfill_lands_each_row_once_though_killed(backfilled: Backfilled, spark, table: str) -> None:
    """No DML ran during the backfills, so each row the table held was read once: as many snapshot rows as
    distinct keys as the table held, in batches committed once each, the killed run's and the resumed run's."""
    key = KEYS[table]
    rows, keys, batches, commits = _snapshot_rows(backfilled, spark, table).selectExpr(
        "count(*)", f"count(DISTINCT {key})", "count(DISTINCT _batch_id)", "max(_batch_id) + 1").first()
    assert (rows, keys) == (backfilled.at_backfill[table], backfilled.at_backfill[table])
    assert batches == commits  # batch ids 0..n-1, none skipped
    if table == "orders":
        assert 0 < backfilled.killed_after < rows
        assert backfilled.resumed.landed == rows - backfilled.killed_after
        assert backfilled.resumed.rows == rows


def test_a_half_done_backfill_is_not_mirrored(backfilled: Backfilled) -> None:
    assert backfilled.mirrored_while_running == []


@pytest.mark.parametrize("table", BACKFILLED)
def test_a_backfilled_mirror_equals_select_star(backfilled: Backfilled, spark, table: str) -> None:
    """The snapshot's rows and the stream's, landed before and after them, make the source's rows: values, types,
    TOASTed texts that later updates left out, the truncate, the column added before the backfill."""
    cfg = backfilled.cfg  # the mirror learned its key; the comparison's overlay is told it
    cfg = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"keys": {backfilled.lake(table): KEYS[table]}})})
    comparison = compare_mirror(cfg, spark, backfilled.psql, table, backfilled.lake(table))
    report = "\n".join(comparison.lines())
    assert not comparison.type_mismatches, report
    assert comparison.verdict.mismatches == 0, report
    assert comparison.verdict.rows > 0


def test_a_new_tables_backfill_builds_its_mirror_from_each_key_once(backfilled: Backfilled, spark,
                                                                    monkeypatch) -> None:
    """A table no stream has landed, backfilled in one pass of three batches: each key has one change, so its
    mirror's first build takes them as read (`keys_once`), and the mirror equals `SELECT *` (every semantic type of
    the customers, copied). A restart lands the keys again: no longer once, and the mirror still equals it. The
    backfills after streamed rows never were."""
    import pipeline.api.apply as apply_module
    from tables.backfill_state import KEYS_ONCE, backfill_state, keys_once

    backfilled.psql.execute("CREATE TABLE ledger AS SELECT * FROM customers; ALTER TABLE ledger ADD PRIMARY KEY (id);")
    cfg = backfilled.cfg.model_copy(update={
        "backfill": backfilled.cfg.backfill.model_copy(update={"batch_rows": 60}),
        "mirror": backfilled.cfg.mirror.model_copy(update={"keys": {backfilled.lake("ledger"): "id"},
                                                           "pending_build_rows": 100})})  # else built with others
    built_once, first_build = [], apply_module.first_build

    def spied(*args, **kwargs):  # type: ignore[no-untyped-def]
        built_once.append(args[-1])
        return first_build(*args, **kwargs)

    monkeypatch.setattr(apply_module, "first_build", spied)
    report = Backfill(cfg, spark, backfilled.topic("ledger")).run()
    rows = backfilled.psql.rows("SELECT count(*) AS n FROM ledger")[0]["n"]
    assert report.rows == report.landed == rows > 120
    assert built_once == [True]
    changelog = lake_table(cfg, spark, cfg.changelog.namespace, backfilled.lake("ledger"))
    assert keys_once(changelog.properties(), changelog.commit_id())
    assert _snapshot_rows(backfilled, spark, "ledger").selectExpr("count(DISTINCT _batch_id)").first()[0] == 3

    def matches() -> None:
        comparison = compare_mirror(cfg, spark, backfilled.psql, "ledger", backfilled.lake("ledger"), key="id")
        report = "\n".join(comparison.lines())
        assert not comparison.type_mismatches, report
        assert comparison.verdict.mismatches == 0 and comparison.verdict.rows == rows, report

    matches()
    assert Backfill(cfg, spark, backfilled.topic("ledger")).run(restart=True).landed == rows
    assert backfill_state(changelog.properties())[KEYS_ONCE] is False
    assert built_once == [True]  # the mirror was there: the restart's rows were merged
    matches()
    for table in BACKFILLED:  # their changelogs held streamed rows first
        streamed = lake_table(cfg, spark, cfg.changelog.namespace, backfilled.lake(table)).properties()
        assert backfill_state(streamed)[KEYS_ONCE] is False


def test_a_finished_backfill_lands_nothing_again(backfilled: Backfilled, spark) -> None:
    again = Backfill(backfilled.cfg, spark, backfilled.topic("orders")).run()
    assert (again.landed, again.rows) == (0, backfilled.at_backfill["orders"])


def test_a_backfill_refuses_what_would_lose_or_double_rows(backfilled: Backfilled, mirrored: PipelineConfig,
                                                           captured: Captured, spark) -> None:
    """Each refusal names the table and the fix, before a row is read."""
    cfg = backfilled.cfg

    def refusal(topic: str, config: PipelineConfig = cfg) -> str:
        with pytest.raises(BackfillError) as raised:
            Backfill(config, spark, topic).run()
        return str(raised.value)

    assert "has no primary key" in refusal(backfilled.topic("keyless"))
    assert f"mirror.keys.{backfilled.lake('keyless')}" in refusal(backfilled.topic("keyless"))
    loose = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"keys": {backfilled.lake("loose"): "code"}})})
    assert "is not unique in public.loose" in refusal(backfilled.topic("loose"), loose)
    nullable = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"keys": {backfilled.lake("loose"): "label"}})})
    assert "label may be null in public.loose" in refusal(backfilled.topic("loose"), nullable)
    assert "took (interval)" in refusal(backfilled.topic("spans"))
    # Debezium's own snapshot already in the changelog (the module's first database)
    run = captured.runs["debezium"]
    url = f"jdbc:postgresql://{cfg.stack.host}:{cfg.stack.postgres_port}/{run.source.database}"
    theirs = mirrored.model_copy(update={"backfill": cfg.backfill.model_copy(update={"url": url})})
    assert "already holds a snapshot" in refusal(f"{run.source.topic_prefix}.public.customers", theirs)
    # a mirror merged from the stream alone: `notes` (its rows streamed, none backfilled)
    MirrorStage(cfg, spark).run_once([backfilled.lake("notes")])
    assert "already holds rows merged from" in refusal(backfilled.topic("notes"))


def test_a_restarted_backfill_reads_the_table_again_and_the_mirror_keeps_each_keys_newest(
        backfilled: Backfilled, spark) -> None:
    """`--restart` after the DML that followed the first backfill: every row the table holds now is landed again
    as a snapshot read of a later batch, and the mirror still equals `SELECT *` (a later change of a key, in the
    stream, outranks both snapshot reads of it). Last in the module: it doubles the table's snapshot rows."""
    now = backfilled.psql.rows("SELECT count(*) AS n FROM customers")[0]["n"]
    again = Backfill(backfilled.cfg, spark, backfilled.topic("customers")).run(restart=True)
    assert (again.landed, again.rows) == (now, backfilled.at_backfill["customers"] + now)
    cfg = backfilled.cfg
    cfg = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"keys": {backfilled.lake("customers"): "id"}})})
    comparison = compare_mirror(cfg, spark, backfilled.psql, "customers", backfilled.lake("customers"))
    assert comparison.ok, "\n".join(comparison.lines())
