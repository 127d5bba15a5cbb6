"""How fast new files are found in a big bucket: the `s3-sqs` source (SQS notifications) against Spark's built-in
file stream source (directory listing), in one run, with 1k, 10k and 100k files already there.

For each size: a bucket on a throw-away moto server (the bench ports of bench/stack.py) holds N existing files
under `data/`, its notifications going to an SQS queue. Each query is started alone and left to finish its
first trigger; then 100 new files are written to `data/` and the time from the first write until every one of
their rows has been read is measured. Both read the same bucket over the same moto: the s3-sqs source learns
of the files from SQS, the file stream source lists `s3a://<bucket>/data/` through S3A (with a glob on the new
files' names, so it reads only them, but lists every object each trigger).

The s3-sqs source runs with its defaults (long polls of 10 s, at most 100 files per trigger); the bench gives
it only what it needs: the format, the queue, the endpoint and a checkpoint. Both queries trigger back to back
(processingTime 0). Prints one line per size (with the load average: the machine may be shared) and ends with
a summary line. Usage: bench/s3_sqs.py [--sizes 1000,10000,100000]

Reading the figures: moto answers a listing page in about half a second whatever the bucket's size, several
times slower than S3, so listing here costs more than on S3 (the bench prints one boto3 listing per size for
scale). Each query's first batch with rows starts Spark's Python workers afresh (Spark keeps idle ones for a
minute, and filling the bucket takes longer), so the first figure includes that start, as a query that had
been idle for a minute would; a second round of 100 files right after is measured too (warm: a busy query).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402

from bench.stack import SETTINGS  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.sources import register  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.stack import Stack  # noqa: E402
from simulators.s3_files import ensure_notified_bucket  # noqa: E402

NEW_FILES = 100
PUT_THREADS = 16
SCHEMA = "id bigint"
DEADLINE_S = 900


class RowCounter:
    """Rows seen by a query's batches, and a way to wait for a count."""

    def __init__(self) -> None:
        self.rows = 0
        self._changed = threading.Condition()

    def add(self, frame: Any, _batch_id: int) -> None:
        seen = frame.count()
        with self._changed:
            self.rows += seen
            self._changed.notify_all()

    def wait_for(self, rows: int) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self.rows >= rows, timeout=DEADLINE_S):
                raise TimeoutError(f"only {self.rows} of {rows} rows arrived in {DEADLINE_S} s")


def put_many(s3: Any, bucket: str, keys: list[str], label: str) -> None:
    started, done = time.perf_counter(), 0
    with ThreadPoolExecutor(PUT_THREADS) as pool:
        for _ in pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=b'{"id": 1}\n'), keys):
            done += 1
            if done % 10_000 == 0 or done == len(keys):
                seconds = time.perf_counter() - started
                print(f"  {label}: {done:,} objects in {seconds:.0f} s ({done / seconds:,.0f}/s)", flush=True)


def timed_arrival(label: str, start: Callable[[RowCounter], Any], write: Callable[[str], None]) -> tuple[float, float]:
    """Start a query alone and let it finish its first trigger (reading nothing yet); then the seconds from the
    first new file written until it has read the rows of all of them: once (the query's first batch with rows),
    and once more right after (a busy query: Spark's Python workers and connections warm)."""
    counter = RowCounter()
    query = start(counter)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not query.recentProgress:
            if time.monotonic() > deadline or query.exception():
                raise TimeoutError(f"the query did not start: {query.exception()}")
            time.sleep(0.2)
        figures = []
        for round_ in ("a", "b"):
            seen, batches_before = counter.rows, len(query.recentProgress)
            started = time.perf_counter()
            write(round_)
            counter.wait_for(seen + NEW_FILES)
            figures.append(time.perf_counter() - started)
            time.sleep(0.5)  # let the last batch's progress be reported
            batches = [p["durationMs"] for p in query.recentProgress[batches_before:] if p["numInputRows"]]
            spent = {phase: sum(b.get(phase, 0) for b in batches) / 1000 for phase in ("latestOffset", "addBatch")}
            print(f"  {label} ({'first batch' if round_ == 'a' else 'warm'}): {figures[-1]:.1f} s; {len(batches)} "
                  f"batch(es) with rows, finding files (latestOffset) {spent['latestOffset']:.1f} s, reading them "
                  f"(addBatch) {spent['addBatch']:.1f} s", flush=True)
        return figures[0], figures[1]
    finally:
        query.stop()


def load() -> str:
    return "load " + "/".join(f"{n:.1f}" for n in os.getloadavg())


def measure(cfg: PipelineConfig, spark: Any, size: int, work: Path) -> tuple[tuple[float, float], tuple[float, float]]:
    s3 = boto3.client("s3", config=Config(max_pool_connections=PUT_THREADS), **cfg.aws.boto3_kwargs())
    bucket = f"bench-{size}"
    s3.create_bucket(Bucket=bucket)
    put_many(s3, bucket, [f"data/old-{n:06d}.json" for n in range(size)], f"bucket of {size:,}")
    queue_url = ensure_notified_bucket(cfg.aws, bucket, bucket)  # notifications from now on: new files only
    # What one listing of the bucket costs this S3 (moto: each page's cost grows with the bucket; on S3 it is flat)
    started, pages = time.perf_counter(), 0
    for _ in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="data/"):
        pages += 1
    listed = time.perf_counter() - started
    print(f"  one boto3 listing of the bucket: {pages} pages in {listed:.1f} s ({listed / pages * 1000:.0f} ms a page)",
          flush=True)

    def sqs_query(counter: RowCounter) -> Any:
        checkpoint = str(work / f"sqs-{size}")
        return (spark.readStream.format("s3-sqs").schema(SCHEMA).option("fileFormat", "json")
                .option("queueUrl", queue_url).option("queueRegion", cfg.aws.region)
                .option("endpointUrl", str(cfg.aws.endpoint_url)).option("checkpointLocation", checkpoint)
                .load().writeStream.foreachBatch(counter.add).option("checkpointLocation", checkpoint)
                .trigger(processingTime="0 seconds").start())

    def listing_query(counter: RowCounter) -> Any:
        return (spark.readStream.schema(SCHEMA).option("pathGlobFilter", "ls-new-*.json")
                .json(f"s3a://{bucket}/data/")
                .writeStream.foreachBatch(counter.add).option("checkpointLocation", str(work / f"ls-{size}"))
                .trigger(processingTime="0 seconds").start())

    sqs = timed_arrival("s3-sqs", sqs_query, lambda round_: put_many(
        s3, bucket, [f"data/sqs-new-{round_}{n:03d}.json" for n in range(NEW_FILES)], "new"))
    listing = timed_arrival("listing", listing_query, lambda round_: put_many(
        s3, bucket, [f"data/ls-new-{round_}{n:03d}.json" for n in range(NEW_FILES)], "new"))
    return sqs, listing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000", help="existing files per bucket, comma-separated")
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    logs.configure("WARNING")
    work = Path(tempfile.mkdtemp(prefix="bench-s3sqs-"))
    cfg = load_config(overrides=[f"home={work / 'home'}", *SETTINGS, "spark.master=local[2]"], environ={})
    stack = Stack(cfg, ["moto"])
    stack.up()
    results: dict[int, tuple[tuple[float, float], tuple[float, float]]] = {}
    try:
        spark = get_spark(cfg)
        register(spark)
        for size in sizes:
            (sqs, sqs_warm), (listing, listing_warm) = results[size] = measure(cfg, spark, size, work)
            print(f"{size:>8,} files: s3-sqs {sqs:6.1f} s, listing {listing:6.1f} s ({listing / sqs:5.1f}x); warm: "
                  f"s3-sqs {sqs_warm:6.1f} s, listing {listing_warm:6.1f} s ({listing_warm / sqs_warm:5.1f}x); {load()}",
                  flush=True)
    finally:
        stack.down()
        shutil.rmtree(work, ignore_errors=True)
    largest = max(results)
    (sqs, sqs_warm), (listing, listing_warm) = results[largest]
    print(f"s3-sqs: {sqs:.1f} s at {largest:,} files, {listing / sqs:.0f}x faster than listing "
          f"(warm: {sqs_warm:.1f} s, {listing_warm / sqs_warm:.0f}x; {load()})")


if __name__ == "__main__":
    main()
