"""Simulator -> Kafka -> `pipeline changelog` -> Iceberg: every change lands once, poison lands in dead letters."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from pipeline.changelog import ChangelogStage
from pipeline.config import PipelineConfig
from registry.factory import serde_from_settings
from simulators.simulation import Simulation, SimulationOptions, Summary
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore
from tests.conftest import REPO, TEST_SETTINGS

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


@pytest.mark.parametrize(("fmt", "lake_format"), [("debezium", "iceberg"), ("debezium-unwrapped", "iceberg"),
                                                   ("dms", "iceberg"), ("debezium", "delta")])
def test_changes_land_once_and_poison_goes_to_dead_letters(fmt: str, lake_format: str, stack, spark,
                                                            cfg: PipelineConfig, tmp_path: Path) -> None:
    cfg = _with_lake(cfg, lake_format)
    prefix = f"cl{uuid.uuid4().hex[:6]}"
    summary, truth = _simulate(cfg, tmp_path, prefix, format=fmt, events=1200, snapshot_rows=40,
                               duplicates=0.02, reorder=0.05, poison=0.02, evolve_at=600)
    stage = _stage(cfg, spark, prefix, tmp_path / "checkpoint")
    stage.run(until_caught_up=True)

    expected = [(c.table.split(".")[-1], c.key, c.op, *((str(c.tx_id), c.tx_position) if fmt == "dms" else (c.lsn,)))
                for c in truth.changes()]
    landed = [(t, k, op, *rest) for t, k, op, *rest in _landed(spark, cfg, prefix, fmt)]
    assert set(landed) == set(expected)  # every committed change, with its op and sequence
    assert len(landed) == len(expected) + summary.faults["duplicates"]  # duplicates land as they arrived
    dead = _dead_letters(spark, cfg, prefix).groupBy("error_class").count().withColumnRenamed("count", "n").collect()
    poison = sum(n for kind, n in summary.faults.items() if kind.startswith("poison:"))
    assert sum(r["n"] for r in dead) == poison > 0
    assert {r["error_class"] for r in dead} <= {"WireFormatError", "UnknownSchemaId", "MalformedAvro"}


def test_new_columns_appear_and_old_writers_decode_into_them(stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    prefix = f"ev{uuid.uuid4().hex[:6]}"
    _simulate(cfg, tmp_path, prefix, format="debezium", tables="employees", events=400, snapshot_rows=50, evolve_at=100)
    _stage(cfg, spark, prefix, tmp_path / "checkpoint").run(until_caught_up=True)
    table = f"{cfg.catalog.name}.changelog.{prefix}_employee"
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

    def __init__(self, prefix: str, checkpoint: Path, *args: str) -> None:
        settings = [*TEST_SETTINGS, f"changelog.checkpoint={checkpoint}", "changelog.trigger_interval=1 second",
                    "changelog.max_offsets_per_trigger=150", "spark.driver_memory=1g"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", *[a for s in settings for a in ("--set", s)], "changelog",
             "--topic-pattern", rf"{prefix}\..*", *args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()  # type: ignore[arg-type]

    def batches(self) -> int:
        return sum("changelog.batch" in line for line in list(self.lines))

    def wait_for_batches(self, count: int, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while self.batches() < count:
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
    final = _StageProcess(prefix, checkpoint, "--until-caught-up")
    assert final.proc.wait(timeout=600) == 0, "".join(final.lines[-30:])
    expected = [(c.table.split(".")[-1], c.key, c.op, c.lsn) for c in truth.changes()]
    landed = _landed(spark, cfg, prefix, "debezium")
    assert sorted(landed) == sorted(expected)  # nothing lost, nothing twice
    dead = _dead_letters(spark, cfg, prefix).count()
    assert dead == sum(n for kind, n in summary.faults.items() if kind.startswith("poison:"))


def test_sigterm_finishes_the_batch_and_exits_cleanly(stack, cfg: PipelineConfig, tmp_path: Path) -> None:
    prefix = f"tm{uuid.uuid4().hex[:6]}"
    _simulate(cfg, tmp_path, prefix, format="debezium-unwrapped", tables="employees", events=450, snapshot_rows=40)
    stage = _StageProcess(prefix, tmp_path / "checkpoint")
    stage.wait_for_batches(1)
    stage.proc.send_signal(signal.SIGTERM)  # to the driver, as Kubernetes and `docker stop` send it
    assert stage.proc.wait(timeout=120) == 0, "".join(stage.lines[-30:])
    assert any("changelog.stopped" in line for line in stage.lines)


def test_a_topic_without_a_subject_is_a_clear_error(stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    from pipeline import kafka
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
    from tests.conftest import free_port

    port = free_port()
    settings = [*TEST_SETTINGS, setting.format(port=port), f"changelog.checkpoint={tmp_path / 'cp'}"]
    done = subprocess.run([sys.executable, "-m", "pipeline", *[a for s in settings for a in ("--set", s)], "changelog",
                           "--topics", "anything", "--until-caught-up"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert named.format(port=port) in done.stderr and "unreachable" in done.stderr
    assert "spark.session" not in done.stderr
