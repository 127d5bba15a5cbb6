"""Executor CPU of the changelog stage's landing against the plain-Spark baseline, one topic, in a minute.

`bench/changelog.py` times whole runs, which the JIT, the driver and the machine's load all move. This one
isolates what a change to decoding or normalising does to the executors: the stage's own landing code
(`Landing.land_topics`, one pass) and the baseline (Kafka -> `from_avro` with one fixed schema) each read the
same `--events` Debezium events (two writer versions interleaved; the baseline's of version 1) as a Kafka batch
query and write them to `--sink` (`noop`: Spark's no-op sink, so the write costs nothing; `iceberg`: an append,
to a new table for the baseline), alternately, `--rounds` times. Per round: the executors' CPU seconds of that
round's jobs (Spark's REST API, task `executorCpuTime`, which the load inflates less than wall time) and the wall
time. The first round is the JVM's warm-up; the medians are of the others.

Needs the stack (`python -m pipeline stack up`). Usage: bench/changelog_cpu.py [--events 300000] [--rounds 6]
[--sink noop|iceberg] [--tables employees] [--seed 7] [--set k=v ...] (`--tables synthetic:1 --seed 74`:
`bench/database.py`'s real-types table). Ends with: `changelog cpu: <stage> / <baseline> CPU-s, <ratio>x`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from changelog import POOL, produce, simulate_pool  # noqa: E402

from cdc.framing import Framing  # noqa: E402
from pipeline.config import kafka  # noqa: E402
from pipeline.config.settings import load_config  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.stages.changelog.landing import Landing  # noqa: E402
from pipeline.stages.changelog.report import BatchReport  # noqa: E402
from registry.factory import serde_from_settings  # noqa: E402
from registry.wire import confluent_unframe  # noqa: E402
from tables.append import Appended  # noqa: E402


class NoopAppender:
    """The stage's rows (stamped, as the Iceberg appender gets them) written to Spark's no-op sink."""

    def append(self, rows, name, writer_id, batch_id, partition_by_source_time=True, properties=None, source=None):
        rows.write.format("noop").mode("overwrite").save()
        return Appended(name, 0, skipped=False)


def executor_cpu(spark, group: str, timeout_s: float = 60) -> float:
    """Executor CPU seconds of the jobs of `group`, once Spark's status store has them: its events arrive
    asynchronously, and a job's end comes after its stages' and tasks' ends, so it is asked until every job of
    the group has ended."""
    base = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"
    deadline = time.monotonic() + timeout_s
    while True:
        jobs = [job for job in json.load(urllib.request.urlopen(f"{base}/jobs")) if job.get("jobGroup") == group]
        stages = {s for job in jobs for s in job["stageIds"]}
        done = [s for s in json.load(urllib.request.urlopen(f"{base}/stages?status=complete"))
                if s["stageId"] in stages]
        settled = bool(jobs) and all(job["status"] != "RUNNING" for job in jobs)
        if settled or time.monotonic() > deadline:
            return sum(s["executorCpuTime"] for s in done) / 1e9
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--sink", choices=("noop", "iceberg"), default="noop")
    parser.add_argument("--tables", default="employees", help="the simulator's table set, of one table")
    parser.add_argument("--seed", type=int, default=7, help="the simulator's seed (synthetic:1 tables differ)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logs.configure("WARNING")
    cfg = load_config(overrides=[*args.overrides, "spark.ui=true"])  # the REST API that reports task CPU
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min average, {os.cpu_count()} CPUs)", flush=True)
    pool = simulate_pool(cfg, f"cpu{uuid.uuid4().hex[:6]}", min(POOL, args.events), args.tables, args.seed)
    first = confluent_unframe(pool[0].value or b"")[0]
    topic, baseline_topic = pool[0].topic, f"{pool[0].topic}-baseline"
    produce(cfg, topic, pool, args.events)
    produce(cfg, baseline_topic, [m for m in pool if m.value and confluent_unframe(m.value)[0] == first], args.events)
    schema = serde_from_settings(cfg.registry, cfg.aws).registry.schema(first)
    spark = get_spark(cfg)

    def read(name: str, headers: bool):
        return (spark.read.format("kafka").options(**kafka.spark_options(cfg.kafka, headers=headers))
                .option("subscribe", name).option("startingOffsets", "earliest").load())

    def stage(round_: int) -> None:
        landing = Landing(cfg, spark)
        if args.sink == "noop":
            landing.appender = NoopAppender()
        landing.prepare()
        headers = Framing.of(cfg.registry.wire_format).reads_headers
        topics = SimpleNamespace(names=[topic], quiet=frozenset(), read=lambda name: read(name, headers))
        landing.land_topics(topics, BatchReport(round_, writer=f"cpu-{uuid.uuid4().hex}"))

    def baseline(round_: int) -> None:
        body = Framing.of(cfg.registry.written_wire_format).body()
        from pyspark.sql.avro.functions import from_avro

        rows = read(baseline_topic, False).select(from_avro(body, schema).alias("v")).select("v.*")
        if args.sink == "noop":
            rows.write.format("noop").mode("overwrite").save()
        else:
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.bench")
            rows.writeTo(f"{cfg.catalog.name}.bench.cpu_{uuid.uuid4().hex[:8]}").using("iceberg").create()

    figures: dict[str, list[tuple[float, float]]] = {"stage": [], "baseline": []}
    for round_ in range(args.rounds):
        for name, run in (("stage", stage), ("baseline", baseline)):
            group = f"{name}-{round_}-{uuid.uuid4().hex[:6]}"
            spark.sparkContext.setJobGroup(group, group)
            started = time.perf_counter()
            run(round_)
            wall = time.perf_counter() - started
            cpu = executor_cpu(spark, group)
            figures[name].append((cpu, wall))
            print(f"round {round_} {name:8s} executor cpu {cpu:5.2f} s  wall {wall:5.2f} s  "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    medians = {name: tuple(statistics.median(figure) for figure in zip(*(runs[1:] or runs)))
               for name, runs in figures.items()}
    for name, (cpu, wall) in medians.items():
        print(f"{name}: median executor cpu {cpu:.2f} s, wall {wall:.2f} s ({args.events:,} events, {args.sink})")
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min average)")
    stage_cpu, baseline_cpu = medians["stage"][0], medians["baseline"][0]
    print(f"changelog cpu: {stage_cpu:.2f} / {baseline_cpu:.2f} CPU-s, {baseline_cpu / stage_cpu:.2f}x")


if __name__ == "__main__":
    main()
