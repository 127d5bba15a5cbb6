"""How fast new files are found in a big bucket: the `s3-sqs` source (SQS notifications) against Spark's built-in
file stream source (directory listing), in one run, with 1k, 10k and 100k files already there.

For each size: a bucket (on a throw-away moto server on the bench ports of bench/stack.py) and a local folder
both hold N existing files; both queries are started and idle; then 100 new files are written and the time until
every one of their rows has been read is measured. The pinned jars have no S3A file system, so the listing
source lists a local folder: local listing is far cheaper than S3 listing, which flatters listing.
Prints one line per size and ends with a summary line. Usage: bench/s3_sqs.py [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
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

from bench.stack import SETTINGS  # noqa: E402
from pipeline import logs  # noqa: E402
from pipeline.config import PipelineConfig, load_config  # noqa: E402
from pipeline.sources import register  # noqa: E402
from pipeline.spark import get_spark  # noqa: E402
from pipeline.stack import Stack  # noqa: E402
from simulators.s3_files import ensure_notified_bucket  # noqa: E402

NEW_FILES = 100
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
    with ThreadPoolExecutor(16) as pool:
        for _ in pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=b'{"id": 1}\n'), keys):
            done += 1
            if done % 10_000 == 0 or done == len(keys):
                seconds = time.perf_counter() - started
                print(f"  {label}: {done:,} objects in {seconds:.0f} s ({done / seconds:,.0f}/s)", flush=True)


def timed_arrival(start: Callable[[RowCounter], Any], write: Callable[[], None]) -> float:
    """Start a query alone and let it finish its first trigger (reading nothing yet); then the seconds from the
    first new file written until it has read the rows of all of them."""
    counter = RowCounter()
    query = start(counter)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not query.recentProgress:
            if time.monotonic() > deadline or query.exception():
                raise TimeoutError(f"the query did not start: {query.exception()}")
            time.sleep(0.2)
        started = time.perf_counter()
        write()
        counter.wait_for(NEW_FILES)
        return time.perf_counter() - started
    finally:
        query.stop()


def measure(cfg: PipelineConfig, spark: Any, size: int, work: Path) -> tuple[float, float]:
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    bucket = f"bench-{size}"
    s3.create_bucket(Bucket=bucket)
    put_many(s3, bucket, [f"data/old-{n:06d}.json" for n in range(size)], f"bucket of {size:,}")
    queue_url = ensure_notified_bucket(cfg.aws, bucket, bucket)  # notifications from now on: new files only
    folder = work / f"listing-{size}"
    folder.mkdir()
    for n in range(size):
        (folder / f"old-{n:06d}.json").write_text('{"id": 1}\n')

    def sqs_query(counter: RowCounter) -> Any:
        options = {"fileFormat": "json", "queueUrl": queue_url, "queueRegion": cfg.aws.region,
                   "endpointUrl": str(cfg.aws.endpoint_url), "checkpointLocation": str(work / f"sqs-{size}"),
                   "maxFilesPerTrigger": "-1", "sqs.longPollingWaitTimeSeconds": "1", "queueFetchWaitTimeoutSeconds": "1"}
        return (spark.readStream.format("s3-sqs").schema(SCHEMA).options(**options).load().writeStream
                .foreachBatch(counter.add).option("checkpointLocation", options["checkpointLocation"])
                .trigger(processingTime="0 seconds").start())

    def listing_query(counter: RowCounter) -> Any:
        return (spark.readStream.schema(SCHEMA).option("pathGlobFilter", "new-*.json").json(str(folder))
                .writeStream.foreachBatch(counter.add).option("checkpointLocation", str(work / f"ls-{size}"))
                .trigger(processingTime="0 seconds").start())

    new_keys = [f"data/new-{n:03d}.json" for n in range(NEW_FILES)]
    sqs = timed_arrival(sqs_query, lambda: put_many(s3, bucket, new_keys, "new"))
    listing = timed_arrival(listing_query, lambda: [(folder / f"new-{n:03d}.json").write_text('{"id": 2}\n')
                                                    for n in range(NEW_FILES)])
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
    results: dict[int, tuple[float, float]] = {}
    try:
        spark = get_spark(cfg)
        register(spark)
        for size in sizes:
            sqs, listing = results[size] = measure(cfg, spark, size, work)
            print(f"{size:>8,} files: s3-sqs {sqs:6.1f} s, listing {listing:6.1f} s ({listing / sqs:5.1f}x)", flush=True)
    finally:
        stack.down()
        shutil.rmtree(work, ignore_errors=True)
    largest = max(results)
    sqs, listing = results[largest]
    print(f"s3-sqs: {sqs:.1f} s at {largest:,} files, {listing / sqs:.0f}x faster than listing")


if __name__ == "__main__":
    main()
