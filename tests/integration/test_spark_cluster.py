"""The stages on a real Spark cluster: a standalone master and two workers, each executor a JVM of its own with
its own Python workers, the code and jars reaching them only through the package `python -m pipeline package`
writes, and every file the stages write on S3 (moto, through S3A and Iceberg's S3 client).

One source (Debezium Avro on Kafka, with duplicates, late and poison messages) is landed once by `changelog`,
then `mirror` and `maintain`, each submitted with `spark-submit --master spark://…`; the tests read what that
left. The bad-input tests each submit a run that must stop at its start.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator, NamedTuple

import boto3
import pytest
import requests

from pipeline.config.settings import PipelineConfig
from pipeline.ops.verify import verify_lake
from pipeline.stack import Stack
from pipeline.stack.spark_cluster import SparkMaster, SparkWorker
from simulators.truth import TruthStore
from tests.conftest import GLUE_BUCKET, GLUE_CATALOG, REPO, TEST_HOME, TEST_SETTINGS, make_config, running, with_catalog
from tests.integration.test_mirror import KEYS, Source

pytestmark = pytest.mark.integration

CLUSTER = "stack.spark_cluster=true"
SUBMIT_TIMEOUT_S = 600
C1_ONLY = "-XX:TieredStopAtLevel=1"


@pytest.fixture(scope="module")
def cluster(stack) -> Iterator[Stack]:
    """The master and two workers, for this module only (kept when they were up already)."""
    with running(make_config(CLUSTER)) as services:
        yield services


class Submitted(NamedTuple):
    code: int
    output: str

    @property
    def app_id(self) -> str:
        return re.search(r"app ID (app-\d+-\d+)", self.output).group(1)  # type: ignore[union-attr]


class Lake(NamedTuple):
    prefix: str
    settings: list[str]  # the stages' settings, as `package` carries them into each submission
    lines: dict[str, list[str]]  # the spark-submit line of each stage, as `package` printed it
    package: Path
    truth: TruthStore
    runs: dict[str, Submitted]


def _pipeline(settings: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *[a for s in settings for a in ("--set", s)], *args],
                          cwd=REPO, capture_output=True, text=True, timeout=60)


class Submission:
    """A spark-submit line as printed, running with the stack's moto keys in its environment (the driver's S3A and
    Glue clients read them there; the workers pass theirs to the executors), its output kept in a file. Its JVMs,
    driver and executors, live a minute: C1 alone compiles sooner than tiered compilation pays back
    (`SHORT_LIVED_JVM` in the conftest)."""

    def __init__(self, line: list[str], *args: str) -> None:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}
        short_lived = ["--driver-java-options", C1_ONLY, "--conf", f"spark.executor.extraJavaOptions={C1_ONLY}"]
        self.log = TEST_HOME / "logs" / f"submit-{uuid.uuid4().hex[:8]}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen([line[0], *short_lived, *line[1:], *args], cwd=TEST_HOME, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def finish(self) -> Submitted:
        self.proc.wait(timeout=SUBMIT_TIMEOUT_S)
        return Submitted(self.proc.returncode, self.log.read_text(errors="replace"))

    def kill(self) -> None:
        """SIGKILL to the driver: spark-submit's JVM and its Python, one process group."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def submit(line: list[str], *args: str) -> Submitted:
    return Submission(line, *args).finish()


def _executor_reading_kafka(workers: list[SparkWorker], run: Submission) -> tuple[SparkWorker, int]:
    """A worker and the PID of its executor of `run` once that executor reads a batch's records (its log says
    so); an executor of an earlier application may still be stopping."""
    deadline = time.monotonic() + SUBMIT_TIMEOUT_S
    while time.monotonic() < deadline:
        output = run.log.read_text(errors="replace")
        assert run.proc.poll() is None, output[-3000:]
        app = Submitted(0, output).app_id if "app ID app-" in output else None
        for worker in workers:
            for pid in worker.executor_pids():
                try:
                    folder = Path(os.readlink(f"/proc/{pid}/cwd"))  # work/<application>/<executor>
                    log = (folder / "stderr").read_text(errors="replace")
                except OSError:  # exited meanwhile
                    continue
                if folder.parent.name == app and "KafkaDataConsumer" in log:
                    return worker, pid
        time.sleep(0.1)
    raise AssertionError("no executor read Kafka while the changelog ran")


@pytest.fixture(scope="module")
def lake(cluster: Stack, cfg: PipelineConfig, tmp_path_factory) -> Lake:
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    if GLUE_BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=GLUE_BUCKET)
    prefix = f"cluster{uuid.uuid4().hex[:6]}"
    folder = tmp_path_factory.mktemp("cluster")
    truth = Source(cfg, prefix, folder).simulate(events=900)
    root = f"s3://{GLUE_BUCKET}/{prefix}"
    settings = [*TEST_SETTINGS, CLUSTER, "catalog.type=glue", f"catalog.warehouse={root}/warehouse",
                f"changelog.checkpoint={root.replace('s3://', 's3a://')}/checkpoint",
                f"changelog.topic_pattern={prefix}\\..*", f"changelog.namespace={prefix}_changelog",
                f"mirror.namespace={prefix}_mirror", f"mirror.pending_namespace={prefix}_pending",
                f"mirror.tables={','.join(f'{prefix}_{name}' for name in KEYS)}"]
    printed = _pipeline(settings, "package", "--out", str(folder / "package"), "--python", sys.executable)
    assert printed.returncode == 0, printed.stderr
    lines = {stage: shlex.split(line) for stage, line in re.findall(r"^# (\w+)\n(.+)$", printed.stdout, re.MULTILINE)}
    workers = [s for s in cluster.services if isinstance(s, SparkWorker)]
    runs = {}
    # the driver dies in the middle of a batch; the next submission resumes from the checkpoint on S3
    first = Submission(lines["changelog"], "--until-caught-up")
    _executor_reading_kafka(workers, first)
    first.kill()
    # in that one an executor dies in the middle of the batch: Spark runs its tasks again on an executor left
    second = Submission(lines["changelog"], "--until-caught-up")
    worker, pid = _executor_reading_kafka(workers, second)
    os.kill(pid, signal.SIGKILL)
    runs["changelog"] = second.finish()
    runs["changelog-killed-executor"] = Submitted(0, f"{worker.name} {pid}")
    # a worker dies during the mirror, with its executors: the run fails or retries; it is restarted and run again
    mirror = Submission(lines["mirror"])
    doomed = next(w for w in workers if w.name == "spark-worker-2")
    deadline = time.monotonic() + SUBMIT_TIMEOUT_S
    while not doomed.executor_pids() and mirror.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(doomed.process.pid(), signal.SIGKILL)  # the executors with it: one process group
    runs["mirror-worker-killed"] = mirror.finish()
    cluster.up()
    for stage in ("mirror", "maintain"):
        runs[stage] = submit(lines[stage])
    for stage in ("changelog", "mirror", "maintain"):
        assert runs[stage].code == 0, f"{stage} on the cluster failed:\n{runs[stage].output[-4000:]}"
    return Lake(prefix, settings, lines, folder / "package", truth, runs)


def test_the_stack_runs_a_master_with_two_workers_and_shows_its_web_ui(cluster: Stack) -> None:
    master = next(s for s in cluster.services if isinstance(s, SparkMaster))
    assert master.alive_workers() == 2
    shown = _pipeline([*TEST_SETTINGS, CLUSTER], "stack", "status").stdout
    assert re.search(rf"spark-master\s+{re.escape(master.address)}\s+\d+\s+healthy", shown)
    assert f"web UI {master.web_ui}" in shown
    assert re.search(r"spark-worker-2\s+\S+\s+\d+\s+healthy", shown)
    assert requests.get(f"{master.web_ui}/json/", timeout=5).json()["status"] == "ALIVE"


def test_the_package_holds_the_code_every_jar_and_the_stages_submit_lines(lake: Lake) -> None:
    import zipfile

    with zipfile.ZipFile(lake.package / "pipeline.zip") as code:
        names = set(code.namelist())
    assert {"pipeline/cli/main.py", "cdc/native.py", "tables/lake.py", "registry/serde.py"} <= names
    jars = {Path(jar).name for jar in lake.lines["mirror"][lake.lines["mirror"].index("--jars") + 1].split(",")}
    assert {"iceberg-spark-runtime-4.1_2.13-1.12.0.jar", "spark-sql-kafka-0-10_2.13-4.1.1.jar",
            "hadoop-aws-3.4.2.jar"} <= jars and any(jar.startswith("cdc-spark") for jar in jars)
    assert all((lake.package / "jars" / jar).is_file() for jar in jars)
    assert "pyiceberg[glue,hive,pyarrow,sql-sqlite]==0.12.0" in (lake.package / "requirements.txt").read_text()
    master = f"spark://127.0.0.1:{make_config(CLUSTER).stack.spark_master_port}"
    assert all(line[1:3] == ["--master", master] for line in lake.lines.values())
    assert not any("secret_access_key" in arg for line in lake.lines.values() for arg in line)


def test_each_stage_ran_its_tasks_in_executors_on_both_workers(lake: Lake, cluster: Stack) -> None:
    workers = [s for s in cluster.services if isinstance(s, SparkWorker)]
    for stage in ("changelog", "mirror"):
        app = lake.runs[stage].app_id
        for worker in workers:
            logs = list((worker.folder / "work" / app).glob("*/stderr"))
            assert logs, f"{stage}: no executor of {app} on {worker.name}"
            assert any("Finished task" in log.read_text(errors="replace") for log in logs), (stage, worker.name)


def test_the_mirrors_equal_the_source_and_nothing_was_written_to_a_local_disk(lake: Lake, cfg: PipelineConfig,
                                                                            spark) -> None:
    read = with_catalog(make_config(*lake.settings[len(TEST_SETTINGS):]), GLUE_CATALOG)
    tables = [f"{lake.prefix}_{name}" for name in KEYS]
    verdicts = verify_lake(read, spark, lake.truth, tables)
    assert [v.mismatches for v in verdicts] == [0] * len(tables), [line for v in verdicts for line in v.lines()]
    assert all(v.rows > 0 for v in verdicts)
    keys = {obj["Key"] for page in boto3.client("s3", **cfg.aws.boto3_kwargs()).get_paginator("list_objects_v2")
            .paginate(Bucket=GLUE_BUCKET, Prefix=f"{lake.prefix}/") for obj in page.get("Contents", [])}
    assert any(k.startswith(f"{lake.prefix}/warehouse/{lake.prefix}_mirror") and k.endswith(".parquet") for k in keys)
    assert any(k.startswith(f"{lake.prefix}/checkpoint/") for k in keys)
    local = [path for folder in ("warehouse", "checkpoints", "delta") for path in (TEST_HOME / folder).rglob("*")
             if lake.prefix in str(path)]
    assert local == [], "a stage wrote tables or checkpoints under the local home"
    assert "compacted" in lake.runs["maintain"].output


def test_a_driver_and_an_executor_killed_mid_batch_lose_and_double_nothing(lake: Lake, spark) -> None:
    """Both kills happened while an executor read the batch's records; the mirrors' test holds them to the truth."""
    worker, pid = lake.runs["changelog-killed-executor"].output.split()
    assert re.search(rf"Lost executor \d+ on [\d.]+: .*(exited|killed|137)", lake.runs["changelog"].output, re.I), worker
    read = with_catalog(make_config(*lake.settings[len(TEST_SETTINGS):]), GLUE_CATALOG)
    for name in KEYS:
        table = f"{GLUE_CATALOG.name}.{read.changelog.namespace}.{lake.prefix}_{name}"
        rows, positions = spark.sql(f"SELECT count(*), count(DISTINCT _transport.topic, _transport.partition, "
                                    f"_transport.offset) FROM {table}").first()
        assert rows == positions > 0, table


def test_a_worker_killed_during_the_mirror_leaves_a_mirror_the_rerun_completes(lake: Lake, cluster: Stack) -> None:
    killed = lake.runs["mirror-worker-killed"]
    assert killed.code == 0 or "error" in killed.output.lower()  # it retried elsewhere, or failed saying why
    assert lake.runs["mirror"].code == 0  # the mirrors' test compares the rerun's tables with the truth
    master = next(s for s in cluster.services if isinstance(s, SparkMaster))
    assert master.alive_workers() == 2  # the restarted worker registered again


def test_a_master_that_does_not_answer_stops_the_run_at_its_start(lake: Lake) -> None:
    line = list(lake.lines["mirror"])
    line[line.index("--master") + 1] = "spark://127.0.0.1:9"  # discard: nothing listens
    run = submit(line)
    assert run.code == 1 and "error: the Spark master spark://127.0.0.1:9 does not answer" in run.output


def test_a_jar_missing_from_jars_is_named(lake: Lake) -> None:
    line = list(lake.lines["mirror"])
    at = line.index("--jars") + 1
    line[at] = ",".join(jar for jar in line[at].split(",") if "iceberg-spark-runtime" not in jar)
    run = submit(line)
    assert run.code == 1, run.output[-3000:]
    assert "error: the application's class path lacks iceberg-spark-runtime-4.1_2.13: add its jar to --jars" in run.output


def test_a_python_dependency_missing_on_the_executors_is_named(lake: Lake) -> None:
    """The executors run the system's python3, without the requirements; the driver keeps this one."""
    line = [arg.replace(f"spark.pyspark.python={sys.executable}", "spark.pyspark.python=/usr/bin/python3")
            for arg in lake.lines["mirror"]]
    line[1:1] = ["--conf", f"spark.pyspark.driver.python={sys.executable}"]
    run = submit(line)
    assert run.code == 1, run.output[-3000:]
    assert re.search(r"error: the executors' Python cannot import \w+: ship the project with --py-files", run.output)
