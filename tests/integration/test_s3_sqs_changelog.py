"""Simulator -> DMS files on S3 -> SQS -> `changelog --source s3-sqs` -> mirror: the mirrors equal the truth."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from pipeline.stages.changelog import ChangelogStage
from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import MirrorStage
from pipeline.ops.verify import verify_lake
from simulators.s3_files import S3FileTransport, spark_ddl
from simulators.simulation import Simulation, SimulationOptions
from simulators.tables import TABLE_SETS
from simulators.truth import TruthStore
from tables.lake import lake_table

pytestmark = pytest.mark.integration

KEYS = {"artists": "artist_id", "artworks": "artwork_id", "employee": "employee_id"}


def _configure(cfg: PipelineConfig, prefix: str, file_format: str, folder: Path) -> PipelineConfig:
    tables = {f"{prefix}_{name}": key for name, key in KEYS.items()}
    csv_schemas = {f"{prefix}_{t.name}": spark_ddl(t) for t in TABLE_SETS["all"]}
    return cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"source": "s3-sqs", "checkpoint": str(folder / "checkpoint")}),
        "dms_files": cfg.dms_files.model_copy(update={
            "bucket": prefix, "queue": prefix, "file_format": file_format, "long_polling_wait_s": 1,
            "max_files_per_trigger": 12, "csv_schemas": csv_schemas,
            "options": {"queueFetchWaitTimeoutSeconds": "2"}}),
        "mirror": cfg.mirror.model_copy(update={"keys": tables, "tables": list(tables)}),
    })


@pytest.mark.parametrize("file_format", ["parquet", "csv"])
def test_dms_files_land_once_and_the_mirror_equals_the_truth(file_format: str, stack, spark, cfg: PipelineConfig,
                                                             tmp_path: Path) -> None:
    prefix = f"dms{file_format[:3]}{uuid.uuid4().hex[:6]}"
    cfg = _configure(cfg, prefix, file_format, tmp_path)
    truth = TruthStore(tmp_path / "truth.db")
    transport = S3FileTransport(cfg.aws, cfg.dms_files, f"dms-{file_format}", rows_per_file=150, poison=0.2, seed=3)
    options = SimulationOptions(format=f"dms-{file_format}", events=900, snapshot_rows=40, seed=11, evolve_at=500,
                                topic_prefix=prefix, duplicates=0.03, reorder=0.05)
    summary = Simulation(options, transport, truth, None).run(progress=False)
    assert transport.files_written > 12  # more than one batch's worth: maxFilesPerTrigger is exercised

    stage = ChangelogStage(cfg, spark)
    stage.run(until_caught_up=True)
    tables = [f"{prefix}_{name}" for name in KEYS]
    landed = {t: lake_table(cfg, spark, cfg.changelog.namespace, t).read() for t in tables}
    assert sum(frame.count() for frame in landed.values()) == sum(summary.events.values()) + summary.faults["duplicates"]
    files = landed[f"{prefix}_artists"].select("_transport.file").distinct().collect()
    assert all(row.file.startswith(f"s3://{prefix}/{prefix}/public/artists/") for row in files)

    MirrorStage(cfg, spark).run_once()
    verdicts = verify_lake(cfg, spark, truth, tables)
    assert all(v.mismatches == 0 and v.rows > 0 for v in verdicts), "\n".join(l for v in verdicts for l in v.lines())
