"""A Spark standalone cluster on this machine: one master and `stack.spark_workers` workers, each its own JVM
from the installed PySpark distribution (what `spark-class org.apache.spark.deploy.master.Master` and
`...worker.Worker` run), each worker starting executor JVMs of its own for the applications submitted to it.

It is the shape of EMR, EMR Serverless and Kubernetes that `local[*]` hides: executors in other processes,
reached only through `--jars` and `--py-files`, reading and writing only what every node can reach (S3), and
able to die mid-task while Spark retries elsewhere. docs/operations.md says how the same jobs are submitted there.
"""

from __future__ import annotations

import os
from pathlib import Path

import requests

from pipeline.config.settings import PipelineConfig
from pipeline.runtime.jvm import spark_home
from pipeline.stack.base import Port, Service
from pipeline.stack.java import find_java

DAEMON_HEAP = "512m"  # what spark-class gives a master or worker (SPARK_DAEMON_MEMORY's default is 1g)


def _daemon(java: Path, options: list[str], log_dir: Path, main: str, *args: str,
            properties: dict[str, str] | None = None) -> list[str]:
    """The command `spark-class` would run for a standalone daemon, with JVM `options`; `properties` are its Spark
    settings."""
    settings = [f"-D{key}={value}" for key, value in (properties or {}).items()]
    return [str(java), f"-Xmx{DAEMON_HEAP}", *options, "-cp", f"{spark_home() / 'conf'}:{spark_home() / 'jars'}/*",
            f"-Dspark.log.dir={log_dir}", *settings, main, *args]


class SparkMaster(Service):
    """The standalone master: schedules applications onto the workers; healthy once its web UI answers."""

    name = "spark-master"

    @property
    def ports(self) -> list[Port]:
        s = self.cfg.stack
        return [Port("stack.spark_master_port", s.spark_master_port),
                Port("stack.spark_master_ui_port", s.spark_master_ui_port)]

    @property
    def address(self) -> str:
        return master_url(self.cfg)

    @property
    def web_ui(self) -> str:
        return f"http://{self.host}:{self.cfg.stack.spark_master_ui_port}"

    def command(self) -> list[str]:
        s = self.cfg.stack
        return _daemon(find_java(17, "Spark 4.1"), self.java_options, self.folder,
                       "org.apache.spark.deploy.master.Master",
                       "--host", self.host, "--port", str(s.spark_master_port),
                       "--webui-port", str(s.spark_master_ui_port))

    def healthy(self) -> bool:
        return self.alive_workers() is not None

    def alive_workers(self) -> int | None:
        """Workers registered and ALIVE, from the master's JSON view; None when the master does not answer."""
        try:
            state = requests.get(f"{self.web_ui}/json/", timeout=2).json()
        except (requests.RequestException, ValueError):
            return None
        return int(state.get("aliveworkers", 0))


class SparkWorker(Service):
    """One worker with `stack.spark_worker_cores` cores; healthy once the master counts it alive.

    Its executors inherit its environment: the `aws` keys, when configured, reach S3A's environment credential
    provider there as they reach the driver's (`pipeline/runtime/spark.py`)."""

    depends_on = ("spark-master",)

    def __init__(self, cfg: PipelineConfig, index: int) -> None:
        self.index = index
        self.name = f"spark-worker-{index}"
        super().__init__(cfg)

    @property
    def ports(self) -> list[Port]:
        s = self.cfg.stack
        return [Port("stack.spark_worker_port", s.spark_worker_port + self.index - 1),
                Port("stack.spark_worker_ui_port", s.spark_worker_ui_port + self.index - 1)]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.cfg.stack.spark_worker_port + self.index - 1}"

    @property
    def web_ui(self) -> str:
        return f"http://{self.host}:{self.cfg.stack.spark_worker_ui_port + self.index - 1}"

    def command(self) -> list[str]:
        s = self.cfg.stack
        (self.folder / "work").mkdir(parents=True, exist_ok=True)
        return _daemon(find_java(17, "Spark 4.1"), self.java_options, self.folder,
                       "org.apache.spark.deploy.worker.Worker",
                       "--host", self.host, "--port", str(s.spark_worker_port + self.index - 1),
                       "--webui-port", str(s.spark_worker_ui_port + self.index - 1),
                       "--cores", str(s.spark_worker_cores), "--memory", s.spark_worker_memory,
                       "--work-dir", str(self.folder / "work"), master_url(self.cfg),
                       properties=self._cleanup())

    def _cleanup(self) -> dict[str, str]:
        """Every application leaves a folder of ~300 MB (its copies of `--jars`) in the work folder; without a
        cleanup a local stack fills its disk in a few hundred submissions. The worker removes a finished
        application's folder `stack.spark_worker_keep_s` after its last change (Spark checks every tenth of
        that, at least once a minute)."""
        keep = self.cfg.stack.spark_worker_keep_s
        return {"spark.worker.cleanup.enabled": "true", "spark.worker.cleanup.appDataTtl": str(keep),
                "spark.worker.cleanup.interval": str(max(60, keep // 10))}

    def environment(self) -> dict[str, str]:
        aws = self.cfg.aws
        # what bin/load-spark-env.sh exports for spark-class; the worker's launcher of executors needs both
        env = {"SPARK_HOME": str(spark_home()), "SPARK_SCALA_VERSION": "2.13", "AWS_REGION": aws.region}
        if aws.access_key_id and aws.secret_access_key:
            env.update(AWS_ACCESS_KEY_ID=aws.access_key_id.get_secret_value(),
                       AWS_SECRET_ACCESS_KEY=aws.secret_access_key.get_secret_value())
        return env

    def healthy(self) -> bool:
        """Registered with the master: its own UI answers before then."""
        try:
            state = requests.get(f"{self.web_ui}/json/", timeout=2).json()
        except (requests.RequestException, ValueError):
            return False
        return bool(state.get("masterurl"))  # empty until the master has registered it

    def executor_logs(self, app_id: str) -> dict[str, str]:
        """The log (stderr) of each executor this worker ran for application `app_id`, by executor id: its
        Python workers write there too."""
        return {log.parent.name: log.read_text(errors="replace")
                for log in sorted((self.folder / "work" / app_id).glob("*/stderr"))}

    def executor_pids(self) -> list[int]:
        """The PIDs of the executor JVMs this worker runs now (its children running CoarseGrainedExecutorBackend)."""
        pid = self.process.pid()
        if pid is None:
            return []
        found = []
        for entry in os.listdir("/proc"):  # each process's small `stat` first: a JVM's command line is kilobytes
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    parent = int(stat.read().rsplit(b") ", 1)[1].split()[1])
                if parent == pid and b"CoarseGrainedExecutorBackend" in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):  # exited meanwhile
                continue
        return found


def master_url(cfg: PipelineConfig) -> str:
    return f"spark://{cfg.stack.host}:{cfg.stack.spark_master_port}"


# An executor runs batch tasks only, where a throughput collector costs them less: the changelog's task threads
# spent 8.8-9.1 CPU-s a million events with G1 in a 2 GiB heap (1 MiB regions), 8.5-8.6 with 2 MiB regions, 7.9-8.0
# with the parallel collector, against 7.2-8.3 in a local driver's 4 GiB G1 heap (docs/benchmarks.md, the cluster).
EXECUTOR_JAVA_OPTIONS = "-XX:+UseParallelGC"


def executor_options(cfg: PipelineConfig, master: str) -> list[str]:
    """spark-submit's options for the executors on `master` when it is the stack's own cluster: all the memory a
    worker offers (it runs one executor an application; Spark's default, 1 GiB, left half of it unused) and
    `EXECUTOR_JAVA_OPTIONS` (docs/benchmarks.md, the cluster). Another cluster's are its owner's to set."""
    if master != master_url(cfg):
        return []
    return ["--executor-memory", cfg.stack.spark_worker_memory,
            "--conf", f"spark.executor.extraJavaOptions={EXECUTOR_JAVA_OPTIONS}"]


def cluster_services(cfg: PipelineConfig) -> list[Service]:
    return [SparkMaster(cfg), *(SparkWorker(cfg, index) for index in range(1, cfg.stack.spark_workers + 1))]
