"""`pipeline package`: what `spark-submit` needs to run the stages on a cluster, in one folder.

A cluster's executors are other processes on other hosts: nothing on the driver's disk or in its virtualenv
reaches them except what the submission ships. So the folder holds the project's packages as one zip for
`--py-files`, every connector jar and the pipeline's own Spark functions for `--jars`, the entry script, the
pinned Python requirements the nodes must have (installed by a bootstrap action or baked into an image; or, with
`--environment`, packed here into a virtualenv that `--archives` unpacks beside each executor, as EMR Serverless
documents), and the `spark-submit` lines of the stages.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
import venv
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Sequence

import structlog
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pipeline.config.redaction import is_secret_key
from pipeline.runtime import jvm

log = structlog.get_logger(__name__)

PROJECT = "cdc-lakehouse-pipeline"
PACKAGES = ("pipeline", "cdc", "tables", "registry", "simulators")
ROOT = Path(__file__).resolve().parents[2]
# Not for the nodes: Spark's own Python comes with the cluster's Spark, matching its JVM; moto is the embedded stack's.
NOT_ON_NODES = {"pyspark", "moto"}
ENVIRONMENT = "environment"  # the packed virtualenv's folder beside each executor (`--archives <file>#environment`)
# A cluster's driver plans, tracks offsets and commits; it runs no task. Its code is broad and never hot, so C2's
# compiles cost it more CPU than they return: 6.8-7.7 CPU-s per million events in bench/cluster.py's measured batches
# against 1.4-1.7 with C1 alone, with no more CPU spent on the work itself (docs/benchmarks.md, the cluster). C1
# alone reserves 48 MiB of code cache, which a maintain run filled (the JIT then stops): 128 MiB.
CLUSTER_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=128m"
STAGES = ("changelog", "mirror", "maintain")
ENTRY = "from pipeline.cli.main import main\n\nraise SystemExit(main())\n"
# Under spark-submit the master and the jars are the submission's: the pipeline must not set its own.
SUBMITTED = ("spark.master=", "spark.connector_jars=submit")


class PackageError(RuntimeError):
    """The package could not be written; the message says what it lacked."""


@dataclass(frozen=True)
class Package:
    folder: Path
    code: Path  # --py-files
    entry: Path  # the application file
    jars: list[Path]  # --jars
    requirements: Path
    environment: Path | None = None  # --archives: the requirements in a packed virtualenv

    def submit(self, master: str, stage: str, settings: Sequence[str] = (), config: Path | None = None,
               python: str | None = None, executors: Sequence[str] = ()) -> list[str]:
        """The `spark-submit` command line of one stage; `python`: the executors' interpreter, when the
        nodes' default `python3` lacks the requirements; `executors`: spark-submit's options for the executors
        (their heap, their JVM), when a cluster has them; none under a `local` master, which starts none.

        With a packed environment the executors' Python code (the sources' reads, the start's check: all of it
        DataFrame code) runs its Python (`spark.sql.execution.pyspark.python`), unpacked beside each executor. The
        driver and the Python workers it starts itself (the planners of Python data sources) run this Python: in
        client mode they run here, where the driver's copy of the archive is not in the working folder."""
        spark_submit = jvm.spark_home() / "bin" / "spark-submit"
        if self.environment:
            conf = ["--archives", f"{self.environment}#{ENVIRONMENT}",
                    "--conf", f"spark.sql.execution.pyspark.python=./{ENVIRONMENT}/bin/python",
                    "--conf", f"spark.pyspark.python={python or sys.executable}"]
        else:
            conf = ["--conf", f"spark.pyspark.python={python}"] if python else []
        options = [*(["--config", str(config)] if config else []),
                   *[arg for setting in (*SUBMITTED, *settings) for arg in ("--set", setting)]]
        cluster = [] if master.startswith("local") else ["--driver-java-options", CLUSTER_DRIVER_JAVA_OPTIONS,
                                                         *executors]
        return [str(spark_submit), "--master", master, *cluster, "--jars",
                ",".join(str(jar) for jar in self.jars), "--py-files", str(self.code), *conf, str(self.entry), *options,
                stage]

    def script(self, master: str, settings: Sequence[str] = (), config: Path | None = None,
               python: str | None = None, executors: Sequence[str] = ()) -> Path:
        """`submit.sh <stage> [options]`: the stages' line with the stage and its options last."""
        line = self.submit(master, "", settings, config, python, executors)[:-1]
        script = self.folder / "submit.sh"
        script.write_text("#!/bin/sh\n# spark-submit of a stage, as `python -m pipeline package` printed it: "
                          f"submit.sh <stage> [options]\nexec {shlex.join(line)} \"$@\"\n")
        script.chmod(0o755)
        return script


def build(jars_dir: Path, folder: Path, environment: bool = False) -> Package:
    """Write the package into `folder` (replacing an earlier one) and describe it; with `environment`, the
    requirements packed into a virtualenv too."""
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
    packed = pack_environment(folder / f"{ENVIRONMENT}.tar.gz") if environment else None
    return Package(folder, code, entry, jars, requirements, packed)


def pinned_requirements() -> list[str]:
    """Every distribution the project's runtime dependencies need, at the version installed here, without what
    the nodes must not take: what was tested is what a node installs (`pip install --no-deps -r`)."""
    needed = node_distributions()
    return [f"{name}{'[' + ','.join(sorted(needed[name])) + ']' if needed[name] else ''}=={metadata.version(name)}"
            for name in sorted(needed)]


def node_distributions() -> dict[str, set[str]]:
    """The distributions the project's runtime dependencies need, by name, with the extras asked of each."""
    extras: dict[str, set[str]] = {}  # each distribution needed, with the extras asked of it
    wanted = [req for req in map(Requirement, metadata.requires(PROJECT) or []) if req.marker is None]  # not `dev`
    while wanted:
        req = wanted.pop()
        name = canonicalize_name(req.name)
        if name in NOT_ON_NODES or (name in extras and req.extras <= extras[name]):
            continue
        extras[name] = extras.get(name, set()) | req.extras
        asked = [{"extra": extra} for extra in extras[name] or {""}]
        wanted += [sub for sub in map(Requirement, metadata.requires(name) or [])
                   if sub.marker is None or any(sub.marker.evaluate(environment) for environment in asked)]
    return extras


def pack_environment(output: Path) -> Path:
    """A virtualenv of this Python holding the files of `node_distributions()` as installed here, packed by
    venv-pack into `output`: the tested files themselves, compiled already, with no package index to reach.

    Its `bin/python` links to this Python's own path, so the nodes need that Python at that path: build it on the
    nodes' OS image (AWS's guide for EMR Serverless builds on Amazon Linux with the release's Python)."""
    import venv_pack

    with tempfile.TemporaryDirectory(prefix="pipeline-environment-") as scratch:
        prefix = Path(scratch) / ENVIRONMENT
        venv.EnvBuilder(symlinks=True).create(prefix)
        site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        names = sorted(node_distributions())
        log.info("package.environment_copy", distributions=len(names))
        for name in names:
            copy_distribution(metadata.distribution(name), site)
        log.info("package.environment_pack", output=str(output))
        venv_pack.pack(prefix=str(prefix), output=str(output), force=True)
    return output


def copy_distribution(distribution: metadata.Distribution, site: Path) -> None:
    """Every file `distribution`'s record lists under its site-packages into `site` (its scripts, outside it, are
    not needed by the executors)."""
    name = distribution.metadata["Name"]
    if distribution.files is None:
        raise PackageError(f"{name} was installed without a record of its files, so it cannot be packed; reinstall "
                           f"it with pip (`pip install --force-reinstall {name}=={distribution.version}`)")
    site = site.resolve()
    for file in distribution.files:
        target = (site / file).resolve()
        if not target.is_relative_to(site):
            continue
        source = Path(distribution.locate_file(file))
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def passed_on(overrides: Sequence[str]) -> list[str]:
    """The `--set` values a stage's submission carries: all but credentials, which the nodes take from their
    own environment or role, and the two that spark-submit decides."""
    decided = {setting.split("=")[0] for setting in SUBMITTED}
    return [item for item in overrides
            if not is_secret_key(item.partition("=")[0]) and item.partition("=")[0].strip() not in decided]
