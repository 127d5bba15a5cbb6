"""Kinesis changelog throughput: DMS JSON drained from a stream into Iceberg by the changelog stage, against the
raw GetRecords rate of the same stream on the same local service, measured in the same run.

For each shard count (1, 4 and 8; the 4-shard run is the target), in a new stream of a throw-away moto server
on the bench ports:
1. Warm-up, untimed: the simulator (`--to kinesis`, DMS JSON of the `employee` table) writes `--warmup`
   changes and the stage (`ChangelogStage(...).run(until_caught_up=True)`, `changelog.source = "kinesis"`)
   lands them. That pays what a running stage pays once, not per batch: the query's first start, the
   changelog table's creation, the JVM's and the Python workers' first run of the read path. It is done
   `--warmup-rounds` times (default 2): the first round's batch lands the planned way and learns the table's
   row type, the next ones land with it, as every later batch does, so the timed batch runs code that the
   warm-up generated and ran already (with one round it was the first batch of the learned path).
2. The simulator writes `--events` more changes to the same stream.
3. Raw: boto3 GetRecords (10,000 records a call), one reader thread per shard (the parallelism the source gets:
   one partition per shard), from after the warm-up's last record until every shard is caught up.
4. The stage runs again from its checkpoint until caught up, landing the new changes. Two figures:
   - steady state: the summed durations of the micro-batches that held them (Spark's `triggerExecution`:
     planning, reading, landing and committing), which is what a running stage spends on them;
   - end to end: the whole `run` (starting the query again from its checkpoint, and the last trigger that
     finds nothing new and lets the run stop).

Each run also prints the CPU seconds each process used (`bench/cpu.py`: moto, the JVM with its JIT compiler and
garbage collector threads, the Python workers, the driver), raw's and the stage's, which the machine's load
does not inflate the way it does wall time.

Usage: bench/kinesis.py [--events 200000] [--scaling-events 50000] [--warmup 5000] [--warmup-rounds 2]
       [--shards 1,4,8] [--set k=v ...]
(`--scaling-events`: the 1- and 8-shard runs, which show the scaling, not the target; `--shards`: the runs to make.)
Ends with: `kinesis: <records/s> records/s, <ratio>x raw GetRecords` (the 4-shard run, steady state; the end
to end ratio is printed on the line before).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.cpu import Snapshot  # noqa: E402
from bench.stack import SETTINGS  # noqa: E402
from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.sources.kinesis.client import Kinesis  # noqa: E402
from pipeline.stack import Stack  # noqa: E402
from pipeline.stack.services import Moto  # noqa: E402
from pipeline.stages.changelog import ChangelogStage  # noqa: E402
from pipeline.stages.changelog.transports.kinesis import client_options_for  # noqa: E402
from simulators.kinesis import KinesisTransport  # noqa: E402
from simulators.simulation import Simulation, SimulationOptions  # noqa: E402
from simulators.truth import TruthStore  # noqa: E402

TARGET_SHARDS = 4
SHARD_COUNTS = (1, TARGET_SHARDS, 8)


@dataclass(frozen=True)
class Run:
    shards: int
    records: int
    raw_s: float
    stage: StageTime

    def rate(self, seconds: float) -> float:
        return self.records / seconds

    def ratio(self, seconds: float) -> float:
        return self.raw_s / seconds


Positions = dict[str, str | None]  # shard id -> the last sequence number read (None: none yet)


def read_shard(cfg: PipelineConfig, stream: str, shard_id: str, after: str | None) -> tuple[int, str | None]:
    """GetRecords on one shard from after `after` (else TRIM_HORIZON) until caught up; records read, last one."""
    kinesis, records, last = Kinesis(client_options_for(cfg.aws)), 0, after
    start = ({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": after} if after
             else {"ShardIteratorType": "TRIM_HORIZON"})
    iterator = kinesis.call("get_shard_iterator", StreamName=stream, ShardId=shard_id, **start)["ShardIterator"]
    while True:
        response = kinesis.call("get_records", ShardIterator=iterator, Limit=10_000)
        records += len(response["Records"])
        last = response["Records"][-1]["SequenceNumber"] if response["Records"] else last
        iterator = response["NextShardIterator"]
        if not response["Records"] and not response.get("MillisBehindLatest"):
            return records, last


def raw_get_records(cfg: PipelineConfig, stream: str, after: Positions) -> tuple[int, float, Positions]:
    """Records read and seconds taken by plain GetRecords calls, one thread per shard, from `after`; where each
    shard ended."""
    shards = [s["ShardId"] for s in Kinesis(client_options_for(cfg.aws)).call("list_shards", StreamName=stream)["Shards"]]
    started = time.perf_counter()
    with ThreadPoolExecutor(len(shards)) as pool:
        read = list(pool.map(lambda shard: read_shard(cfg, stream, shard, after.get(shard)), shards))
    return sum(n for n, _ in read), time.perf_counter() - started, {s: last for s, (_, last) in zip(shards, read)}


@dataclass(frozen=True)
class StageTime:
    steady_s: float  # the micro-batches that held records
    end_to_end_s: float  # the whole run
    before_s: float  # from the run's start to the start of its first micro-batch with records
    after_s: float  # from the end of its last micro-batch with records to the run's end
    batches: list[float]  # each micro-batch with records: seconds


class Batches:
    """When the micro-batches that held records started (epoch seconds) and how long each took (Spark's progress
    events, `triggerExecution`: planning, reading, landing and committing)."""

    def __init__(self, spark) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        seen = self.seen = []

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event) -> None: ...
            def onQueryIdle(self, event) -> None: ...
            def onQueryTerminated(self, event) -> None: ...

            def onQueryProgress(self, event) -> None:
                progress = event.progress
                if progress.numInputRows:
                    started = datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp()
                    seen.append((started, progress.durationMs["triggerExecution"] / 1000))

        self.listener = Listener()
        spark.streams.addListener(self.listener)


def time_stage(cfg: PipelineConfig, spark, stream: str, home: Path) -> StageTime:
    """Run the stage over `stream` until caught up (from its checkpoint, if it has one)."""
    changelog = cfg.changelog.model_copy(update={"source": "kinesis", "checkpoint": str(home / f"checkpoint-{stream}")})
    kinesis = cfg.kinesis.model_copy(update={"streams": [stream], "fetch_interval_ms": 0})
    stage = ChangelogStage(cfg.model_copy(update={"changelog": changelog, "kinesis": kinesis}), spark)
    batches = Batches(spark)
    started = time.time()
    try:
        stage.run(until_caught_up=True)
        ended = time.time()
        time.sleep(1.0)  # the last progress event reaches the listener after the query has stopped
    finally:
        spark.streams.removeListener(batches.listener)
    first, (last, last_s) = batches.seen[0][0], batches.seen[-1]
    return StageTime(sum(seconds for _, seconds in batches.seen), ended - started, first - started,
                     ended - last - last_s, [seconds for _, seconds in batches.seen])


def produce(cfg: PipelineConfig, home: Path, stream: str, shards: int, events: int, snapshot: int, part: int) -> int:
    """`events` simulated DMS JSON changes (after a snapshot of `snapshot` rows) into `stream` (made with `shards`
    shards if new), the stream's `part`th production; the records written."""
    options = SimulationOptions(format="dms-json", tables="employees", events=events, snapshot_rows=snapshot,
                                topic_prefix=stream, seed=len(stream) + events + part)
    sent = time.perf_counter()
    summary = Simulation(options, KinesisTransport(cfg.aws, shards=shards),
                         TruthStore(home / f"{stream}-{part}.db"), None).run(progress=False)
    records = summary.messages_acknowledged
    print(f"  produced {records:,} records to {stream} ({shards} shards) in {time.perf_counter() - sent:.1f} s",
          flush=True)
    return records


def measure(cfg: PipelineConfig, spark, home: Path, shards: int, events: int, warmup: int, rounds: int) -> Run:
    stream = f"bench{uuid.uuid4().hex[:6]}"
    table = f"{cfg.catalog.name}.{cfg.changelog.namespace}.{stream}_employee"
    warm = 0
    for round_ in range(rounds):
        warm += produce(cfg, home, stream, shards, warmup, min(warmup, 5_000) if round_ == 0 else 0, round_)
        time_stage(cfg, spark, stream, home)
    _, _, after = raw_get_records(cfg, stream, {})
    records = produce(cfg, home, stream, shards, events, 0, rounds)
    moto = " ".join(Moto(cfg).command()[2:])  # the stack moto's module and arguments, after `python -m`
    jvm = spark._jvm.ProcessHandle.current().pid()
    before = Snapshot.take(moto, None)
    raw_records, raw_s, _ = raw_get_records(cfg, stream, after)
    raw_cpu = Snapshot.take(moto, None) - before
    assert raw_records == records, f"GetRecords read {raw_records} of {records} records"
    before = Snapshot.take(moto, jvm)
    stage = time_stage(cfg, spark, stream, home)
    stage_cpu = Snapshot.take(moto, jvm) - before
    landed = spark.table(table).count()
    assert landed == warm + records, f"the stage landed {landed - warm} of {records} records"
    run = Run(shards, records, raw_s, stage)
    steady, whole = stage.steady_s, stage.end_to_end_s
    print(f"{shards} shard(s), {records:,} records: raw GetRecords {run.rate(raw_s):,.0f} records/s ({raw_s:.1f} s); "
          f"stage steady state {run.rate(steady):,.0f} records/s ({steady:.1f} s in {len(stage.batches)} batches: "
          f"{', '.join(f'{s:.1f}' for s in stage.batches)}), {run.ratio(steady):.2f}x; "
          f"end to end {run.rate(whole):,.0f} records/s ({whole:.1f} s), {run.ratio(whole):.2f}x "
          f"(before the first batch {stage.before_s:.1f} s, after the last {stage.after_s:.1f} s)", flush=True)
    print(f"  CPU: raw {raw_cpu.service + raw_cpu.own:.1f} s (moto {raw_cpu.service:.1f}, "
          f"its readers {raw_cpu.own:.1f}); "
          f"the stage's run {stage_cpu.service + stage_cpu.jvm + stage_cpu.workers + stage_cpu.own:.1f} s "
          f"({stage_cpu.describe('moto')})", flush=True)
    return run


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000, help="changes in the 4-shard (target) run")
    parser.add_argument("--scaling-events", type=int, default=50_000, help="changes in the 1- and 8-shard runs")
    parser.add_argument("--warmup", type=int, default=5_000, help="changes landed untimed first, in each stream")
    parser.add_argument("--warmup-rounds", type=int, default=2, help="warm-up rounds (the first learns row types)")
    parser.add_argument("--shards", default=",".join(map(str, SHARD_COUNTS)), help="the shard counts to run")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="a setting, section.key=value")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    logs.configure("WARNING")
    home = Path(tempfile.mkdtemp(prefix="bench-kinesis-"))
    cfg = load_config(overrides=[f"home={home}", *SETTINGS, *args.overrides], environ={})
    stack = Stack(cfg, only=["moto"])
    started = stack.up()
    try:
        print(f"load before: {os.getloadavg()[0]:.2f} (1 min average, {os.cpu_count()} CPUs)", flush=True)
        spark = get_spark(cfg)
        runs = {shards: measure(cfg, spark, home, shards,
                                args.events if shards == TARGET_SHARDS else args.scaling_events, args.warmup,
                                args.warmup_rounds)
                for shards in map(int, args.shards.split(","))}
    finally:
        if started:
            stack.down()
        shutil.rmtree(home, ignore_errors=True)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min average)")
    if TARGET_SHARDS not in runs:
        return
    target = runs[TARGET_SHARDS]
    steady, whole = target.stage.steady_s, target.stage.end_to_end_s
    print(f"end to end (the query started from its checkpoint, the last empty trigger): "
          f"{target.rate(whole):.0f} records/s, {target.ratio(whole):.2f}x raw GetRecords")
    print(f"kinesis: {target.rate(steady):.0f} records/s, {target.ratio(steady):.2f}x raw GetRecords")


if __name__ == "__main__":
    main()
