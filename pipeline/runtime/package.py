"""`pipeline package`: what `spark-submit` needs to run the stages on a cluster, in one folder.

A cluster's executors are other processes on other hosts: nothing on the driver's disk or in its virtualenv
reaches them except what the submission ships. So the folder holds the project's packages as one zip for
`--py-files`, every connector jar and the pipeline's own Spark functions for `--jars`, the entry script, the
pinned Python requirements the nodes must have (installed by a bootstrap action, baked into an image, or packed
into a virtualenv for `--archives`, docs/operations.md), and the `spark-submit` lines of the stages.
"""

from __future__ import annotations

import shlex
import shutil
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Sequence

from packaging.requirements import Requirement

from pipeline.config.redaction import is_secret_key
from pipeline.runtime import jvm

PROJECT = "cdc-lakehouse-pipeline"
PACKAGES = ("pipeline", "cdc", "tables", "registry", "simulators")
ROOT = Path(__file__).resolve().parents[2]
CLUSTER_PROVIDED = {"pyspark"}  # Spark's own Python comes with the cluster's Spark, matching its JVM
STAGES = ("changelog", "mirror", "maintain")
ENTRY = "from pipeline.cli.main import main\n\nraise SystemExit(main())\n"
# Under spark-submit the master and the jars are the submission's: the pipeline must not set its own.
SUBMITTED = ("spark.master=", "spark.connector_jars=submit")


@dataclass(frozen=True)
class Package:
    folder: Path
    code: Path  # --py-files
    entry: Path  # the application file
    jars: list[Path]  # --jars
    requirements: Path

    def submit(self, master: str, stage: str, settings: Sequence[str] = (), config: Path | None = None,
               python: str | None = None) -> list[str]:
        """The `spark-submit` command line of one stage; `python`: the executors' interpreter, when the
        nodes' default `python3` lacks the requirements."""
        spark_submit = jvm.spark_home() / "bin" / "spark-submit"
        conf = ["--conf", f"spark.pyspark.python={python}"] if python else []
        options = [*(["--config", str(config)] if config else []),
                   *[arg for setting in (*SUBMITTED, *settings) for arg in ("--set", setting)]]
        return [str(spark_submit), "--master", master, "--jars", ",".join(str(jar) for jar in self.jars),
                "--py-files", str(self.code), *conf, str(self.entry), *options, stage]


    def script(self, master: str, settings: Sequence[str] = (), config: Path | None = None,
               python: str | None = None) -> Path:
        """`submit.sh <stage> [options]`: the stages' line with the stage and its options last."""
        line = self.submit(master, "", settings, config, python)[:-1]
        script = self.folder / "submit.sh"
        script.write_text("#!/bin/sh\n# spark-submit of a stage, as `python -m pipeline package` printed it: "
                          f"submit.sh <stage> [options]\nexec {shlex.join(line)} \"$@\"\n")
        script.chmod(0o755)
        return script


def build(jars_dir: Path, folder: Path) -> Package:
    """Write the package into `folder` (replacing an earlier one) and describe it."""
    resolved = jvm.spark_jars(jars_dir)  # first: says what to run when `pipeline setup` has not
    folder.mkdir(parents=True, exist_ok=True)
    code = folder / "pipeline.zip"
    partial = code.with_suffix(".zip.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in PACKAGES:
            for source in sorted((ROOT / package).rglob("*.py")):
                archive.write(source, source.relative_to(ROOT))
    partial.replace(code)
    entry = folder / "main.py"
    entry.write_text(ENTRY)
    jar_folder = folder / "jars"
    shutil.rmtree(jar_folder, ignore_errors=True)
    jar_folder.mkdir()
    jars = []
    for jar in resolved:
        shutil.copy2(jar, jar_folder / jar.name)
        jars.append(jar_folder / jar.name)
    requirements = folder / "requirements.txt"
    requirements.write_text("".join(f"{line}\n" for line in pinned_requirements()))
    return Package(folder, code, entry, jars, requirements)


def pinned_requirements() -> list[str]:
    """The project's runtime dependencies at the versions installed here, without what the cluster brings."""
    wanted = [Requirement(text) for text in metadata.requires(PROJECT) or []]
    return [f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}=={metadata.version(req.name)}"
            for req in wanted if req.marker is None and req.name.lower() not in CLUSTER_PROVIDED]


def passed_on(overrides: Sequence[str]) -> list[str]:
    """The `--set` values a stage's submission carries: all but credentials, which the nodes take from their
    own environment or role, and the two that spark-submit decides."""
    decided = {setting.split("=")[0] for setting in SUBMITTED}
    return [item for item in overrides
            if not is_secret_key(item.partition("=")[0]) and item.partition("=")[0].strip() not in decided]
