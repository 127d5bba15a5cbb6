"""A whole database: `synthetic:200` (every semantic type, composite keys, keyless tables, a few hot tables and a
quiet tail) in Debezium's envelope, landed in one changelog run and mirrored with no key setting; every keyed
table matches the truth, and the keyless ones are named in one message while the others mirror."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import pytest

from pipeline.config.settings import PipelineConfig
from pipeline.ops.verify import verify_lake
from pipeline.stages.changelog import ChangelogStage
from pipeline.stages.mirror import MirrorStage, MissingKeys, TableReport
from registry.factory import serde_from_settings
from simulators.simulation import Simulation, SimulationOptions
from simulators.tables import Table, table_set
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore

pytestmark = pytest.mark.integration

TABLES, EVENTS, SEED = 200, 2_000, 41


@dataclass(frozen=True)
class Mirrored:
    cfg: PipelineConfig
    truth: TruthStore
    lake_names: dict[str, Table]  # lake table -> its source table
    reports: list[TableReport]
    missing: MissingKeys
    seconds: dict[str, float]  # stage -> wall time


@pytest.fixture(scope="module")
def mirrored(cfg: PipelineConfig, stack, spark, tmp_path_factory) -> Mirrored:
    folder = tmp_path_factory.mktemp("synthetic")
    assert not cfg.mirror.keys
    prefix = f"sy{uuid.uuid4().hex[:6]}"
    options = SimulationOptions(format="debezium", tables=f"synthetic:{TABLES}", events=EVENTS, snapshot_rows=2,
                                seed=SEED, topic_prefix=prefix, evolve_at=EVENTS // 2)
    truth = TruthStore(folder / "truth.db")
    seconds = {}
    started = time.perf_counter()
    Simulation(options, KafkaTransport(cfg.kafka), truth, serde_from_settings(cfg.registry, cfg.aws)).run(progress=False)
    seconds["simulate"] = time.perf_counter() - started
    changelog = cfg.changelog.model_copy(update={"topic_pattern": rf"{prefix}\..*", "checkpoint": str(folder / "cp")})
    cfg = cfg.model_copy(update={"changelog": changelog, "mirror": cfg.mirror.model_copy(
        update={"namespace": f"mirror_{prefix}"})})
    started = time.perf_counter()
    ChangelogStage(cfg, spark).run(until_caught_up=True)
    seconds["changelog"] = time.perf_counter() - started
    lake_names = {f"{prefix}_{table.name}": table for table in table_set(options.tables, SEED)}
    started = time.perf_counter()
    with pytest.raises(MissingKeys) as missing:
        MirrorStage(cfg, spark).run_once(sorted(lake_names))
    seconds["mirror"] = time.perf_counter() - started
    print(f"\nsynthetic:{TABLES}, {EVENTS} events: " + ", ".join(f"{stage} {s:.1f} s ({s / TABLES * 1000:.0f} ms/table)"
                                                            for stage, s in seconds.items()))
    return Mirrored(cfg, truth, lake_names, missing.value.reports, missing.value, seconds)


def test_keyless_tables_are_named_in_one_message_and_the_others_mirror(mirrored: Mirrored) -> None:
    keyless = sorted(name for name, table in mirrored.lake_names.items() if not table.keys)
    assert keyless and mirrored.missing.tables == keyless
    assert f"{len(keyless)} table(s) have no key" in str(mirrored.missing)
    assert sorted(report.table for report in mirrored.reports) == sorted(set(mirrored.lake_names) - set(keyless))


def test_every_keyed_table_matches_the_truth(mirrored: Mirrored, spark) -> None:
    keyed = sorted(name for name, table in mirrored.lake_names.items() if table.keys)
    verdicts = verify_lake(mirrored.cfg, spark, mirrored.truth, keyed)
    assert sum(verdict.rows for verdict in verdicts) > TABLES
    assert [line for verdict in verdicts if verdict.mismatches for line in verdict.lines()] == []
