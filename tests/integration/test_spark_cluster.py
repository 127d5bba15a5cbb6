"""The stages on a real Spark cluster: a standalone master and two workers, each executor a JVM of its own with
its own Python workers, the code and jars reaching them only through the package `python -m pipeline package`
writes, and every file the stages write on S3 (moto, through S3A and Iceberg's S3 client).

One source (Debezium Avro on Kafka, with duplicates, late and poison messages) is landed once by `changelog`,
then `mirror` and `maintain`, each submitted with `spark-submit --master spark://…`; the tests read what that
left. Two DMS sources, JSON on a 4-shard Kinesis stream and Parquet files on S3 announced on SQS, are landed by
`changelog` submissions from the same package (the Kinesis one with its Python dependencies in the packed
virtualenv `package --environment` writes; the s3-sqs one killed in the middle of a batch and submitted again), and
the same `mirror` submissions merge their tables with the Kafka source's. The bad-input tests read runs that must
stop at their start (one of them lacks two things).
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
from pipeline.runtime import class_data, jvm
from pipeline.runtime.package import CLUSTER_DRIVER_JAVA_OPTIONS
from pipeline.stack import Stack
from pipeline.sources.kinesis.shard_reader import shards_read
from pipeline.stack.spark_cluster import EXECUTOR_JAVA_OPTIONS, SparkMaster, SparkWorker
from simulators.kinesis import KinesisTransport
from simulators.s3_files import S3FileTransport
from simulators.simulation import Simulation, SimulationOptions, Summary
from simulators.truth import TruthStore
from tests.conftest import GLUE_BUCKET, GLUE_CATALOG, REPO, TEST_HOME, TEST_SETTINGS, make_config, running, with_catalog
from tests.integration.test_mirror import KEYS, Source

pytestmark = pytest.mark.integration

CLUSTER = "stack.spark_cluster=true"
SUBMIT_TIMEOUT_S = 600
# Every JVM of a submission lives a minute: the executors too get the line's C1 alone for its driver. The cluster's
# JVMs run on this host, with the local driver's class path: they map the class-data archive `make setup` wrote too.
# That class path starts with jvm/localfs's jar (`pipeline/runtime/spark.py`), and a JVM whose class path does not
# start as the archive's maps none of it.
SHORT_LIVED = f"{CLUSTER_DRIVER_JAVA_OPTIONS} -XX:SharedArchiveFile={class_data.archive(make_config())}"
LOCAL_CLASS_PATH = ":".join(str(jar) for jar in jvm.local_fs_jars(make_config().jars_dir))


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


DMS_KEYS = {"artists": "artist_id", "artworks": "artwork_id", "employee": "employee_id"}  # the DMS tables'


class DmsSources(NamedTuple):
    """A DMS source on Kinesis (JSON, 4 shards) and one as Parquet files on S3 announced on SQS, each landed by
    one `changelog` submission from the Kafka source's package into its namespaces, its checkpoint on S3; the
    lake's `mirror` runs merge them with the Kafka source's tables."""

    stream: str  # the Kinesis stream, and its tables' prefix
    bucket: str  # the S3 bucket and SQS queue of the DMS files, and their tables' prefix
    checkpoints: dict[str, str]  # by source prefix, on S3
    truths: dict[str, TruthStore]
    summaries: dict[str, Summary]
    runs: dict[str, Submitted]  # the changelog submission of each, by source prefix

    def tables(self, prefix: str) -> list[str]:
        return [f"{prefix}_{name}" for name in DMS_KEYS]

    def mirror_settings(self) -> list[str]:
        """Their tables' keys (DMS records name none)."""
        return [f"mirror.keys.{prefix}_{name}={key}" for prefix in (self.stream, self.bucket)
                for name, key in DMS_KEYS.items()]


def _with_settings(line: list[str], settings: list[str]) -> list[str]:
    """A stage's printed line with more `--set`s before its command (a later `--set` wins)."""
    return [*line[:-1], *[arg for setting in settings for arg in ("--set", setting)], line[-1]]


def _simulated(prefix: str, transport: KinesisTransport | S3FileTransport, folder: Path) -> tuple[TruthStore, Summary]:
    truth = TruthStore(folder / f"{prefix}.db")
    fmt = "dms-json" if isinstance(transport, KinesisTransport) else "dms-parquet"
    options = SimulationOptions(format=fmt, events=300, snapshot_rows=20, seed=13, topic_prefix=prefix,
                                duplicates=0.03, reorder=0.03)
    return truth, Simulation(options, transport, truth, None).run(progress=False)


def _simulated_dms(cfg: PipelineConfig, root: str, folder: Path) -> DmsSources:
    tag = uuid.uuid4().hex[:6]
    stream, bucket = f"ck{tag}", f"cs{tag}"
    files = cfg.dms_files.model_copy(update={"bucket": bucket, "queue": bucket})
    sources = {stream: KinesisTransport(cfg.aws, shards=4), bucket: S3FileTransport(cfg.aws, files, "dms-parquet",
                                                                                    rows_per_file=40)}
    simulated = {prefix: _simulated(prefix, transport, folder) for prefix, transport in sources.items()}
    return DmsSources(stream, bucket, {prefix: f"{root}/checkpoint-{prefix}" for prefix in sources},
                      {p: truth for p, (truth, _) in simulated.items()},
                      {p: summary for p, (_, summary) in simulated.items()}, {})


def _land_dms(dms: DmsSources, changelog: list[str], packed: list[str], s3) -> None:
    """The Kinesis source by the packed environment's line; the s3-sqs one's driver killed while its second batch
    runs (planned, its file log published, not committed), then the same line submitted again."""
    kinesis = ["changelog.source=kinesis", f"kinesis.streams={dms.stream}", "kinesis.fetch_interval_ms=0",
               "kinesis.max_fetch_records_per_shard=50"]  # two batches: each spreads its shards anew
    files = ["changelog.source=s3-sqs", f"dms_files.bucket={dms.bucket}", f"dms_files.queue={dms.bucket}",
             "dms_files.long_polling_wait_s=1", "dms_files.max_files_per_trigger=16",
             "dms_files.options.queueFetchWaitTimeoutSeconds=2"]  # two batches: the file log published twice
    dms.runs[dms.stream] = submit(_with_settings(packed, [f"changelog.checkpoint={dms.checkpoints[dms.stream]}",
                                                          *kinesis]), "--until-caught-up")
    line = _with_settings(changelog, [f"changelog.checkpoint={dms.checkpoints[dms.bucket]}", *files])
    killed = Submission(line, "--until-caught-up")
    _batch_in_flight(s3, dms.checkpoints[dms.bucket], 1, killed)
    killed.kill()
    dms.runs[f"{dms.bucket}-killed"] = Submitted(killed.proc.returncode, killed.log.read_text(errors="replace"))
    dms.runs[dms.bucket] = submit(line, "--until-caught-up")
    for prefix in (dms.stream, dms.bucket):
        run = dms.runs[prefix]
        assert run.code == 0, f"changelog of {prefix} on the cluster failed:\n{run.output[-4000:]}"


def _batch_in_flight(s3, checkpoint: str, batch: int, run: Submission) -> None:
    """Returns once the query's checkpoint on S3 has planned `batch` (its offsets written) and not committed it."""
    bucket, prefix = checkpoint.removeprefix("s3a://").split("/", 1)

    def exists(key: str) -> bool:
        return s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{key}")["KeyCount"] > 0

    deadline = time.monotonic() + SUBMIT_TIMEOUT_S
    while time.monotonic() < deadline:
        assert run.proc.poll() is None, run.log.read_text(errors="replace")[-3000:]
        if exists(f"offsets/{batch}"):
            assert not exists(f"commits/{batch}"), f"batch {batch} committed before the driver could be killed"
            return
        time.sleep(0.05)
    raise AssertionError(f"batch {batch} was never planned")


class Lake(NamedTuple):
    prefix: str
    settings: list[str]  # the stages' settings, as `package` carries them into each submission
    lines: dict[str, list[str]]  # the spark-submit line of each stage, as `package` printed it
    package: Path
    packed: dict[str, list[str]]  # the lines `package --environment` printed: the executors' Python in an archive
    truth: TruthStore
    runs: dict[str, Submitted]
    dms: DmsSources


def _command(settings: list[str], *args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", *[a for s in settings for a in ("--set", s)], *args]


def _pipeline(settings: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(settings, *args), cwd=REPO, capture_output=True, text=True, timeout=60)


class Packaging:
    """`pipeline package` writing into `out`, in the background; `lines()` waits and gives each stage's line."""

    def __init__(self, settings: list[str], out: Path, *args: str) -> None:
        self.proc = subprocess.Popen(_command(settings, "package", "--out", str(out), *args), cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def lines(self) -> dict[str, list[str]]:
        printed, errors = self.proc.communicate(timeout=SUBMIT_TIMEOUT_S)
        assert self.proc.returncode == 0, errors
        return {stage: shlex.split(line) for stage, line in re.findall(r"^# (\w+)\n(.+)$", printed, re.MULTILINE)}


class Submission:
    """A spark-submit line as printed, running with the stack's moto keys in its environment (the driver's S3A and
    Glue clients read them there; the workers pass theirs to the executors), its output kept in a file. Its JVMs,
    driver and executors, live a minute: C1 alone compiles sooner than tiered compilation pays back
    (`SHORT_LIVED_JVM` in the conftest)."""

    def __init__(self, line: list[str], *args: str) -> None:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}
        executors = f"spark.executor.extraJavaOptions={SHORT_LIVED} {EXECUTOR_JAVA_OPTIONS}"  # the line's, + C1
        line = [executors if arg.startswith("spark.executor.extraJavaOptions=") else arg for arg in (*line, *args)]
        line[line.index("--driver-java-options") + 1] = SHORT_LIVED  # the line's C1 alone, with the archive
        self.log = TEST_HOME / "logs" / f"submit-{uuid.uuid4().hex[:8]}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as out:
            class_path = (["--driver-class-path", LOCAL_CLASS_PATH, "--conf",
                           f"spark.executor.extraClassPath={LOCAL_CLASS_PATH}"] if LOCAL_CLASS_PATH else [])
            self.proc = subprocess.Popen([line[0], "--conf", executors, *class_path, *line[1:]],
                                         cwd=TEST_HOME, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                                         start_new_session=True)

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
    so); an executor of an earlier application may still be stopping. Each poll reads only what the logs gained
    since the last: this loop shares the machine's two cores with the run it watches."""
    marker = b"KafkaDataConsumer"
    offsets: dict[Path, int] = {}  # how far each executor's log was read
    tails: dict[Path, bytes] = {}  # and its last bytes, for a marker split between two reads
    deadline = time.monotonic() + SUBMIT_TIMEOUT_S
    while time.monotonic() < deadline:
        output = run.log.read_text(errors="replace")
        assert run.proc.poll() is None, output[-3000:]
        app = Submitted(0, output).app_id if "app ID app-" in output else None
        for worker in workers if app else []:
            for pid in worker.executor_pids():
                try:
                    log = Path(os.readlink(f"/proc/{pid}/cwd")) / "stderr"  # work/<application>/<executor>
                    if log.parent.parent.name != app:
                        continue
                    with log.open("rb") as stderr:
                        stderr.seek(offsets.get(log, 0))
                        gained = stderr.read()
                except OSError:  # exited meanwhile
                    continue
                offsets[log] = offsets.get(log, 0) + len(gained)
                if marker in tails.get(log, b"") + gained:
                    return worker, pid
                tails[log] = gained[-len(marker):]
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
    dms = _simulated_dms(cfg, f"s3a://{GLUE_BUCKET}/{prefix}", folder)
    tables = [f"{prefix}_{name}" for name in KEYS]
    settings = [*TEST_SETTINGS, CLUSTER, "catalog.type=glue", f"catalog.warehouse={root}/warehouse",
                f"changelog.checkpoint={root.replace('s3://', 's3a://')}/checkpoint",
                f"changelog.topic_pattern={prefix}\\..*", f"changelog.namespace={prefix}_changelog",
                f"mirror.namespace={prefix}_mirror", f"mirror.pending_namespace={prefix}_pending",
                f"mirror.tables={','.join([*tables, *dms.tables(dms.stream), *dms.tables(dms.bucket)])}",
                *dms.mirror_settings()]
    packing = Packaging(settings, folder / "package-environment", "--environment")  # while the Kafka source lands
    lines = Packaging(settings, folder / "package", "--python", sys.executable).lines()
    workers = [s for s in cluster.services if isinstance(s, SparkWorker)]
    runs = {}
    # an executor dies in the middle of the batch: Spark runs its tasks again on an executor left (the driver dies
    # in the middle of the s3-sqs landing's batch, below)
    landing = Submission(lines["changelog"], "--until-caught-up")
    worker, pid = _executor_reading_kafka(workers, landing)
    os.kill(pid, signal.SIGKILL)
    runs["changelog"] = landing.finish()
    runs["changelog-killed-executor"] = Submitted(0, f"{worker.name} {pid}")
    packed = packing.lines()
    _land_dms(dms, lines["changelog"], packed["changelog"], s3)
    # a worker dies during the mirror, with its executors: the run fails or retries; it is restarted and run again
    mirror = Submission(lines["mirror"])
    doomed = next(w for w in workers if w.name == "spark-worker-2")
    deadline = time.monotonic() + SUBMIT_TIMEOUT_S
    while not doomed.executor_pids() and mirror.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(doomed.process.pid(), signal.SIGKILL)  # the executors with it: one process group
    runs["mirror-worker-killed"] = mirror.finish()
    cluster.up()
    # a run that retried elsewhere left the mirrors whole (the mirrors' test compares them with the truth)
    killed = runs["mirror-worker-killed"]
    runs["mirror"] = killed if killed.code == 0 else submit(lines["mirror"])
    # one table, landed in two batches: its changelog's files compacted by the executors, as every table's are
    runs["maintain"] = submit(lines["maintain"], "--tables", dms.tables(dms.stream)[0])
    for stage in ("changelog", "mirror", "maintain"):
        assert runs[stage].code == 0, f"{stage} on the cluster failed:\n{runs[stage].output[-4000:]}"
    return Lake(prefix, settings, lines, folder / "package", packed, truth, runs, dms)


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
    stack, lines = make_config(CLUSTER).stack, list(lake.lines.values())
    assert all(line[1:3] == ["--master", f"spark://127.0.0.1:{stack.spark_master_port}"] for line in lines)
    assert all(line[3:5] == ["--driver-java-options", CLUSTER_DRIVER_JAVA_OPTIONS] for line in lines)
    # the stack's workers run one executor an application, which takes all the worker offers, in a throughput GC
    executors = ["--executor-memory", stack.spark_worker_memory, "--conf",
                 f"spark.executor.extraJavaOptions={EXECUTOR_JAVA_OPTIONS}"]
    assert all(line[5:9] == executors for line in lines)
    assert not any("secret_access_key" in arg for line in lake.lines.values() for arg in line)


def test_the_stages_ran_their_tasks_in_executors_on_the_workers(lake: Lake, cluster: Stack) -> None:
    """The changelog's tasks on both workers; the mirror's on the worker left standing when the other was killed."""
    workers = {s.name: s for s in cluster.services if isinstance(s, SparkWorker)}
    memory = make_config(CLUSTER).stack.spark_worker_memory  # each executor's heap, as `package` sized it
    heap = f'"-Xmx{int(memory.removesuffix("g")) * 1024}M"'  # as spark-submit writes a heap of `<n>g`
    for stage, names in (("changelog", list(workers)), ("mirror", ["spark-worker-1"])):
        app = lake.runs[stage].app_id
        for name in names:
            logs = list((workers[name].folder / "work" / app).glob("*/stderr"))
            assert logs, f"{stage}: no executor of {app} on {name}"
            assert any("Finished task" in log.read_text(errors="replace") for log in logs), (stage, name)
            commands = [log.read_text(errors="replace").partition("=" * 40)[0] for log in logs]  # each JVM's line
            gc = f'"{EXECUTOR_JAVA_OPTIONS}"'
            assert all(heap in command and gc in command for command in commands), (stage, name)


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
    maintained = re.findall(r"^(\w+): compacted (\d+) -> (\d+) files", lake.runs["maintain"].output, re.MULTILINE)
    assert {table for table, _, _ in maintained} == {lake.dms.tables(lake.dms.stream)[0]}, maintained
    assert int(maintained[0][1]) > int(maintained[0][2]) == 1, maintained  # the changelog's files, rewritten


def test_an_executor_killed_mid_batch_loses_and_doubles_nothing(lake: Lake, spark) -> None:
    """It was killed while it read the batch's records; the mirrors' test holds them to the truth."""
    worker, pid = lake.runs["changelog-killed-executor"].output.split()
    assert re.search(r"Lost executor \d+ on [\d.]+: .*(exited|killed|137)", lake.runs["changelog"].output, re.I), worker
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


def test_dms_sources_on_kinesis_and_s3_sqs_land_each_record_once_and_mirror_to_the_truth(lake: Lake, spark) -> None:
    dms = lake.dms
    read = with_catalog(make_config(*lake.settings[len(TEST_SETTINGS):]), GLUE_CATALOG)
    positions = {dms.stream: "_transport.partition, _transport.sequence",
                 dms.bucket: "_transport.file, _transport.offset"}
    for prefix, position in positions.items():
        summary, landed = dms.summaries[prefix], 0
        for table in dms.tables(prefix):
            rows, distinct = spark.sql(f"SELECT count(*), count(DISTINCT {position}) FROM "
                                       f"{GLUE_CATALOG.name}.{read.changelog.namespace}.{table}").first()
            assert rows == distinct > 0, table
            landed += rows
        assert landed == sum(summary.events.values()) + summary.faults.get("duplicates", 0), prefix  # none lost
        verdicts = verify_lake(read, spark, dms.truths[prefix], dms.tables(prefix))
        assert [v.mismatches for v in verdicts] == [0, 0, 0], [line for v in verdicts for line in v.lines()]


def test_the_kinesis_shards_were_read_on_both_workers(lake: Lake, cluster: Stack) -> None:
    """Each shard read logs itself in the executor that read it."""
    app = lake.dms.runs[lake.dms.stream].app_id
    workers = [s for s in cluster.services if isinstance(s, SparkWorker)]
    read_by = {worker.name: set().union(*map(shards_read, worker.executor_logs(app).values()))
               for worker in workers}
    assert all(read_by.values()), read_by
    assert len(set().union(*read_by.values())) == 4, read_by


def test_the_packed_environment_gave_the_kinesis_executors_their_python(lake: Lake, cluster: Stack) -> None:
    """Its line names no Python of this machine for the executors: they ran `./environment/bin/python`, unpacked
    beside each from `--archives`, and read the shards with the dependencies it holds."""
    line = lake.packed["changelog"]
    archive = Path(line[line.index("--archives") + 1].removesuffix("#environment"))
    assert archive.name == "environment.tar.gz" and archive.is_file()
    assert "spark.sql.execution.pyspark.python=./environment/bin/python" in line
    assert f"spark.pyspark.python={sys.executable}" in line  # the driver and its planners run here, beside spark-submit
    assert "moto==" not in (archive.parent / "requirements.txt").read_text()  # the embedded stack's, not a node's
    app = lake.dms.runs[lake.dms.stream].app_id
    for worker in (s for s in cluster.services if isinstance(s, SparkWorker)):
        unpacked = list((worker.folder / "work" / app).glob("*/environment/lib/python3.*/site-packages/rocksdict"))
        assert unpacked, f"no executor of {app} on {worker.name} unpacked the environment"


def test_an_s3_sqs_driver_killed_mid_batch_resumes_from_its_state_on_s3(lake: Lake) -> None:
    """Killed while batch 1 ran, planned from the file log it had published; the next submission ran that batch
    again from the checkpoint and the file log on S3. The DMS test holds the rows to the truth, each once."""
    dms = lake.dms
    killed, resumed = dms.runs[f"{dms.bucket}-killed"], dms.runs[dms.bucket]
    assert killed.code == -signal.SIGKILL, killed.output[-3000:]  # batch 0 committed, batch 1 not (`_batch_in_flight`)
    assert re.search(r"changelog\.batch .*batch=1\b", resumed.output), resumed.output[-3000:]
    assert not re.search(r"changelog\.batch .*batch=0\b", resumed.output), resumed.output[-3000:]


def test_the_dms_sources_keep_their_state_on_s3_and_nothing_on_a_local_disk(lake: Lake, cfg: PipelineConfig) -> None:
    """The s3-sqs file log (RocksDB, published as versions) and status, and the Kinesis shards' ends, are in
    the checkpoints on S3, where a restarted driver finds them."""
    s3, dms = boto3.client("s3", **cfg.aws.boto3_kwargs()), lake.dms

    def keys(checkpoint: str) -> set[str]:
        prefix = checkpoint.split("/", 3)[3] + "/"
        return {obj["Key"][len(prefix):] for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=GLUE_BUCKET, Prefix=prefix) for obj in page.get("Contents", [])}

    files, kinesis = keys(dms.checkpoints[dms.bucket]), keys(dms.checkpoints[dms.stream])
    assert {"sources/s3-sqs/rocksdb/LATEST", "sources/s3-sqs/status.json", "commits/0"} <= files
    assert any(k.startswith("sources/s3-sqs/rocksdb/sst/") for k in files)
    assert any(k.startswith(f"kinesis-metadata/{dms.stream}/") for k in kinesis) and "commits/0" in kinesis
    local = [path for path in TEST_HOME.rglob("*") if dms.stream in path.name or dms.bucket in path.name]
    assert local == [], "a stage wrote a DMS source's state under the local home"


@pytest.fixture(scope="module")
def refused(lake: Lake) -> dict[str, Submitted]:
    """The mirror's line with things wrong, submitted side by side: each must stop at its start. A silent master
    stops it before Spark starts; a missing jar and executors without the requirements are found once the
    application runs, and one submission lacking both has each named (the start names every lack at once)."""
    silent = list(lake.lines["mirror"])
    silent[silent.index("--master") + 1] = "spark://127.0.0.1:9"  # discard: nothing listens
    # the executors run the system's python3, without the requirements (the driver keeps this one), and no Iceberg jar
    lacking = [arg.replace(f"spark.pyspark.python={sys.executable}", "spark.pyspark.python=/usr/bin/python3")
               for arg in lake.lines["mirror"]]
    at = lacking.index("--jars") + 1
    lacking[at] = ",".join(jar for jar in lacking[at].split(",") if "iceberg-spark-runtime" not in jar)
    lacking[1:1] = ["--conf", f"spark.pyspark.driver.python={sys.executable}"]
    runs = {name: Submission(line) for name, line in (("master", silent), ("lacking", lacking))}
    done = {name: run.finish() for name, run in runs.items()}
    return {"master": done["master"], "jar": done["lacking"], "python": done["lacking"]}


def test_a_master_that_does_not_answer_stops_the_run_at_its_start(refused: dict[str, Submitted]) -> None:
    run = refused["master"]
    assert run.code == 1 and "error: the Spark master spark://127.0.0.1:9 does not answer" in run.output


def test_a_jar_missing_from_jars_is_named(refused: dict[str, Submitted]) -> None:
    run = refused["jar"]
    assert run.code == 1, run.output[-3000:]
    assert "error: the application's class path lacks iceberg-spark-runtime-4.1_2.13: add its jar to --jars" in run.output


def test_a_python_dependency_missing_on_the_executors_is_named(refused: dict[str, Submitted]) -> None:
    run = refused["python"]
    assert run.code == 1, run.output[-3000:]
    assert re.search(r"^error: .*the executors' Python cannot import \w+: ship the project with --py-files", run.output,
                     re.MULTILINE)
