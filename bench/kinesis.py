"""Kinesis changelog throughput: DMS JSON drained from a 4-shard stream into Iceberg, against the raw GetRecords
rate of the same local service measured in the same run (the service is the ceiling here).

1. The simulator (`--to kinesis`, DMS JSON of the `employee` table) writes `--events` changes to a new
   4-shard stream of a throw-away moto server on the bench ports.
2. Raw: boto3 GetRecords (10,000 records a call) over the four shards from TRIM_HORIZON until caught up.
3. The stage (`ChangelogStage(...).run(until_caught_up=True)`, `changelog.source = "kinesis"`) drains the
   stream into its changelog table.

Usage: bench/kinesis.py [--events 50000] [--set k=v ...]
Ends with: `kinesis: <records/s> records/s, <ratio>x raw GetRecords`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.stack import SETTINGS  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.stages.changelog import ChangelogStage  # noqa: E402
from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.stages.changelog.transports.kinesis import client_options_for  # noqa: E402
from pipeline.sources.kinesis.client import Kinesis  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.stack import Stack  # noqa: E402
from simulators.kinesis import KinesisTransport  # noqa: E402
from simulators.simulation import Simulation, SimulationOptions  # noqa: E402
from simulators.truth import TruthStore  # noqa: E402

SHARDS = 4


def raw_get_records(cfg: PipelineConfig, stream: str) -> tuple[int, float]:
    """Records read and seconds taken by plain GetRecords calls over every shard, until each is caught up."""
    kinesis = Kinesis(client_options_for(cfg.aws))
    started, records = time.perf_counter(), 0
    for shard in kinesis.call("list_shards", StreamName=stream)["Shards"]:
        iterator = kinesis.call("get_shard_iterator", StreamName=stream, ShardId=shard["ShardId"],
                                ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while True:
            response = kinesis.call("get_records", ShardIterator=iterator, Limit=10_000)
            records += len(response["Records"])
            iterator = response["NextShardIterator"]
            if not response["Records"] and not response.get("MillisBehindLatest"):
                break
    return records, time.perf_counter() - started


def time_stage(cfg: PipelineConfig, spark, stream: str, home: Path) -> float:
    changelog = cfg.changelog.model_copy(update={"source": "kinesis", "checkpoint": str(home / "checkpoint")})
    kinesis = cfg.kinesis.model_copy(update={"streams": [stream], "fetch_interval_ms": 0})
    stage = ChangelogStage(cfg.model_copy(update={"changelog": changelog, "kinesis": kinesis}), spark)
    started = time.perf_counter()
    stage.run(until_caught_up=True)
    return time.perf_counter() - started


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=50_000, help="changes to simulate into the stream")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="a setting, section.key=value")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    logs.configure("INFO")  # the stage's progress line per batch
    home = Path(tempfile.mkdtemp(prefix="bench-kinesis-"))
    cfg = load_config(overrides=[f"home={home}", *SETTINGS, *args.overrides], environ={})
    stack = Stack(cfg, only=["moto"])
    started = stack.up()
    try:
        print(f"load before: {os.getloadavg()[0]:.2f} (1 min average, {os.cpu_count()} CPUs)", flush=True)
        stream = f"bench{uuid.uuid4().hex[:6]}"
        options = SimulationOptions(format="dms-json", tables="employees", events=args.events, snapshot_rows=5_000,
                                    topic_prefix=stream)
        sent = time.perf_counter()
        summary = Simulation(options, KinesisTransport(cfg.aws, shards=SHARDS), TruthStore(home / "truth.db"),
                             None).run(progress=True)
        records = summary.messages_acknowledged
        print(f"  produced {records:,} records to {stream} ({SHARDS} shards) in {time.perf_counter() - sent:.1f} s")
        raw_records, raw_s = raw_get_records(cfg, stream)
        assert raw_records == records, f"GetRecords read {raw_records} of {records} records"
        spark = get_spark(cfg)
        print("stage: draining ...", flush=True)
        stage_s = time_stage(cfg, spark, stream, home)
        landed = spark.table(f"{cfg.catalog.name}.{cfg.changelog.namespace}.{stream}_employee").count()
        assert landed == records, f"the stage landed {landed} of {records} records"
    finally:
        if started:
            stack.down()
        shutil.rmtree(home, ignore_errors=True)
    stage_rate, raw_rate = records / stage_s, raw_records / raw_s
    print(f"stage      {stage_rate:12,.0f} records/s  ({records:,} records, {stage_s:.1f} s)")
    print(f"raw        {raw_rate:12,.0f} records/s  ({raw_records:,} records, {raw_s:.1f} s of GetRecords)")
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min average)")
    print(f"kinesis: {stage_rate:.0f} records/s, {stage_rate / raw_rate:.2f}x raw GetRecords")


if __name__ == "__main__":
    main()
