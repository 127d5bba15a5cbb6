"""Query latency on a 10M-row mirror and its changelog, in Spark and in Trino (Athena's engine) on the same
tables: a point lookup by key on the current-state view, one key's history (its changelog rows), and a
`count(*)` grouped by a column of the current state; right after a merge (the pending changes overlaid by the
view) and again after `maintain` (folded in). `state --as-of-source` for one key is Spark's alone. Target: <= 3 s
each on 2 cores, and Trino <= 1.5x Spark.

The tables are built as bench/mirror.py builds them (its synthetic changes: a 10M-row load, then 100k changes
merged) in Glue mode, as Athena reads a lake, on a throw-away moto (Glue and S3) and Trino of their own ports and
folder (Trino needs a Java 24+, found as `stack up --with trino` finds it); a running demo or test stack is
untouched. The queries run right after that merge: with the default (pending) layout the lookup reads the
mirror's base and its 100k pending changes through the `_current` view's overlay. Each engine runs the same
query: the view's SQL inlined, in Spark's dialect and, through sqlglot, in Athena's, as `athena-ddl` prints
views. The mirror is bucketed by its key (`--partition-by`, as a data engineer configures a mirror that serves
lookups; '' for none), so a lookup reads one bucket. Each query runs five
times: the first two warm the engine up (planning, cold caches, and the JIT compiling the query's code: Athena's
engine is a long-running service, the bench's Trino a process started minutes before), and the figure is the
median of the other three; all five are printed.
Usage: bench/query.py [--rows 10000000] [--partition-by "bucket(16, artist_id)"] [--set k=v ...]
Ends with: `query: trino <s> s / spark <s> s (point lookup, after merge)`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.mirror import PARTITION_BY, TABLE, changes  # noqa: E402
from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.ops import timetravel  # noqa: E402
from pipeline.ops.maintain import maintain_lake  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.stack import Stack  # noqa: E402
from pipeline.stack.trino import connect  # noqa: E402
from pipeline.stages.mirror import MirrorStage  # noqa: E402
from tables.append import IcebergAppender  # noqa: E402
from tables.names import quote, sql_string  # noqa: E402
from tables.views import athena_sql, views_of_mirror  # noqa: E402

WARMUP_RUNS = 2  # printed, not counted
RUNS = 3  # the median of these is the figure
UPDATES = 100_000
BUCKET = "bench-query"
# Ports of its own, so a running demo or test stack is untouched (as bench/stack.py).
SETTINGS = ["stack.moto_port=25102", "stack.trino_port=28187", "catalog.type=glue",
            f"catalog.warehouse=s3://{BUCKET}/warehouse"]


def changelog_rows(spark, count: int, batch: int, live_keys: int, first_new_key: int):
    """bench/mirror.py's changes with the transport columns the changelog stage adds (`history` reads them)."""
    from pyspark.sql import functions as F

    transport = F.struct(F.lit("bench").alias("topic"), F.col("_seq.transport_offset").alias("offset"))
    return (changes(spark, count, batch, live_keys, first_new_key)
            .withColumn("_transport", transport).withColumn("_ingested_at", F.current_timestamp()))


def median_seconds(label: str, action: Callable[[], int], cpu: Callable[[], float] | None = None) -> float:
    """The median of `RUNS` runs of `action` (which returns its rows) after `WARMUP_RUNS`; with `cpu`, the
    CPU-seconds the engine reports for the last run, beside it: what the machine's load does not move."""
    times = []
    for _ in range(WARMUP_RUNS + RUNS):
        started = time.perf_counter()
        rows = action()
        times.append(time.perf_counter() - started)
    median = statistics.median(times[WARMUP_RUNS:])
    spent = f", {cpu():.2f} CPU-s the last" if cpu is not None else ""
    warmup, timed = (", ".join(f"{t:.2f}" for t in part) for part in (times[:WARMUP_RUNS], times[WARMUP_RUNS:]))
    print(f"{label:<52} {median:6.2f} s  (warm-up: {warmup}; runs: {timed}; {rows} rows{spent})", flush=True)
    return median


class TrinoRuns:
    """Queries on the stack's Trino, keeping the CPU time Trino reports for the last (all its threads)."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.connection = connect(cfg)
        self.cpu_seconds = 0.0

    def rows(self, sql: str) -> int:
        cursor = self.connection.cursor()
        cursor.execute(sql)
        found = len(cursor.fetchall())
        self.cpu_seconds = cursor.stats.get("cpuTimeMillis", 0) / 1000
        return found


def queries(cfg: PipelineConfig, spark, key: int) -> dict[str, str]:
    """Each query in Spark SQL over `namespace.table` names, the `_current` view's SQL inlined as the mirror is
    now (with or without pending changes)."""
    [current] = [v for v in views_of_mirror(cfg, spark, TABLE) if v.name == f"{TABLE}{cfg.mirror.view_suffix}"]
    pending = quote(current.pending_namespace, TABLE) if current.pending_namespace else None
    state = current.select(quote(current.namespace, TABLE), pending)
    value = f"CAST({sql_string(str(key))} AS BIGINT)"
    return {
        f"point lookup on {current.name}": f"SELECT * FROM ({state}) c WHERE artist_id = {value}",
        f"history of artist_id {key}": f"SELECT * FROM {quote(cfg.changelog.namespace, TABLE)} "
                                       f"WHERE artist_id = {value} ORDER BY _seq.source_major, _seq.source_minor",
        "count(*) by nationality on the current state": f"SELECT nationality, count(*) AS n FROM ({state}) c "
                                                          "GROUP BY nationality",
    }


def both_engines(cfg: PipelineConfig, spark, key: int, when: str) -> list[tuple[float, float]]:
    """(Trino, Spark) medians of each query."""
    figures = []
    for label, sql in queries(cfg, spark, key).items():
        on_spark = median_seconds(f"{label}, {when}: spark", lambda: len(spark.sql(sql).collect()))
        trino = TrinoRuns(cfg)
        on_trino = median_seconds(f"{label}, {when}: trino", lambda: trino.rows(athena_sql(sql)),
                                  lambda: trino.cpu_seconds)
        figures.append((on_trino, on_spark))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--partition-by", default=PARTITION_BY, help="the mirror's partition fields")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logs.configure("WARNING")
    with tempfile.TemporaryDirectory(prefix="bench-query-") as home:
        cfg = load_config(overrides=[f"home={home}", f"jars={REPO / '.pipeline' / 'jars'}", *SETTINGS,
                                     f"mirror.keys.{TABLE}=artist_id", f"mirror.tables={TABLE}",
                                     f"mirror.partition_by.{TABLE}={args.partition_by}", *args.overrides],
                          environ={})
        with_trino = cfg.model_copy(update={"stack": cfg.stack.model_copy(update={"trino": True})})
        Stack(cfg, only=["moto"]).up()
        try:
            with ThreadPoolExecutor(1) as pool:
                starting = pool.submit(Stack(with_trino, only=["trino"]).up)  # while the tables are built
                _bench(cfg, args.rows, args.partition_by, starting.result)
        finally:
            Stack(with_trino, only=["moto", "trino"]).down()


def _bench(cfg: PipelineConfig, rows: int, partition_by: str, trino_up: Callable[[], object]) -> None:
    import boto3

    boto3.client("s3", **cfg.aws.boto3_kwargs()).create_bucket(Bucket=BUCKET)
    spark = get_spark(cfg)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote(cfg.catalog.name, cfg.changelog.namespace)}")
    appender = IcebergAppender(spark, f"{cfg.catalog.name}.{cfg.changelog.namespace}")
    stage = MirrorStage(cfg, spark)
    started = time.perf_counter()
    appender.append(changelog_rows(spark, rows, 0, 0, 0), TABLE, "bench", 0)
    stage.merge_table(TABLE)
    appender.append(changelog_rows(spark, UPDATES, 1, rows, rows), TABLE, "bench", 1)
    stage.merge_table(TABLE)
    print(f"query bench: {rows:,}-row mirror (partitioned by {partition_by or 'nothing'}, layout "
          f"{cfg.mirror.layout}, Glue and S3 on moto) + {UPDATES:,} changes built in "
          f"{time.perf_counter() - started:.0f} s, spark master {spark.sparkContext.master}", flush=True)
    trino_up()
    spark.catalog.setCurrentCatalog(cfg.catalog.name)  # both engines read `namespace.table`

    # A key the second batch changed, so its history has more than the initial load.
    key = spark.sql(f"SELECT artist_id FROM {quote(cfg.changelog.namespace, TABLE)} "
                    "WHERE _batch_id = 1 AND _op = 'u' LIMIT 1").first()["artist_id"]
    after_merge = both_engines(cfg, spark, key, "after merge")
    between = "2026-09-21 14:30:00"  # after the load (batch 0), before batch 1's source time
    median_seconds(f"state as of source {between}, one key: spark", lambda: len(
        timetravel.state(cfg, spark, TABLE, between, str(key)).collect()))
    maintain_lake(cfg, spark, [TABLE])
    after_maintain = both_engines(cfg, spark, key, "after maintain")
    spark.stop()
    worst = max(after_merge + after_maintain, key=lambda pair: pair[0] / pair[1])
    print(f"slowest trino figure {max(t for t, _ in after_merge + after_maintain):.2f} s; highest trino/spark ratio "
          f"{worst[0] / worst[1]:.2f} (target: <= 3 s, <= 1.5)")
    print(f"query: trino {after_merge[0][0]:.2f} s / spark {after_merge[0][1]:.2f} s (point lookup, after merge)")


if __name__ == "__main__":
    main()
