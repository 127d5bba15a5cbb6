"""Kinesis changelog throughput: DMS JSON drained from a stream into Iceberg by the changelog stage, against the
raw GetRecords rate of the same stream on the same local service, measured in the same run.

First an untimed run of `--warmup` changes (Spark's first Python data source read, table creation and the
Python worker daemon's start are paid once per session, not per batch), then for each shard count (1, 4 and 8;
the 4-shard run is the target):
1. The simulator (`--to kinesis`, DMS JSON of the `employee` table) writes `--events` changes to a new stream
   of a throw-away moto server on the bench ports.
2. Raw: boto3 GetRecords (10,000 records a call), one reader thread per shard (the parallelism the source gets:
   one partition per shard), from TRIM_HORIZON until every shard is caught up.
3. The stage (`ChangelogStage(...).run(until_caught_up=True)`, `changelog.source = "kinesis"`) drains the
   stream into its changelog table; the time includes starting the streaming query and the final trigger that
   finds nothing new.

Usage: bench/kinesis.py [--events 200000] [--scaling-events 50000] [--warmup 5000] [--set k=v ...]
(`--scaling-events`: the 1- and 8-shard runs, which show the scaling, not the target.)
Ends with: `kinesis: <records/s> records/s, <ratio>x raw GetRecords` (the 4-shard run).
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.stack import SETTINGS  # noqa: E402
from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.sources.kinesis.client import Kinesis  # noqa: E402
from pipeline.stack import Stack  # noqa: E402
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
    stage_s: float

    @property
    def raw_rate(self) -> float:
        return self.records / self.raw_s

    @property
    def stage_rate(self) -> float:
        return self.records / self.stage_s


def read_shard(cfg: PipelineConfig, stream: str, shard_id: str) -> int:
    """GetRecords on one shard from TRIM_HORIZON until caught up; the records read."""
    kinesis, records = Kinesis(client_options_for(cfg.aws)), 0
    iterator = kinesis.call("get_shard_iterator", StreamName=stream, ShardId=shard_id,
                            ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    while True:
        response = kinesis.call("get_records", ShardIterator=iterator, Limit=10_000)
        records += len(response["Records"])
        iterator = response["NextShardIterator"]
        if not response["Records"] and not response.get("MillisBehindLatest"):
            return records


def raw_get_records(cfg: PipelineConfig, stream: str) -> tuple[int, float]:
    """Records read and seconds taken by plain GetRecords calls, one thread per shard."""
    shards = [s["ShardId"] for s in Kinesis(client_options_for(cfg.aws)).call("list_shards", StreamName=stream)["Shards"]]
    started = time.perf_counter()
    with ThreadPoolExecutor(len(shards)) as pool:
        records = sum(pool.map(lambda shard: read_shard(cfg, stream, shard), shards))
    return records, time.perf_counter() - started


def time_stage(cfg: PipelineConfig, spark, stream: str, home: Path) -> float:
    changelog = cfg.changelog.model_copy(update={"source": "kinesis", "checkpoint": str(home / f"checkpoint-{stream}")})
    kinesis = cfg.kinesis.model_copy(update={"streams": [stream], "fetch_interval_ms": 0})
    stage = ChangelogStage(cfg.model_copy(update={"changelog": changelog, "kinesis": kinesis}), spark)
    started = time.perf_counter()
    stage.run(until_caught_up=True)
    return time.perf_counter() - started


def produce(cfg: PipelineConfig, home: Path, shards: int, events: int) -> tuple[str, int]:
    """A new stream of `shards` shards holding `events` simulated DMS JSON changes; its name and record count."""
    stream = f"bench{uuid.uuid4().hex[:6]}"
    options = SimulationOptions(format="dms-json", tables="employees", events=events, snapshot_rows=5_000,
                                topic_prefix=stream)
    sent = time.perf_counter()
    summary = Simulation(options, KinesisTransport(cfg.aws, shards=shards), TruthStore(home / f"{stream}.db"),
                         None).run(progress=False)
    records = summary.messages_acknowledged
    print(f"  produced {records:,} records to {stream} ({shards} shards) in {time.perf_counter() - sent:.1f} s",
          flush=True)
    return stream, records


def measure(cfg: PipelineConfig, spark, home: Path, shards: int, events: int) -> Run:
    stream, records = produce(cfg, home, shards, events)
    raw_records, raw_s = raw_get_records(cfg, stream)
    assert raw_records == records, f"GetRecords read {raw_records} of {records} records"
    stage_s = time_stage(cfg, spark, stream, home)
    landed = spark.table(f"{cfg.catalog.name}.{cfg.changelog.namespace}.{stream}_employee").count()
    assert landed == records, f"the stage landed {landed} of {records} records"
    run = Run(shards, records, raw_s, stage_s)
    print(f"{shards} shard(s): stage {run.stage_rate:9,.0f} records/s ({stage_s:.1f} s), raw GetRecords "
          f"{run.raw_rate:9,.0f} records/s ({raw_s:.1f} s), {run.stage_rate / run.raw_rate:.2f}x", flush=True)
    return run


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000, help="changes in the 4-shard (target) run")
    parser.add_argument("--scaling-events", type=int, default=50_000, help="changes in the 1- and 8-shard runs")
    parser.add_argument("--warmup", type=int, default=5_000, help="changes of the untimed first run")
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
        if args.warmup:
            time_stage(cfg, spark, produce(cfg, home, TARGET_SHARDS, args.warmup)[0], home)
        runs = {shards: measure(cfg, spark, home, shards, args.events if shards == TARGET_SHARDS else args.scaling_events)
                for shards in SHARD_COUNTS}
    finally:
        if started:
            stack.down()
        shutil.rmtree(home, ignore_errors=True)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min average)")
    target = runs[TARGET_SHARDS]
    print(f"kinesis: {target.stage_rate:.0f} records/s, {target.stage_rate / target.raw_rate:.2f}x raw GetRecords")


if __name__ == "__main__":
    main()
