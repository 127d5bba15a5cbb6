"""Query latency on a 10M-row mirror and its changelog: a point lookup by key on the current-state view, the
`history` of one key, and `state --as-of-source` for one key; the target is <= 3 s each on 2 cores.

The tables are built as bench/mirror.py builds them (its synthetic changes: a 10M-row load, then 100k changes
merged), in a throw-away folder; needs no services. The queries run right after that merge, before any
maintenance: with the default (pending) layout the lookup reads the mirror's base and its 100k pending changes
through the `_current` view's overlay. The mirror is bucketed by its key (`--partition-by`, as a
data engineer configures a mirror that serves lookups; '' for none), so a lookup reads one bucket. Each query
runs three times (the first pays for planning and cold caches); the figure is the median.
Usage: bench/query.py [--rows 10000000] [--partition-by "bucket(16, artist_id)"] [--set k=v ...]
Ends with: `query: point lookup <s> s, history <s> s, state as of source <s> s on <rows> rows (target 3 s)`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.mirror import PARTITION_BY, TABLE, changes  # noqa: E402
from pipeline.config.settings import load_config  # noqa: E402
from pipeline.ops import timetravel  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.stages.mirror import MirrorStage  # noqa: E402
from tables.append import IcebergAppender  # noqa: E402

RUNS = 3
UPDATES = 100_000


def changelog_rows(spark, count: int, batch: int, live_keys: int, first_new_key: int):
    """bench/mirror.py's changes with the transport columns the changelog stage adds (`history` reads them)."""
    from pyspark.sql import functions as F

    transport = F.struct(F.lit("bench").alias("topic"), F.col("_seq.transport_offset").alias("offset"))
    return (changes(spark, count, batch, live_keys, first_new_key)
            .withColumn("_transport", transport).withColumn("_ingested_at", F.current_timestamp()))


def median_seconds(label: str, action) -> float:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        rows = action()
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    print(f"{label:<40} {median:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times)}; {rows} rows)", flush=True)
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--partition-by", default=PARTITION_BY, help="the mirror's partition fields")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logs.configure("WARNING")
    with tempfile.TemporaryDirectory(prefix="bench-query-") as home:
        cfg = load_config(overrides=[f"home={home}", f"jars={REPO / '.pipeline' / 'jars'}",
                                     f"mirror.keys.{TABLE}=artist_id", f"mirror.tables={TABLE}",
                                     f"mirror.partition_by.{TABLE}={args.partition_by}", *args.overrides])
        spark = get_spark(cfg)
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{cfg.changelog.namespace}")
        appender = IcebergAppender(spark, f"{cfg.catalog.name}.{cfg.changelog.namespace}")
        stage = MirrorStage(cfg, spark)
        started = time.perf_counter()
        appender.append(changelog_rows(spark, args.rows, 0, 0, 0), TABLE, "bench", 0)
        stage.merge_table(TABLE)
        appender.append(changelog_rows(spark, UPDATES, 1, args.rows, args.rows), TABLE, "bench", 1)
        stage.merge_table(TABLE)
        print(f"query bench: {args.rows:,}-row mirror (partitioned by {args.partition_by or 'nothing'}, layout "
              f"{cfg.mirror.layout}) + {UPDATES:,} changes built in {time.perf_counter() - started:.0f} s, "
              f"master {spark.sparkContext.master}", flush=True)

        # A key the second batch changed, so its history has more than the initial load.
        key = spark.sql(f"SELECT artist_id FROM {cfg.catalog.name}.{cfg.changelog.namespace}.{TABLE} "
                        "WHERE _batch_id = 1 AND _op = 'u' LIMIT 1").first()["artist_id"]
        view = f"{cfg.catalog.name}.{cfg.mirror.namespace}.{TABLE}{cfg.mirror.view_suffix}"
        between = "2026-09-21 14:30:00"  # after the load (batch 0), before batch 1's source time
        lookup = median_seconds(f"point lookup on {TABLE}{cfg.mirror.view_suffix}", lambda: len(
            spark.sql(f"SELECT * FROM {view} WHERE artist_id = {key}").collect()))
        history = median_seconds(f"history of artist_id {key}", lambda: len(
            timetravel.history(cfg, spark, TABLE, str(key)).collect()))
        state = median_seconds(f"state as of source {between}, one key", lambda: len(
            timetravel.state(cfg, spark, TABLE, between, str(key)).collect()))
        spark.stop()
    print(f"query: point lookup {lookup:.2f} s, history {history:.2f} s, state as of source {state:.2f} s "
          f"on {args.rows:,} rows (target 3 s)")


if __name__ == "__main__":
    main()
