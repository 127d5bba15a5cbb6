"""The same code under spark-submit: the master and the connector jars come from spark-submit, not from us."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from pipeline.runtime import jvm
from pipeline.config.settings import PipelineConfig
from tests.conftest import REPO, TEST_SETTINGS

pytestmark = pytest.mark.integration


def test_demo_runs_under_spark_submit(stack, cfg: PipelineConfig, tmp_path: Path) -> None:
    deps = _zip_packages(tmp_path)
    jars = ",".join(str(jar) for jar in jvm.spark_jars(cfg.jars_dir))
    settings = [*TEST_SETTINGS, f"home={tmp_path / 'home'}", "spark.master=", "spark.connector_jars=submit"]
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    done = subprocess.run(
        [str(submit), "--master", "local[1]", "--jars", jars, "--py-files", deps, str(REPO / "pipeline" / "__main__.py"),
         *[a for s in settings for a in ("--set", s)], "demo", "--rows", "40"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
    )
    output = done.stdout + done.stderr  # spark-submit merges the Python driver's streams into its stdout
    assert done.returncode == 0, output[-3000:]
    assert "demo: OK" in output and "master=local[1]" in output


def _zip_packages(folder: Path) -> str:
    """The project's packages as one zip, the way a job ships them with --py-files."""
    staging = folder / "deps"
    for package in ("pipeline", "cdc", "tables", "registry", "simulators"):
        shutil.copytree(REPO / package, staging / package, ignore=shutil.ignore_patterns("__pycache__"))
    return shutil.make_archive(str(folder / "deps"), "zip", staging)
