"""The changelog stage on the stack's two-worker Spark cluster (one core each) against the same stage in
`local[2]`, both submitted with `spark-submit` from one `pipeline package`, in one run on the same machine.

1. The changelog bench's Kafka case (`bench/changelog.py`'s helpers): the simulator's Debezium Avro changes of
   the `employee` table, replayed to one 4-partition topic until it holds `--events`.
2. The same `changelog --until-caught-up` line is submitted on that topic with `--master local[2]` and with
   the cluster's master (as `package` prints it: for the cluster its driver's JIT is C1 alone), each submission
   with a namespace and a checkpoint of its own, the tables and checkpoints on the stack's S3 and Glue (moto);
   `--rounds` times, the order alternating (the machine's
   load moves under a run: another's test run starting makes the side that runs then slower). Each
   submission's figure is its events over the summed durations of its batches (the stage's `changelog.batch`
   lines: rows and rows/s), what a running stream spends on them; the whole submission (JVMs, session,
   executors) is printed beside it. The ratio is of each side's best round. With `--batches N` the topic is
   read in N batches (`changelog.max_offsets_per_trigger`) and the figure leaves the first out, the one that
   starts every JVM's compiling (the cluster has three, each compiling the stage's path for itself, and its
   executors still compile in the batches after it: docs/benchmarks.md, the cluster). With `--warmup-events W`
   the topic holds W more events first, read in batches of the same size and left out too: the measured events
   are those of a stream that has run a while, as bench/changelog.py's closing round is.
3. Beside each submission's figure, the CPU-seconds its processes and the stack's used, from `/proc`
   (`bench/cpu.py`'s `Sampler`): the driver (local[2]'s tasks run there), the executors (the workers' children),
   the cluster's daemons and the services, a JVM's JIT compiler, GC and Spark task threads apart; for the batches
   counted, for the whole submission and batch by batch. The machine's load moves the wall time (the cluster's
   three JVMs take a larger share of a contended machine than local[2]'s one), much less the CPU: each side's
   CPU-seconds per million events give the most the cluster can reach with every core busy (local's / its own).
4. The Kinesis case: the simulator's DMS JSON (`--kinesis-events`) on a 4-shard stream, landed by one
   submission to the cluster; each executor's log names the shards it read (`kinesis.shard_read`).

Needs the stack with the cluster, on ports of its own, e.g.:
  python -m pipeline --set home=/tmp/benchcl --set stack.kafka_port=39092 ... stack up --with spark-cluster
Usage: bench/cluster.py [--events 1000000] [--rounds 2] [--batches 1] [--warmup-events 0]
       [--kinesis-events 20000]
       [--set k=v ...] (the stack's settings)
Ends with: `cluster: <x>x local[2], shards on <n> executors`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.changelog import POOL, produce, simulate_pool  # noqa: E402
from bench.cpu import Group, Sampler, describe  # noqa: E402
from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.runtime import package  # noqa: E402
from pipeline.sources.kinesis.shard_reader import shards_read  # noqa: E402
from pipeline.stack.services import all_services  # noqa: E402
from pipeline.stack.spark_cluster import (SparkMaster, SparkWorker, cluster_services, executor_options,  # noqa: E402
                                          master_url)
from simulators.kinesis import KinesisTransport  # noqa: E402
from simulators.simulation import Simulation, SimulationOptions  # noqa: E402
from simulators.truth import TruthStore  # noqa: E402

BATCH = re.compile(r"^(\S+Z) .*?changelog\.batch\b.*?\bbatch=(\d+).*?\brows_in=(\d+).*?\brows_per_s=([\d.]+)", re.M)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Submitted:
    """One spark-submit run to its end, with the stack's AWS keys in its environment (the driver's clients read
    them there; the workers hand theirs to the executors), and the CPU its processes and the stack's used
    (`cpu_groups`)."""

    def __init__(self, cfg: PipelineConfig, line: list[str], *args: str) -> None:
        env = {**os.environ, "AWS_REGION": cfg.aws.region}
        if cfg.aws.access_key_id and cfg.aws.secret_access_key:
            env.update(AWS_ACCESS_KEY_ID=cfg.aws.access_key_id.get_secret_value(),
                       AWS_SECRET_ACCESS_KEY=cfg.aws.secret_access_key.get_secret_value())
        started = time.perf_counter()
        with tempfile.TemporaryFile("w+") as out:
            run = subprocess.Popen([*line, *args], env=env, cwd=cfg.home, stdout=out, stderr=subprocess.STDOUT,
                                   text=True)
            self.cpu = Sampler(cpu_groups(cfg, run.pid)).start()
            returncode = run.wait()
            self.cpu.stop()
            out.seek(0)
            self.output = ANSI.sub("", out.read())
        self.seconds = time.perf_counter() - started
        if returncode != 0:
            raise SystemExit(f"{line[line.index('--master') + 1]} failed ({returncode}):\n{self.output[-4000:]}")

    @property
    def app_id(self) -> str:
        found = re.search(r"app ID (app-\d+-\d+)", self.output)
        return found.group(1) if found else ""

    def batch_seconds(self, skip: int) -> tuple[int, float]:
        """Rows the stage's batches after the first `skip` took in, and the seconds they took, from its
        per-batch lines."""
        batches = [(int(rows), float(rate)) for _, b, rows, rate in BATCH.findall(self.output) if int(b) >= skip]
        return sum(rows for rows, _ in batches), sum(rows / rate for rows, rate in batches if rate > 0)

    def _logged(self) -> dict[int, float]:
        """Batch id -> when its line was logged (at most a second after it ended: the stage polls)."""
        return {int(b): datetime.fromisoformat(at).timestamp() for at, b, _, _ in BATCH.findall(self.output)}

    def batches_cpu(self, skip: int) -> dict[tuple[str, str], float]:
        """CPU seconds from the line of batch `skip - 1` (the start of the submission when `skip` is 0) to the
        last batch's line: the batches the figure counts, with the driver's work between them."""
        logged = self._logged()
        start = logged.get(skip - 1, self.cpu.samples[0][0] if self.cpu.samples else 0.0)
        return self.cpu.between(start, max(logged.values(), default=start))

    def per_batch(self) -> list[str]:
        """For each batch after the first, its CPU seconds (from the previous batch's line to its own) by kind over
        all the processes, and the executors' apart: whether the JIT is still at work."""
        logged, lines = self._logged(), []
        rates = {int(b): (int(rows), float(rate)) for _, b, rows, rate in BATCH.findall(self.output)}
        for batch in sorted(logged)[1:]:
            cpu = self.cpu.between(logged[batch - 1], logged[batch])
            kinds: dict[str, float] = {}
            for (_, kind), seconds in cpu.items():
                kinds[kind] = kinds.get(kind, 0.0) + seconds
            executors = sum(seconds for (group, _), seconds in cpu.items() if group == "executors")
            rows, rate = rates[batch]
            lines.append(f"  batch {batch}: {rows:,} events in {rows / rate if rate else 0:.1f} s, "
                         f"{sum(kinds.values()):.1f} CPU-s (" + ", ".join(
                             f"{kind} {seconds:.1f}" for kind, seconds in sorted(kinds.items()) if seconds >= 0.05)
                         + (f"; executors {executors:.1f})" if executors else ")"))
        return lines


def cpu_groups(cfg: PipelineConfig, submitted: int) -> list[Group]:
    """Whose CPU a submission is charged: its own processes (the driver JVM, which runs local[2]'s tasks, and
    its Python), the executors (the workers' children: JVMs and their Python workers), the cluster's daemons
    (master and workers, there for both sides) and the stack's services (Kafka, moto, the registry)."""
    services = [s for s in all_services(cfg) if s.process.pid() is not None]
    daemons = tuple(s.process.pid() for s in services if isinstance(s, (SparkMaster, SparkWorker)))
    others = tuple(s.process.pid() for s in services if not isinstance(s, (SparkMaster, SparkWorker)))
    return [Group("driver", (submitted,)), Group("executors", daemons, own=False),
            Group("cluster daemons", daemons, descendants=False), Group("services", others, descendants=False)]


def lake_settings(cfg: PipelineConfig, bucket: str, run: str) -> list[str]:
    """Glue tables and checkpoints on the stack's S3 under `run`: what a cluster run needs (and local[2] gets the
    same, so both sides write to the same storage)."""
    import boto3

    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=bucket)
    return ["catalog.type=glue", f"catalog.warehouse=s3://{bucket}/{run}/warehouse"]


def stage_line(cfg: PipelineConfig, built: package.Package, master: str, settings: list[str], side: str,
               root: str) -> list[str]:
    """The changelog's line as `package` prints it for `master`."""
    own = [f"changelog.namespace={side}_changelog", f"changelog.checkpoint={root}/{side}/checkpoint"]
    return built.submit(master, "changelog", package.passed_on([*settings, *own]), python=sys.executable,
                        executors=executor_options(cfg, master))


def kafka_case(cfg: PipelineConfig, built: package.Package, settings: list[str], root: str, run: str,
               events: int, rounds: int, batches: int, warmup: int) -> tuple[dict[str, float], dict[str, float]]:
    """Each side's best rate in events/s over `rounds` submissions, the order alternating, and its least CPU
    seconds per million events in the batches counted (every process: stage, executors, cluster, services).

    With `warmup` events, the topic holds them before the `events` measured, read in batches of the same size
    (at least `warmup`, rounded up to whole batches) that the figure leaves out: the measured batches are those
    of a running stream whose JVMs have compiled its path, as bench/changelog.py's closing round is."""
    per_batch = -(-events // batches)
    warmup_batches = -(-warmup // per_batch)
    pool = simulate_pool(cfg, f"{run}k", min(POOL, events))
    topic = pool[0].topic
    produce(cfg, topic, pool, warmup_batches * per_batch + events)
    pattern = [f"changelog.topic_pattern={re.escape(topic)}",
               *([f"changelog.max_offsets_per_trigger={per_batch}"] if batches > 1 or warmup_batches else [])]
    sides = [("local[2]", "local[2]"), ("cluster", master_url(cfg))]
    best = {side: 0.0 for side, _ in sides}
    cpu: dict[str, float] = {}
    for round_ in range(1, rounds + 1):
        for side, master in sides if round_ % 2 else sides[::-1]:
            tag = f"{run}_{side.replace('[', '').replace(']', '')}_{round_}"
            submitted = Submitted(cfg, stage_line(cfg, built, master, [*settings, *pattern], tag, root),
                                  "--until-caught-up")
            skip = warmup_batches or (1 if batches > 1 else 0)
            rows, seconds = submitted.batch_seconds(skip)
            counted = submitted.batches_cpu(skip)
            best[side] = max(best[side], rows / seconds)
            cpu[side] = min(cpu.get(side, float("inf")), sum(counted.values()) / rows * 1e6)
            print(f"round {round_} {side:>9}: {rows / seconds:10,.0f} events/s  ({rows:,} events in {seconds:.1f} s "
                  f"of batches; the whole submission {submitted.seconds:.1f} s; load {os.getloadavg()[0]:.1f})\n"
                  f"  CPU in the batches counted: {describe(counted)}\n"
                  f"  CPU in the whole submission: {describe(submitted.cpu.total())}", *submitted.per_batch(),
                  sep="\n", flush=True)
    return best, cpu


def kinesis_case(cfg: PipelineConfig, built: package.Package, settings: list[str], root: str, run: str,
                 events: int) -> tuple[Submitted, dict[str, set[str]]]:
    """The stream landed on the cluster; the shards each executor read, by `<worker>/<executor id>`."""
    stream = f"{run}s"
    with tempfile.TemporaryDirectory() as folder:
        options = SimulationOptions(format="dms-json", events=events, snapshot_rows=1000, topic_prefix=stream)
        Simulation(options, KinesisTransport(cfg.aws, shards=4), TruthStore(Path(folder) / "truth.db"),
                   None).run(progress=False)
    print(f"kinesis: changelog of {events:,} DMS changes on 4 shards, on the cluster ...", flush=True)
    kinesis = ["changelog.source=kinesis", f"kinesis.streams={stream}", "kinesis.fetch_interval_ms=0"]
    landed = Submitted(cfg, stage_line(cfg, built, master_url(cfg), [*settings, *kinesis], f"{run}_kinesis", root),
                       "--until-caught-up")
    workers = [s for s in cluster_services(cfg) if isinstance(s, SparkWorker)]
    read = {f"{worker.name}/executor {executor}": shards_read(log) for worker in workers
            for executor, log in worker.executor_logs(landed.app_id).items()}
    return landed, {executor: shards for executor, shards in read.items() if shards}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=1, help="read the topic in this many batches; the "
                        "figure is then of all but the first")
    parser.add_argument("--warmup-events", type=int, default=0, help="events read first in the same stream "
                        "and left out of the figure (whole batches of the measured batches' size)")
    parser.add_argument("--kinesis-events", type=int, default=20_000)
    parser.add_argument("--bucket", default="bench-cluster")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    cfg = load_config(overrides=[*args.overrides, "stack.spark_cluster=true"])
    run = f"bc{uuid.uuid4().hex[:6]}"
    settings = [*args.overrides, *lake_settings(cfg, args.bucket, run)]
    root = f"s3a://{args.bucket}/{run}"
    built = package.build(cfg.jars_dir, cfg.home / "bench-cluster-package")
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min average, {os.cpu_count()} CPUs)", flush=True)

    rates, cpu = kafka_case(cfg, built, settings, root, run, args.events, args.rounds, args.batches,
                           args.warmup_events)
    ratio = rates["cluster"] / rates["local[2]"]
    print(f"best rounds: cluster {rates['cluster']:,.0f}, local[2] {rates['local[2]']:,.0f} events/s: {ratio:.2f}x",
          flush=True)
    print(f"CPU-s per million events in the batches counted (least of the rounds): cluster {cpu['cluster']:.1f}, "
          f"local[2] {cpu['local[2]']:.1f}: with every core busy the cluster reaches at most "
          f"{cpu['local[2]'] / cpu['cluster']:.2f}x local[2] on this machine", flush=True)

    _, read = kinesis_case(cfg, built, settings, root, run, args.kinesis_events)
    for executor, shards in sorted(read.items()):
        print(f"  {executor}: {', '.join(sorted(shards))}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min average)")
    print(f"cluster: {ratio:.2f}x local[2], shards on {len(read)} executors")


if __name__ == "__main__":
    main()
