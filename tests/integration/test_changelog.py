"""Simulator -> Kafka -> `pipeline changelog` -> Iceberg: every change lands once, poison lands in dead letters."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from pipeline.stages.changelog import ChangelogStage, StageError
from pipeline.config.settings import PipelineConfig
from registry.factory import serde_from_settings
from simulators.simulation import Simulation, SimulationOptions, Summary
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore
from tests.conftest import PROCESS_SETTINGS, REPO, TEST_SETTINGS, free_port, make_config

pytestmark = pytest.mark.integration


def _simulate(cfg: PipelineConfig, tmp_path: Path, prefix: str, **options) -> tuple[Summary, TruthStore]:
    truth = TruthStore(tmp_path / f"{prefix}.db")
    simulation = Simulation(SimulationOptions(topic_prefix=prefix, seed=5, **options), KafkaTransport(cfg.kafka), truth,
                            serde_from_settings(cfg.registry, cfg.aws))
    return simulation.run(progress=False), truth


def _with_lake(cfg: PipelineConfig, lake_format: str) -> PipelineConfig:
    return cfg.model_copy(update={"lake": cfg.lake.model_copy(update={"format": lake_format})})


def _stage(cfg: PipelineConfig, spark, prefix: str, checkpoint: Path, stage: type[ChangelogStage] = ChangelogStage,
           **settings) -> ChangelogStage:
    changelog = cfg.changelog.model_copy(update={"topic_pattern": rf"{prefix}\..*", "checkpoint": checkpoint, **settings})
    return stage(cfg.model_copy(update={"changelog": changelog}), spark)


def _table(spark, cfg: PipelineConfig, name: str):
    """A changelog table of either format, or None when the stage has not created it."""
    from delta.tables import DeltaTable

    if cfg.lake.format == "delta":
        path = f"{cfg.lake.delta_root}/changelog/{name}"
        return spark.read.format("delta").load(path) if DeltaTable.isDeltaTable(spark, path) else None
    table = f"{cfg.catalog.name}.changelog.{name}"
    return spark.table(table) if spark.catalog.tableExists(table) else None


def _landed(spark, cfg: PipelineConfig, prefix: str, fmt: str) -> list[tuple]:
    rows = []
    for table, key in (("artists", "artist_id"), ("artworks", "artwork_id"), ("employee", "employee_id")):
        found = _table(spark, cfg, f"{prefix}_{table}")
        if found is None:
            continue
        identity = ["_source.tx_id", "_seq.source_minor"] if fmt.startswith("dms") else ["_seq.source_minor"]
        rows += [(table, *r) for r in found.selectExpr(key, "_op", *identity).collect()]
    return rows


def _dead_letters(spark, cfg: PipelineConfig, prefix: str):
    return _table(spark, cfg, "dead_letters").where(f"topic LIKE '{prefix}.%'")


FORMATS = ["debezium", "debezium-unwrapped", "dms", "dms-json"]


@dataclass(frozen=True)
class Landed:
    """A simulated source in one format, landed by the stage: where it went and what was sent."""

    cfg: PipelineConfig
    prefix: str
    summary: Summary
    truth: TruthStore
    one_pass: int  # rows of the source's topics appended as they were read
    planned: frozenset[str] = frozenset()  # the source's topics (or what one pass left of them) landed planned
    subscription: str = ""  # the landing stage's topic pattern (every format's prefix) and its checkpoint
    checkpoint: Path | None = None


def _land(cfg: PipelineConfig, spark, folder: Path, formats: list[str]) -> dict[str, Landed]:
    """Simulate one source per format (duplicates, reordering, poison, schema evolution), then land all of
    them in one run of the stage, so its micro-batches mix topics of every format."""
    prefixes = {fmt: f"cl{uuid.uuid4().hex[:6]}" for fmt in formats}
    landed = {}
    for fmt, prefix in prefixes.items():
        summary, truth = _simulate(cfg, folder, prefix, format=fmt, events=1200, snapshot_rows=40,
                                   duplicates=0.02, reorder=0.05, poison=0.02, evolve_at=600)
        landed[fmt] = Landed(cfg, prefix, summary, truth, 0)
    subscription, checkpoint = f"({'|'.join(prefixes.values())})", folder / "checkpoint"
    stage = _stage(cfg, spark, subscription, checkpoint)
    stage.run(until_caught_up=True)
    one_pass = [(topic, rows) for report in stage.reports for topic, rows in report.one_pass.items()]
    planned = {topic for report in stage.reports for topic in report.planned}
    return {fmt: replace(source, one_pass=sum(n for t, n in one_pass if t.startswith(f"{source.prefix}.")),
                         planned=frozenset(t for t in planned if t.startswith(f"{source.prefix}.")),
                         subscription=subscription, checkpoint=checkpoint) for fmt, source in landed.items()}


@pytest.fixture(scope="module")
def landed_iceberg(cfg: PipelineConfig, stack, spark, tmp_path_factory) -> dict[str, Landed]:
    return _land(cfg, spark, tmp_path_factory.mktemp("formats"), FORMATS)


@pytest.fixture(scope="module")
def landed_delta(cfg: PipelineConfig, stack, spark, tmp_path_factory) -> dict[str, Landed]:
    return _land(_with_lake(cfg, "delta"), spark, tmp_path_factory.mktemp("delta"), ["debezium"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_registry_framed_records_land_in_one_pass(fmt: str, landed_iceberg: dict[str, Landed], spark) -> None:
    """Every landed Avro record was decoded as it was read, with the versions of its topic's subject, and the
    poison beside them dead-lettered from what that pass counted: no topic of theirs was read again to be
    planned (the poison's dead letters: `test_changes_land_once_and_poison_goes_to_dead_letters`). DMS JSON,
    which has no subject, is planned."""
    source = landed_iceberg[fmt]
    landed = len(_landed(spark, source.cfg, source.prefix, fmt))
    assert source.one_pass == (0 if fmt == "dms-json" else landed) and landed > 0
    left = sum(source.summary.faults[f"poison:{kind}"] for kind in ("bad-magic", "unknown-schema-id", "not-avro"))
    assert left > 0 or fmt == "dms-json"  # poison one pass does not decode was there
    assert (len(source.planned) > 0) == (fmt == "dms-json"), source.planned


def test_the_change_records_positions_and_constant_texts_are_written_without_a_dictionary(
        landed_iceberg: dict[str, Landed], spark) -> None:
    """As `cdc.normalize` sorts its fields: positions and constant texts with no dictionary, constant texts and
    the transaction id with no min/max; the source's own columns as Parquet writes by default."""
    import pyarrow.parquet as pq

    for fmt, source in landed_iceberg.items():
        table = f"{source.cfg.catalog.name}.changelog.{source.prefix}_employee"
        path = spark.sql(f"SELECT file_path FROM {table}.files WHERE record_count > 10 LIMIT 1").first()[0]
        meta = pq.ParquetFile(path.removeprefix("file:")).metadata
        chunks = {chunk.path_in_schema: chunk for chunk in map(meta.row_group(0).column, range(meta.num_columns))}
        for name in ("_seq.source_major", "_transport.offset", "_source.table", "_transport.topic"):
            assert not chunks[name].has_dictionary_page, (fmt, name)
        assert chunks["employee_id"].has_dictionary_page and chunks["_op"].has_dictionary_page, fmt
        for name in ("_source.table", "_source.db", "_schema_id", "_source.tx_id"):
            assert not chunks[name].is_stats_set, (fmt, name)
        assert chunks["employee_id"].is_stats_set and chunks["_seq.transport_offset"].is_stats_set, fmt


@pytest.mark.parametrize(("fmt", "lake_format"), [*[(fmt, "iceberg") for fmt in FORMATS], ("debezium", "delta")])
def test_changes_land_once_and_poison_goes_to_dead_letters(fmt: str, lake_format: str, spark, request) -> None:
    source: Landed = request.getfixturevalue(f"landed_{lake_format}")[fmt]  # only the lake formats asked for
    cfg, prefix, summary, truth = source.cfg, source.prefix, source.summary, source.truth
    expected = [(c.table.split(".")[-1], c.key, c.op,
                 *((str(c.tx_id), c.tx_position) if fmt.startswith("dms") else (c.lsn,))) for c in truth.changes()]
    landed = [(t, k, op, *rest) for t, k, op, *rest in _landed(spark, cfg, prefix, fmt)]
    assert set(landed) == set(expected)  # every committed change, with its op and sequence
    assert len(landed) == len(expected) + summary.faults["duplicates"]  # duplicates land as they arrived
    dead = _dead_letters(spark, cfg, prefix).groupBy("error_class").count().withColumnRenamed("count", "n").collect()
    poison = sum(n for kind, n in summary.faults.items() if kind.startswith("poison:"))
    assert sum(r["n"] for r in dead) == poison > 0
    if fmt == "dms-json":  # no registry: garbage is unframed, or looks like a frame of an unknown schema
        assert {r["error_class"] for r in dead} <= {"WireFormatError", "UnknownSchemaId"}
    else:
        assert {r["error_class"] for r in dead} <= {"WireFormatError", "UnknownSchemaId", "MalformedAvro"}


def test_new_columns_appear_and_old_writers_decode_into_them(landed_iceberg: dict[str, Landed], spark) -> None:
    """On the module's landing: its Debezium source's tables gained a column half way (`evolve_at`)."""
    source = landed_iceberg["debezium"]
    table = f"{source.cfg.catalog.name}.changelog.{source.prefix}_employee"
    assert "email" in spark.table(table).columns
    versions = spark.sql(f"SELECT count(DISTINCT _schema_id) AS n, count(email) AS with_email FROM {table}").first()
    assert versions["n"] == 2 and versions["with_email"] > 0
    partitions = [r["partition"] for r in spark.sql(f"SELECT partition FROM {table}.partitions").collect()]
    assert partitions and all("_source_ts_day" in p.asDict() for p in partitions)


class _CrashAfterWrite(ChangelogStage):
    """Dies after a batch's table commits and before Spark records the batch as done, like a kill then."""

    def _process(self, batch, batch_id: int) -> None:
        super()._process(batch, batch_id)
        raise RuntimeError("simulated crash after the table commit")


@pytest.mark.parametrize("lake_format", ["iceberg", "delta"])
def test_a_replayed_batch_is_not_written_twice(lake_format: str, stack, spark, cfg: PipelineConfig,
                                               tmp_path: Path) -> None:
    cfg = _with_lake(cfg, lake_format)
    prefix = f"rp{uuid.uuid4().hex[:6]}"
    _simulate(cfg, tmp_path, prefix, format="debezium", tables="employees", events=300, snapshot_rows=30)
    checkpoint = tmp_path / "checkpoint"
    crashing = _stage(cfg, spark, prefix, checkpoint, _CrashAfterWrite, max_restarts=0)
    with pytest.raises(Exception, match="simulated crash"):
        crashing.run(until_caught_up=True)
    assert _table(spark, cfg, f"{prefix}_employee").count() == 300
    replay = _stage(cfg, spark, prefix, checkpoint)
    replay.run(until_caught_up=True)
    assert _table(spark, cfg, f"{prefix}_employee").count() == 300
    [report] = replay.reports
    assert any(table.endswith(f"{prefix}_employee") for table in report.skipped) and report.tables == {}


class _StageProcess:
    """`python -m pipeline changelog` in its own process group, with its log lines collected."""

    def __init__(self, prefix: str, checkpoint: Path, *args: str, settings: list[str] | None = None) -> None:
        settings = [*PROCESS_SETTINGS, f"changelog.checkpoint={checkpoint}", "changelog.trigger_interval=1 second",
                    "changelog.max_offsets_per_trigger=150", "spark.driver_memory=1g", *(settings or [])]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", *[a for s in settings for a in ("--set", s)], "changelog",
             "--topic-pattern", rf"{prefix}\..*", *args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()  # type: ignore[arg-type]

    def batches(self) -> int:
        return sum("changelog.batch" in line for line in list(self.lines))

    def wait_for_batches(self, count: int, timeout_s: float = 180) -> None:
        self.wait_for(lambda: self.batches() >= count, timeout_s)

    def wait_for(self, condition, timeout_s: float = 180) -> None:
        """Until `condition()` holds, while the stage runs; fails with its last lines otherwise."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert self.proc.poll() is None, "".join(self.lines[-30:])
            assert time.monotonic() < deadline, "".join(self.lines[-30:])
            time.sleep(0.2)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def test_sigkill_at_any_point_loses_and_duplicates_nothing(stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    prefix = f"kl{uuid.uuid4().hex[:6]}"
    summary, truth = _simulate(cfg, tmp_path, prefix, format="debezium", events=700, snapshot_rows=30, poison=0.01)
    checkpoint = tmp_path / "checkpoint"
    rng = random.Random(3)
    for _ in range(2):  # kill mid-stream, at a different phase of a batch each time
        stage = _StageProcess(prefix, checkpoint)
        stage.wait_for_batches(1)
        time.sleep(rng.uniform(0.0, 2.5))
        stage.kill()
    # The restart first replays the batch the last kill interrupted, with the offsets its offset log fixed; the
    # rest needs no small batches (the kills did), so it lands in one. It runs here, on the session's Spark: no
    # third JVM to start.
    _stage(cfg, spark, prefix, checkpoint, max_offsets_per_trigger=5000).run(until_caught_up=True)
    expected = [(c.table.split(".")[-1], c.key, c.op, c.lsn) for c in truth.changes()]
    landed = _landed(spark, cfg, prefix, "debezium")
    assert sorted(landed) == sorted(expected)  # nothing lost, nothing twice
    dead = _dead_letters(spark, cfg, prefix).count()
    assert dead == sum(n for kind, n in summary.faults.items() if kind.startswith("poison:"))


def test_a_topic_without_a_subject_is_a_clear_error(stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    from pipeline.config import kafka
    from registry.wire import confluent_frame

    topic = f"ns{uuid.uuid4().hex[:6]}.public.orphans"
    producer = Producer(kafka.client_conf(cfg.kafka))
    producer.produce(topic, confluent_frame(1, b"\x02"))
    assert producer.flush(30) == 0
    settings = cfg.changelog.model_copy(update={"topics": [topic], "checkpoint": tmp_path / "cp", "max_restarts": 0})
    with pytest.raises(Exception, match=rf"the subject {topic}-value has no schema at .*register it"):
        ChangelogStage(cfg.model_copy(update={"changelog": settings}), spark).run(until_caught_up=True)


@pytest.mark.parametrize(("setting", "named"), [("kafka.bootstrap_servers=127.0.0.1:{port}", "Kafka at 127.0.0.1:{port}"),
                                                ("registry.url=http://127.0.0.1:{port}", "127.0.0.1:{port}/apis/ccompat")])
def test_an_unreachable_service_is_named_before_spark_starts(setting: str, named: str, stack, tmp_path: Path) -> None:
    port = free_port()
    settings = [*TEST_SETTINGS, setting.format(port=port), f"changelog.checkpoint={tmp_path / 'cp'}"]
    done = subprocess.run([sys.executable, "-m", "pipeline", *[a for s in settings for a in ("--set", s)], "changelog",
                           "--topics", "anything", "--until-caught-up"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert named.format(port=port) in done.stderr and "unreachable" in done.stderr
    assert "spark.session" not in done.stderr


def test_a_missing_kinesis_stream_is_named_in_one_line_before_spark_starts(stack, tmp_path: Path) -> None:
    settings = [*TEST_SETTINGS, f"changelog.checkpoint={tmp_path / 'cp'}"]
    done = subprocess.run([sys.executable, "-m", "pipeline", *[a for s in settings for a in ("--set", s)], "changelog",
                           "--source", "kinesis", "--streams", "no-such-stream", "--until-caught-up"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Kinesis stream 'no-such-stream' does not exist at" in done.stderr and "Traceback" not in done.stderr
    assert "spark.session" not in done.stderr


@pytest.mark.parametrize(("backend", "wire", "compressions"), [("apicurio", "apicurio-legacy", [False]),
                                                                ("glue", "glue", [False, True])])
def test_other_wire_formats_land_once_and_poison_goes_to_dead_letters(backend: str, wire: str, compressions: list[bool],
                                                                       stack, spark, cfg: PipelineConfig,
                                                                       tmp_path: Path) -> None:
    """Glue frames may carry zlib-compressed bodies; a producer with and one without compression land in one run."""
    cfg = cfg.model_copy(update={"registry": cfg.registry.model_copy(update={"backend": backend, "wire_format": wire})})
    sources = {}
    for compressed in compressions:
        producer = cfg.model_copy(update={"registry": cfg.registry.model_copy(update={"glue_compression": compressed})})
        prefix = f"wf{uuid.uuid4().hex[:6]}"
        sources[prefix] = _simulate(producer, tmp_path, prefix, format="debezium", tables="employees", events=500,
                                    snapshot_rows=40, poison=0.04, evolve_at=250)
    _stage(cfg, spark, f"({'|'.join(sources)})", tmp_path / "checkpoint").run(until_caught_up=True)
    for prefix, (summary, truth) in sources.items():
        expected = [(c.table.split(".")[-1], c.key, c.op, c.lsn) for c in truth.changes()]
        assert sorted(_landed(spark, cfg, prefix, "debezium")) == sorted(expected)
        schema_ids = _table(spark, cfg, f"{prefix}_employee").select("_schema_id").distinct().count()
        assert schema_ids == 2  # both writer versions, named by the id the wire format carries
        dead = _dead_letters(spark, cfg, prefix)
        assert dead.count() == sum(n for kind, n in summary.faults.items() if kind.startswith("poison:")) > 0


class _Proxy:
    """A TCP proxy in front of a real service, to take it off the network and bring it back mid-run."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._connections: list[socket.socket] = []
        self.open()

    def open(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR: the same port again
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def close(self) -> None:
        """Refuse new connections and cut the open ones, as a registry that went away does. A shutdown
        wakes the threads blocked in accept() and recv() on the sockets; a close alone would not."""
        for sock in (self._listener, *self._connections):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already cut by the other side
            sock.close()
        self._connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._connections += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()


@dataclass(frozen=True)
class Outages:
    """One stage process through a registry outage and then a Kafka outage, then SIGTERM while a last source
    lands: its log lines, the index of the first one after SIGTERM and its exit code, the registry proxy's and the
    broker's addresses, what was sent before, between and after the outages, and the last source's rows landed
    when the stage had exited."""

    lines: list[str]
    sigterm_at: int
    exit_code: int
    registry: str
    kafka: str
    # by prefix: before the outages, during the registry's, during Kafka's, and the last source (SIGTERM came while
    # it landed; a restart on the session's Spark landed the rest)
    sources: dict[str, TruthStore]
    landed_at_exit: int


@pytest.fixture(scope="module")
def outages(stack, spark, cfg: PipelineConfig, tmp_path_factory) -> Outages:
    """Clients reconnect to a broker's advertised address, so no proxy can take Kafka away: the stage reads a
    broker of this fixture's own, stopped and restarted on the same port and data folder, and the stack's registry
    through a proxy that is closed and opened again. One stage process lives through both outages, then is sent
    SIGTERM in the middle of a last source (a JVM less than one each); each test below asserts its own."""
    from pipeline.stack import Stack

    tmp_path = tmp_path_factory.mktemp("outages")
    proxy = _Proxy(cfg.stack.registry_port)
    own = make_config(f"home={tmp_path / 'own'}", f"stack.kafka_port={free_port()}",
                      f"stack.kafka_controller_port={free_port()}")
    broker = Stack(own, only=["kafka"])
    [kafka] = broker.services
    stage = None
    broker.up()
    try:
        run = f"ot{uuid.uuid4().hex[:6]}"
        first, during_registry, during_kafka, last = f"{run}a", f"{run}b", f"{run}c", f"{run}d"
        KafkaTransport(own.kafka).prepare([f"{p}.public.employee" for p in (during_registry, during_kafka, last)])
        sources = {first: _simulate(own, tmp_path, first, format="debezium", tables="employees", events=200,
                                    snapshot_rows=30)[1]}
        stage = _StageProcess(f"{run}[abcd]", tmp_path / "checkpoint",
                              settings=[f"kafka.bootstrap_servers={kafka.address}",
                                        f"registry.url=http://127.0.0.1:{proxy.port}", "changelog.stall_probe_s=5",
                                        # shorter than a batch: under a backlog the next batch starts at once
                                        "changelog.trigger_interval=200 milliseconds"])
        stage.wait_for(lambda: any(f"{first}_employee" in line for line in stage.lines if "changelog.batch" in line))

        proxy.close()
        sources[during_registry] = _simulate(own, tmp_path, during_registry, format="debezium", tables="employees",
                                             events=150, snapshot_rows=30)[1]
        stage.wait_for(lambda: any("changelog.outage" in line and "service=registry" in line
                                   and f"127.0.0.1:{proxy.port}" in line for line in stage.lines))
        proxy.open()
        # Wait for the rows, not for a progress line: Spark 4.1's Kafka source can fail while reporting the metrics
        # of a batch that has committed (a known NullPointerException), and the restarted query has no batch to log.
        stage.wait_for(lambda: len(_landed(spark, cfg, during_registry, "debezium"))
                       >= sources[during_registry].count())

        kafka.process.stop()
        # Spark's Kafka source hangs for about three minutes before its query fails; the outage is named sooner.
        stage.wait_for(lambda: any("changelog.outage" in line and "service=kafka" in line
                                   and kafka.address in line for line in stage.lines), timeout_s=120)
        broker.up()  # the same port and data folder
        sources[during_kafka] = _simulate(own, tmp_path, during_kafka, format="debezium", tables="employees",
                                          events=150, snapshot_rows=30)[1]
        stage.wait_for(lambda: len(_landed(spark, cfg, during_kafka, "debezium")) >= sources[during_kafka].count())
        # ten batches of the last source (max_offsets_per_trigger 150): SIGTERM once the first is logged
        sources[last] = _simulate(own, tmp_path, last, format="debezium-unwrapped", tables="employees", events=1500,
                                  snapshot_rows=40)[1]
        stage.wait_for(lambda: any(f"{last}_employee" in line for line in stage.lines if "changelog.batch" in line))
        sigterm_at = len(stage.lines)
        stage.proc.send_signal(signal.SIGTERM)
        code = stage.proc.wait(timeout=120)
        landed_at_exit = len(_landed(spark, cfg, last, "debezium"))
        # the rest, and a batch SIGTERM refused, landed by the next start (no third JVM: the session's Spark)
        own_kafka = cfg.kafka.model_copy(update={"bootstrap_servers": kafka.address})
        _stage(cfg.model_copy(update={"kafka": own_kafka}), spark, f"{run}[abcd]", tmp_path / "checkpoint").run(
            until_caught_up=True)
        return Outages(list(stage.lines), sigterm_at, code, f"127.0.0.1:{proxy.port}", kafka.address, sources,
                       landed_at_exit)
    finally:
        if stage is not None and stage.proc.poll() is None:
            stage.kill()
        broker.down()
        proxy.close()


def _outage(outages: Outages, service: str, address: str) -> int:
    """The index of the first log line naming `service` at `address` as down."""
    named = [i for i, line in enumerate(outages.lines)
             if "changelog.outage" in line and f"service={service}" in line and address in line]
    assert named, "".join(outages.lines[-30:])
    return named[0]


def _nothing_lost_nothing_twice(outages: Outages, spark, cfg: PipelineConfig, prefixes: list[str]) -> None:
    for prefix in prefixes:
        expected = [(c.table.split(".")[-1], c.key, c.op, c.lsn) for c in outages.sources[prefix].changes()]
        assert sorted(_landed(spark, cfg, prefix, "debezium")) == sorted(expected), prefix


def test_a_registry_outage_mid_run_is_named_and_waited_out(outages: Outages, spark, cfg: PipelineConfig) -> None:
    assert outages.exit_code == 0, "".join(outages.lines[-30:])
    _outage(outages, "registry", outages.registry)
    _nothing_lost_nothing_twice(outages, spark, cfg, list(outages.sources)[:2])  # before it, and sent during it


def test_a_kafka_outage_mid_run_is_named_and_waited_out(outages: Outages, spark, cfg: PipelineConfig) -> None:
    assert outages.exit_code == 0, "".join(outages.lines[-30:])
    named = _outage(outages, "kafka", outages.kafka)
    assert any("changelog.recovered" in line for line in outages.lines[named:])  # from this outage
    _nothing_lost_nothing_twice(outages, spark, cfg, list(outages.sources)[1:3])  # before it, and sent after it


def test_sigterm_finishes_the_batch_and_exits_without_draining_the_backlog(outages: Outages, spark,
                                                                           cfg: PipelineConfig) -> None:
    """On the outage pair's stage: SIGTERM came once the last source's first batch was logged, with nine more
    batches of it to read, as Kubernetes and `docker stop` send it to the driver. The stage finished the batch
    it was landing and started none after it; the next start landed the rest, each change once."""
    assert outages.exit_code == 0, "".join(outages.lines[-30:])
    after_sigterm = outages.lines[outages.sigterm_at:]
    assert any("changelog.stopped" in line and "SIGTERM" in line for line in after_sigterm), "".join(after_sigterm)
    last = list(outages.sources)[3]
    assert 0 < outages.landed_at_exit < outages.sources[last].count() - 600, "".join(after_sigterm)
    _nothing_lost_nothing_twice(outages, spark, cfg, [last])


def test_a_checkpoint_of_another_subscription_is_a_clear_error(landed_iceberg: dict[str, Landed], spark) -> None:
    """On the module's landing: its stage's configuration resumes from its checkpoint, another one is refused."""
    source = landed_iceberg["debezium"]
    _stage(source.cfg, spark, source.subscription, source.checkpoint).run(until_caught_up=True)  # the same resumes
    other = _stage(source.cfg, spark, f"{source.subscription}x", source.checkpoint)
    with pytest.raises(StageError, match=r"belongs to a changelog stage with .*give this configuration its own "
                                         r"changelog.checkpoint"):
        other.run(until_caught_up=True)


def test_an_outage_longer_than_the_bound_stops_the_stage_naming_it(stack, spark, cfg: PipelineConfig,
                                                                    tmp_path: Path) -> None:
    proxy = _Proxy(cfg.stack.registry_port)
    cfg = cfg.model_copy(update={
        "registry": cfg.registry.model_copy(update={"url": f"http://127.0.0.1:{proxy.port}"}),
        "changelog": cfg.changelog.model_copy(update={"max_outage_s": 2.0})})
    stage = _stage(cfg, spark, "bound", tmp_path / "checkpoint")
    assert stage._wait_out_outage(threading.Event()) is False  # both answer: not an outage
    proxy.close()  # and never back: the stage gives up instead of waiting forever
    with pytest.raises(StageError, match=rf"registry at \S*127.0.0.1:{proxy.port}\S* has not answered .*max_outage_s"):
        stage._wait_out_outage(threading.Event())
