"""A whole database end to end: what `simulate --tables synthetic:200` sends (Debezium over Kafka: every column
kind the pipeline maps, composite keys, a few tables without a key, a few hot tables and a long quiet tail) landed
by a `changelog` process killed (SIGKILL) in the middle of a batch of the whole database, then restarted; mirrored by
one `mirror` run with no per-table setting, and held to the truth by `verify`."""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
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
from tables.append import iceberg_table
from tables.catalog import load_pyiceberg_catalog
from tables.lake import table_names
from tables.names import quote
from tests.integration.test_changelog import _StageProcess

pytestmark = pytest.mark.integration

TABLES = 200


@dataclass(frozen=True)
class Database:
    cfg: PipelineConfig
    truth: TruthStore
    landed: list[str]  # the changelog tables
    killed_after: int  # the batches the killed process had logged
    relanded: int  # the rows the restart landed
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
    killed_after = _land_killed_once(cfg, prefix)
    restart = ChangelogStage(cfg, spark)  # on the session's Spark: no JVM to start
    restart.run(until_caught_up=True)
    relanded = sum(n for report in restart.reports for n in report.tables.values())
    landed = table_names(cfg, spark, cfg.changelog.namespace)
    with pytest.raises(MissingKeys) as raised:  # the tables without a key, named once the others are mirrored
        MirrorStage(cfg, spark).run_once(landed)
    reports = raised.value.reports
    verdicts = verify_lake(cfg, spark, truth, [report.table for report in reports])
    return Database(cfg, truth, landed, killed_after, relanded, raised.value.tables, reports, verdicts)


def _land_killed_once(cfg: PipelineConfig, prefix: str) -> int:
    """The changelog stage in a process of its own, killed at a random moment of its first batch once it has
    made the batch's tables: writing or committing them (each table is committed on its own). The batches it had
    logged (none, mostly)."""
    catalog = load_pyiceberg_catalog(cfg.catalog, cfg.aws)  # polled without a Spark job: the stage has the cores
    stage = _StageProcess(prefix, cfg.changelog.checkpoint, settings=[f"changelog.namespace={cfg.changelog.namespace}",
                                                                      "changelog.max_offsets_per_trigger=100000"])
    stage.wait_for(lambda: _tables_made(catalog, cfg.changelog.namespace) == TABLES, timeout_s=300)
    time.sleep(random.Random(7).uniform(0.0, 3.0))
    stage.kill()
    return stage.batches()


def _tables_made(catalog, namespace: str) -> int:
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        return len(catalog.list_tables(namespace))
    except NoSuchNamespaceError:
        return 0


def test_every_change_lands_once_though_a_batch_of_every_table_was_killed(database: Database, spark) -> None:
    """0 lost, 0 doubled: each changelog table holds as many rows as its source table had changes (the tables'
    snapshot summaries, no scan)."""
    assert database.killed_after == 0 and database.relanded > 0  # killed inside the first batch
    assert len(database.landed) == len(database.truth.tables()) == TABLES
    changes = Counter(change.table.rsplit(".", 1)[-1] for change in database.truth.changes())
    cfg = database.cfg
    held = {name: int(iceberg_table(spark, quote(cfg.catalog.name, cfg.changelog.namespace, name))
                      .currentSnapshot().summary().get("total-records")) for name in database.landed}
    assert held == {name: changes[name.split("_", 1)[1]] for name in database.landed}


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
