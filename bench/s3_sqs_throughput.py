"""How fast a batch of many DMS Parquet files lands: `changelog --source s3-sqs` against plain Spark, in one run.

Two cases, each 100 files of 10k rows (1M changes): of one table, and of 10 tables (10 files each). The files are
DMS CDC files (`Op`, `dms_commit_ts`, then the row: a bigint key, two strings, a double, a boolean) written to a
bucket on a throw-away moto server (the bench ports of bench/stack.py) whose notifications go to SQS.

- stage: `ChangelogStage.run(until_caught_up=True)` over a fresh checkpoint, with no `maxFilesPerTrigger` limit,
  so the files are one batch (or two, when the first poll missed some); the figure is the batch's own time (`BatchReport.seconds`: listing the files,
  reading, decoding, normalising and appending them), without the query's start and the drain's last poll
  (printed apart, as `run`).
- baseline: for each table, `spark.read.parquet` over the same files -> a new Iceberg table (`writeTo.create`),
  one after the other, in the same session.

Prints one line per case (with the load average: the machine may be shared) and ends with a summary line.
Usage: bench/s3_sqs_throughput.py [--files 100] [--rows 10000]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import boto3  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from botocore.config import Config  # noqa: E402

from bench.stack import SETTINGS  # noqa: E402
from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.stack import Stack  # noqa: E402
from pipeline.stages.changelog import ChangelogStage  # noqa: E402
from simulators.s3_files import ensure_notified_bucket  # noqa: E402

PUT_THREADS = 16
START = datetime(2026, 1, 1)


def dms_file(table: int, number: int, rows: int) -> bytes:
    """One DMS CDC file: inserts of keys unique across the run, commit times one millisecond apart."""
    first = number * rows
    keys = pa.array(range(first, first + rows), pa.int64())
    data = pa.table({
        "Op": pa.array(["I"] * rows),
        "dms_commit_ts": pa.array([START + timedelta(milliseconds=first + i) for i in range(rows)],
                                  pa.timestamp("us")),
        "id": keys, "name": pa.array([f"name {k}" for k in keys.to_pylist()]),
        "city": pa.array([f"city {k % 97}" for k in keys.to_pylist()]),
        "amount": pa.array([k * 0.25 for k in keys.to_pylist()], pa.float64()),
        "active": pa.array([k % 2 == 0 for k in keys.to_pylist()]),
    })
    out = io.BytesIO()
    pq.write_table(data, out)
    return out.getvalue()


def load() -> str:
    return "load " + "/".join(f"{n:.1f}" for n in os.getloadavg())


def case(cfg: PipelineConfig, spark: Any, label: str, tables: int, files: int, rows: int, work: Path
         ) -> tuple[float, float, int]:
    """(stage seconds, baseline seconds, rows) for `files` files spread over `tables` tables."""
    bucket = f"tp-{label}"
    s3 = boto3.client("s3", config=Config(max_pool_connections=PUT_THREADS), **cfg.aws.boto3_kwargs())
    queue_url = ensure_notified_bucket(cfg.aws, bucket, bucket)
    keys = [f"{bucket}/public/t{n % tables}/20260101-{n:09d}.parquet" for n in range(files)]
    with ThreadPoolExecutor(PUT_THREADS) as pool:
        list(pool.map(lambda n: s3.put_object(Bucket=bucket, Key=keys[n], Body=dms_file(n % tables, n, rows)),
                      range(files)))
    print(f"  {label}: {files} files of {rows:,} rows written", flush=True)

    stage_cfg = cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"source": "s3-sqs", "checkpoint": str(work / label)}),
        "dms_files": cfg.dms_files.model_copy(update={
            "bucket": bucket, "queue": bucket, "queue_url": queue_url, "long_polling_wait_s": 2,
            "max_files_per_trigger": -1, "options": {"queueFetchWaitTimeoutSeconds": "4"}})})
    stage = ChangelogStage(stage_cfg, spark)
    started = time.perf_counter()
    stage.run(until_caught_up=True)
    run_s = time.perf_counter() - started
    batches = [r for r in stage.reports if r.rows_in]
    stage_s, landed = sum(r.seconds for r in batches), sum(r.rows_in for r in batches)
    if landed != files * rows:
        raise RuntimeError(f"the stage landed {landed} of {files * rows} rows")

    started = time.perf_counter()
    for table in range(tables):
        paths = [f"s3://{bucket}/{key}" for key in keys if f"/t{table}/" in key]
        (spark.read.parquet(*paths).writeTo(f"{cfg.catalog.name}.baseline.{label.replace('-', '_')}_t{table}")
         .using("iceberg").create())
    baseline_s = time.perf_counter() - started
    print(f"  {label}: stage batch {stage_s:.1f} s in {len(batches)} batch(es) "
          f"({', '.join(f'{r.rows_in:,} rows {r.seconds:.1f} s' for r in batches)}; run {run_s:.1f} s with the "
          f"query's start and drain), baseline {baseline_s:.1f} s", flush=True)
    return stage_s, baseline_s, landed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    logs.configure("WARNING")
    work = Path(tempfile.mkdtemp(prefix="bench-s3sqs-tp-"))
    cfg = load_config(overrides=[f"home={work / 'home'}", *SETTINGS, "spark.master=local[2]"], environ={})
    stack = Stack(cfg, ["moto"])
    stack.up()
    ratios = {}
    try:
        spark = get_spark(cfg)
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.baseline")
        for label, tables in (("one-table", 1), ("ten-tables", 10)):
            stage_s, baseline_s, rows = case(cfg, spark, label, tables, args.files, args.rows, work)
            ratios[label] = baseline_s / stage_s
            print(f"{label:>10}: stage {rows / stage_s:,.0f} rows/s, baseline {rows / baseline_s:,.0f} rows/s "
                  f"({ratios[label]:.2f}x); {load()}", flush=True)
    finally:
        stack.down()
        shutil.rmtree(work, ignore_errors=True)
    print(f"s3-sqs throughput: {ratios['one-table']:.2f}x baseline one table, {ratios['ten-tables']:.2f}x ten "
          f"tables ({args.files} files x {args.rows:,} rows; {load()})")


if __name__ == "__main__":
    main()
