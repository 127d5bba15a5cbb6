"""The Spark cluster without starting it: its services, the package's parts, and the checks made before a cluster
run starts (what the executors could not reach, a master that does not answer)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from pipeline.cli.commands import _stack
from pipeline.cli.parser import build_parser
from pipeline.config.settings import ConfigError, load_config
from pipeline.runtime import package
from pipeline.runtime.cluster import ClusterError, check_before_start, is_local
from pipeline.stack.services import all_services
from pipeline.stack.spark_cluster import (DAEMON_HEAP, EXECUTOR_JAVA_OPTIONS, SparkMaster, SparkWorker,
                                          executor_options, master_url)
from tests.conftest import free_port

S3 = ["catalog.type=glue", "catalog.warehouse=s3://lake/warehouse", "changelog.checkpoint=s3a://lake/checkpoints"]


def _cfg(tmp_path: Path, *overrides: str):
    return load_config(overrides=[f"home={tmp_path}", *overrides], environ={})


def test_the_cluster_runs_only_when_asked_master_first_then_each_worker_on_ports_of_its_own(tmp_path: Path) -> None:
    assert not {s.name for s in all_services(_cfg(tmp_path))} & {"spark-master", "spark-worker-1"}
    args = build_parser().parse_args(["stack", "up", "--with", "spark-cluster"])
    services = _stack(_cfg(tmp_path, "stack.spark_workers=3"), args).services
    names = [s.name for s in services]
    assert names[-4:] == ["spark-master", "spark-worker-1", "spark-worker-2", "spark-worker-3"]
    workers = [s for s in services if isinstance(s, SparkWorker)]
    assert all(w.depends_on == ("spark-master",) for w in workers)
    assert [w.ports[0].number for w in workers] == [7078, 7079, 7080]
    assert len({p.number for s in services for p in s.ports}) == sum(len(s.ports) for s in services)
    assert services[-4].web_ui == "http://127.0.0.1:8090" and workers[1].web_ui == "http://127.0.0.1:8092"


def test_a_workers_port_range_must_not_meet_another_port(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="distinct"):
        _cfg(tmp_path, "stack.spark_worker_port=8079", "stack.spark_workers=2")  # 8079, 8080: the registry's


def test_each_worker_launches_executors_from_this_pyspark_with_the_configured_keys(tmp_path: Path) -> None:
    worker = SparkWorker(_cfg(tmp_path, "stack.spark_worker_cores=2"), 2)
    command, env = worker.command(), worker.environment()
    assert command[-1] == master_url(worker.cfg) == "spark://127.0.0.1:7077"
    assert command[command.index("--cores") + 1] == "2" and command[command.index("--port") + 1] == "7079"
    assert Path(env["SPARK_HOME"], "jars").is_dir() and env["SPARK_SCALA_VERSION"] == "2.13"
    assert env["AWS_ACCESS_KEY_ID"] == "test"  # the stack's moto keys, for S3A's environment provider
    assert "AWS_ACCESS_KEY_ID" not in SparkWorker(_cfg(tmp_path, "aws.endpoint_url="), 1).environment()


def test_the_daemons_take_the_stacks_java_options_after_their_own(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "stack.java_options=-XX:TieredStopAtLevel=1 -Xmx1g")
    for command in (SparkMaster(cfg).command(), SparkWorker(cfg, 1).command()):
        assert command.index("-Xmx1g") > command.index(f"-Xmx{DAEMON_HEAP}") and "-XX:TieredStopAtLevel=1" in command
    assert "-XX:TieredStopAtLevel=1" not in SparkWorker(_cfg(tmp_path), 1).command()


def test_a_worker_removes_finished_applications_folders_after_the_configured_time(tmp_path: Path) -> None:
    command = SparkWorker(_cfg(tmp_path, "stack.spark_worker_keep_s=7200"), 1).command()
    settings = command[:command.index("org.apache.spark.deploy.worker.Worker")]
    assert {"-Dspark.worker.cleanup.enabled=true", "-Dspark.worker.cleanup.appDataTtl=7200",
            "-Dspark.worker.cleanup.interval=720"} <= set(settings)
    with pytest.raises(ConfigError, match="spark_worker_keep_s"):
        _cfg(tmp_path, "stack.spark_worker_keep_s=5")


@pytest.mark.parametrize(("master", "local"), [(None, True), ("local", True), ("local[*]", True),
                                              ("local-cluster[2,1,1024]", True), ("spark://h:7077", False),
                                              ("yarn", False), ("k8s://https://h:443", False)])
def test_which_masters_run_executors_elsewhere(master: str | None, local: bool) -> None:
    assert is_local(master) is local


def test_a_cluster_run_refuses_every_local_path_in_one_message(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "catalog.type=glue", "catalog.warehouse=s3://lake/w", "kinesis.metadata_path=/var/k")
    with pytest.raises(ClusterError) as caught:
        check_before_start(cfg, "yarn")
    message = str(caught.value)
    assert "spark.master is yarn" in message and "catalog.warehouse" not in message
    assert f"changelog.checkpoint = '{tmp_path / 'checkpoints' / 'changelog'}'" in message
    assert "kinesis.metadata_path = '/var/k'" in message and "s3://bucket/prefix" in message
    with pytest.raises(ClusterError, match=r"catalog.warehouse = 'file:"):
        check_before_start(_cfg(tmp_path, *S3[2:]), "yarn")  # the JDBC catalog's default warehouse is local
    with pytest.raises(ClusterError, match=r"lake.delta_root = 'file:"):
        check_before_start(_cfg(tmp_path, *S3, "lake.format=delta"), "yarn")
    check_before_start(_cfg(tmp_path, *S3), "yarn")


def test_a_master_that_does_not_answer_is_named_with_the_way_to_start_it(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, *S3)
    silent = free_port()
    with pytest.raises(ClusterError, match=rf"spark://127.0.0.1:{silent} does not answer: start it .*--with spark-cluster"):
        check_before_start(cfg, f"spark://127.0.0.1:{silent}")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        check_before_start(cfg, f"spark://127.0.0.1:{silent},127.0.0.1:{port}")  # a standby master answers


def test_the_package_pins_all_the_nodes_python_needs_but_not_the_clusters_own_spark_nor_the_stacks_moto() -> None:
    pins = package.pinned_requirements()
    names = {pin.split("==")[0].split("[")[0] for pin in pins}
    assert {"delta-spark", "pyiceberg", "boto3", "rocksdict", "pyarrow", "structlog"} <= names
    assert {"botocore", "numpy", "pydantic-core"} <= names  # what those need in turn: a node installs with --no-deps
    assert not {"pyspark", "py4j", "moto", "flask", "pytest"} & names
    assert all("==" in pin for pin in pins)


def test_a_submission_carries_the_settings_but_no_secret_and_lets_spark_submit_decide_master_and_jars(
        tmp_path: Path) -> None:
    carried = package.passed_on(["catalog.type=glue", "aws.secret_access_key=s3cr3t", "spark.master=local[2]",
                                 "kafka.properties.sasl.jaas.config=x", "mirror.tables=a,b"])
    assert carried == ["catalog.type=glue", "mirror.tables=a,b"]
    built = package.Package(tmp_path, tmp_path / "pipeline.zip", tmp_path / "main.py",
                            [tmp_path / "a.jar", tmp_path / "b.jar"], tmp_path / "requirements.txt")
    line = built.submit("spark://m:7077", "mirror", carried, Path("pipeline.toml"), "/opt/venv/bin/python")
    assert line[0].endswith("bin/spark-submit") and line[1:3] == ["--master", "spark://m:7077"]
    assert line[3:5] == ["--driver-java-options", package.CLUSTER_DRIVER_JAVA_OPTIONS]  # a driver that runs no task
    assert "--driver-java-options" not in built.submit("local[2]", "mirror")  # one that runs them all
    assert "--executor-memory" not in line  # Spark's default, unless told
    assert built.submit("spark://m:7077", "mirror", executors=["--executor-memory", "3g"])[5:7] == [
        "--executor-memory", "3g"]
    assert "--executor-memory" not in built.submit("local[2]", "mirror", executors=["--executor-memory", "3g"])
    assert line[line.index("--jars") + 1] == f"{tmp_path / 'a.jar'},{tmp_path / 'b.jar'}"
    assert line[line.index("--py-files") + 1] == str(tmp_path / "pipeline.zip")
    assert "spark.pyspark.python=/opt/venv/bin/python" in line
    application = line[line.index(str(tmp_path / "main.py")) + 1:]
    assert application == ["--config", "pipeline.toml", "--set", "spark.master=", "--set", "spark.connector_jars=submit",
                           "--set", "catalog.type=glue", "--set", "mirror.tables=a,b", "mirror"]


def test_the_stacks_cluster_gives_each_executor_all_its_worker_offers_and_another_cluster_its_own_sizing(
        tmp_path: Path) -> None:
    cfg = load_config(overrides=[f"home={tmp_path}", "stack.spark_worker_memory=3g"], environ={})
    assert executor_options(cfg, master_url(cfg)) == [
        "--executor-memory", "3g", "--conf", f"spark.executor.extraJavaOptions={EXECUTOR_JAVA_OPTIONS}"]
    assert executor_options(cfg, "spark://emr-primary:7077") == []


def test_a_packed_environment_gives_the_executors_its_python_and_the_driver_this_one(tmp_path: Path) -> None:
    built = package.Package(tmp_path, tmp_path / "pipeline.zip", tmp_path / "main.py", [tmp_path / "a.jar"],
                            tmp_path / "requirements.txt", tmp_path / "environment.tar.gz")
    line = built.submit("spark://m:7077", "changelog")
    assert line[line.index("--archives") + 1] == f"{tmp_path / 'environment.tar.gz'}#environment"
    assert "spark.sql.execution.pyspark.python=./environment/bin/python" in line  # the executors' DataFrame Python
    assert f"spark.pyspark.python={sys.executable}" in line  # the driver's, and its own workers' (the planners)


def test_python_workers_find_the_shipped_code_by_name_on_executors_and_by_path_on_the_driver(tmp_path: Path) -> None:
    """The streaming sources' planners run on the driver and get no `--py-files` from Spark."""
    from pipeline.runtime.spark import _daemon_path

    code = tmp_path / "pipeline.zip"
    code.write_bytes(b"")
    cfg = load_config(overrides=[f"home={tmp_path}"], environ={})
    path = _daemon_path(cfg, {"spark.submit.pyFiles": f"file://{code},s3://bucket/extra.zip"})
    assert path == {"spark.executorEnv.PYTHONPATH": f"pipeline.zip:extra.zip:{code}"}
