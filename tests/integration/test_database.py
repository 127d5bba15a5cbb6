"""A whole database end to end: what `simulate --tables synthetic:200` sends (Debezium over Kafka: every column
kind the pipeline maps, composite keys, a few tables without a key, a few hot tables and a long quiet tail) landed
by one `changelog` batch, mirrored by one `mirror` run with no per-table setting, and held to the truth by
`verify`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from pipeline.config.settings import PipelineConfig
from pipeline.ops.verify import TableVerdict, verify_lake
from pipeline.stages.changelog import ChangelogStage
from pipeline.stages.mirror import MirrorStage, MissingKeys, TableReport
from registry.factory import serde_from_settings
from simulators.simulation import Simulation, SimulationOptions
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore
from tables.lake import table_names

pytestmark = pytest.mark.integration

TABLES = 200


@dataclass(frozen=True)
class Database:
    cfg: PipelineConfig
    truth: TruthStore
    landed: list[str]  # the changelog tables
    keyless: list[str]  # the tables the mirror named as having no key
    reports: list[TableReport]  # the mirror run's
    verdicts: list[TableVerdict]


@pytest.fixture(scope="module")
def database(cfg: PipelineConfig, stack, spark, tmp_path_factory) -> Database:
    folder = tmp_path_factory.mktemp("database")
    tag = uuid.uuid4().hex[:6]
    prefix = f"db{tag}"
    cfg = cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"topic_pattern": rf"{prefix}\..*", "checkpoint": str(folder / "cp"),
                                                      "namespace": f"changelog_{tag}"}),
        "mirror": cfg.mirror.model_copy(update={"namespace": f"mirror_{tag}", "pending_namespace": f"pending_{tag}"})})
    assert not cfg.mirror.keys
    truth = TruthStore(folder / "truth.db")
    options = SimulationOptions(format="debezium", tables=f"synthetic:{TABLES}", events=3000, snapshot_rows=2,
                                topic_prefix=prefix)
    Simulation(options, KafkaTransport(cfg.kafka, partitions=1), truth,
               serde_from_settings(cfg.registry, cfg.aws)).run(progress=False)
    ChangelogStage(cfg, spark).run(until_caught_up=True)
    landed = table_names(cfg, spark, cfg.changelog.namespace)
    with pytest.raises(MissingKeys) as raised:  # the tables without a key, named once the others are mirrored
        MirrorStage(cfg, spark).run_once(landed)
    reports = raised.value.reports
    verdicts = verify_lake(cfg, spark, truth, [report.table for report in reports])
    return Database(cfg, truth, landed, raised.value.tables, reports, verdicts)


def test_every_table_lands_in_one_batch(database: Database) -> None:
    assert len(database.landed) == TABLES
    assert len(database.truth.tables()) == TABLES


def test_the_tables_without_a_key_are_named_in_one_message_and_the_others_mirror(database: Database) -> None:
    truth_keyless = [name.rsplit(".", 1)[-1] for name in database.truth.tables()
                     if not database.truth.key_columns(name)]
    assert truth_keyless
    assert sorted(database.keyless) == sorted(table for table in database.landed
                                              if any(table.endswith(f"_{name}") for name in truth_keyless))
    assert sorted(report.table for report in database.reports) == sorted(set(database.landed) - set(database.keyless))
    assert all(report.changes > 0 and report.watermark is not None for report in database.reports)


def test_the_tables_are_built_together(database: Database) -> None:
    """Every table's first build is one of the run's one job (`merge_together`): the batch is small."""
    assert {report.together for report in database.reports} == {len(database.reports)}


def test_every_mirror_equals_the_truth(database: Database) -> None:
    assert len(database.verdicts) == len(database.reports)
    assert sum(v.rows for v in database.verdicts) > TABLES
    assert [line for v in database.verdicts if v.mismatches for line in v.lines()] == []
