"""Keys without settings: Debezium topics land and mirror with no `mirror.keys`, each table keyed by its record
key's fields (the key schema in the registry), which the changelog table keeps from its creation."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest

from pipeline.config.settings import PipelineConfig
from pipeline.ops.verify import verify_lake
from pipeline.stages.changelog import ChangelogStage
from pipeline.stages.mirror import MirrorStage, TableReport
from registry.factory import serde_from_settings
from simulators.simulation import Simulation, SimulationOptions
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore
from tables.keys import KEYS_PROPERTY
from tables.lake import lake_table

pytestmark = pytest.mark.integration

KEYS = {"artists": ["artist_id"], "artworks": ["artwork_id"], "employee": ["employee_id"]}


@dataclass(frozen=True)
class Mirrored:
    cfg: PipelineConfig
    tables: dict[str, str]  # lake table -> source table (as the truth names it)
    truths: dict[str, TruthStore]  # lake table -> its source's ground truth
    reports: list[TableReport]


@pytest.fixture(scope="module")
def mirrored(cfg: PipelineConfig, stack, spark, tmp_path_factory) -> Mirrored:
    """The envelope (all three tables) and the unwrapped format (employee), landed in one run, then mirrored
    with no key setting."""
    folder = tmp_path_factory.mktemp("learned")
    assert not cfg.mirror.keys
    sources = {"debezium": ("all", f"lk{uuid.uuid4().hex[:6]}"),
               "debezium-unwrapped": ("employees", f"lu{uuid.uuid4().hex[:6]}")}
    tables, truths = {}, {}
    for fmt, (table_set, prefix) in sources.items():
        truth = TruthStore(folder / f"{prefix}.db")
        Simulation(SimulationOptions(format=fmt, tables=table_set, events=500, snapshot_rows=30, seed=11,
                                     topic_prefix=prefix, duplicates=0.02, reorder=0.05),
                   KafkaTransport(cfg.kafka), truth, serde_from_settings(cfg.registry, cfg.aws)).run(progress=False)
        for table in KEYS if table_set == "all" else ["employee"]:
            tables[f"{prefix}_{table}"], truths[f"{prefix}_{table}"] = table, truth
    pattern = "(" + "|".join(prefix for _, prefix in sources.values()) + r")\..*"
    changelog = cfg.changelog.model_copy(update={"topic_pattern": pattern, "checkpoint": str(folder / "cp")})
    cfg = cfg.model_copy(update={"changelog": changelog})
    ChangelogStage(cfg, spark).run(until_caught_up=True)
    reports = MirrorStage(cfg, spark).run_once(sorted(tables))
    return Mirrored(cfg, tables, truths, reports)


def test_each_changelog_table_keeps_its_record_keys_fields(mirrored: Mirrored, spark) -> None:
    for name, table in mirrored.tables.items():
        properties = lake_table(mirrored.cfg, spark, "changelog", name).properties()
        assert json.loads(properties[KEYS_PROPERTY]) == KEYS[table], name


def test_every_table_mirrors_with_no_key_setting_and_matches_the_truth(mirrored: Mirrored, spark) -> None:
    assert sorted(report.table for report in mirrored.reports) == sorted(mirrored.tables)
    assert all(report.merged > 0 for report in mirrored.reports)
    for name, truth in mirrored.truths.items():
        [verdict] = verify_lake(mirrored.cfg, spark, truth, [name])
        assert verdict.rows > 0 and verdict.mismatches == 0, verdict.lines()


def test_a_key_setting_still_overrides_the_kept_key(mirrored: Mirrored, spark) -> None:
    """`mirror.keys.<table>` wins: a column that is no key (every artist of one nationality folds into one row)."""
    name = next(name for name, table in mirrored.tables.items() if table == "artists")
    keys = {**mirrored.cfg.mirror.keys, name: "nationality"}
    mirror = mirrored.cfg.mirror.model_copy(update={"keys": keys, "namespace": "mirror_override"})
    cfg = mirrored.cfg.model_copy(update={"mirror": mirror})
    MirrorStage(cfg, spark).run_once([name])
    rows = lake_table(cfg, spark, "mirror_override", name).read()
    artists = lake_table(cfg, spark, "changelog", name).read().select("artist_id").distinct().count()
    assert rows.count() == rows.select("nationality").distinct().count() < artists
