"""Mirror merge cost against table size: build an N-row mirror, then merge batches of 100k and 1M changes
(70% updates, 20% inserts, 10% deletes) and time each; in the same run, time the naive way at that size
(rebuild the state from the whole changelog with a window function and overwrite) -> ratio.

Needs no services: the changelog is synthesised in Spark in a throw-away folder. The mirror is bucketed by its
key (`--partition-by`; '' for none), so a MERGE joins bucket by bucket and shuffles only the changes. Usage:
bench/mirror.py [--rows 10000000] [--batches 100000,1000000] [--write-mode copy-on-write]
                [--partition-by "bucket(16, artist_id)"] [--set k=v ...]
Ends with: `mirror: <changes> changes into <rows> rows in <s> s, <ratio>x faster than a full rebuild (<s> s)`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cdc.merge import latest_per_key  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.config.settings import load_config  # noqa: E402
from pipeline.stages.mirror import MirrorStage  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from tables.append import IcebergAppender  # noqa: E402

TABLE = "bench_artists"
PARTITION_BY = "bucket(16, artist_id)"  # how a data engineer lays out a large mirror that is merged into by key
NATIONALITIES = "array('American','French','German','British','Japanese','Spanish','Italian','Mexican')"


def changes(spark, count: int, batch: int, live_keys: int, first_new_key: int):
    """`count` canonical change records: the initial load (batch 0) inserts keys [0, count); later batches
    update and delete random live keys and insert new keys from `first_new_key`."""
    from pyspark.sql import functions as F

    rows = spark.range(count).withColumn("r", F.rand(seed=batch))
    if batch == 0:
        op, key = F.lit("r"), F.col("id")
    else:
        op = F.when(F.col("r") < 0.7, "u").when(F.col("r") < 0.9, "c").otherwise("d")
        key = F.when(op == "c", F.col("id") + first_new_key).otherwise(
            (F.rand(seed=batch + 1000) * live_keys).cast("long"))
    return rows.select(
        key.alias("artist_id"),
        F.concat(F.lit("Artist "), F.col("id").cast("string"), F.lit(f" v{batch}")).alias("name"),
        F.expr(f"element_at({NATIONALITIES}, cast(pmod(id, 8) + 1 AS int))").alias("nationality"),
        F.lit("Female").alias("gender"),
        (F.lit(1850) + F.pmod(F.col("id"), 150)).cast("int").alias("birth_year"),
        F.lit(None).cast("int").alias("death_year"),
        op.alias("_op"),
        (op == "d").alias("_is_deleted"),
        F.timestamp_seconds(F.lit(1_790_000_000 + batch * 3600)).alias("_source_ts"),
        F.struct(F.lit(batch).cast("long").alias("source_major"), F.col("id").alias("source_minor"),
                 F.lit(0).alias("transport_partition"), F.col("id").alias("transport_offset")).alias("_seq"),
        F.struct(F.lit("bench").alias("connector"), F.lit("debezium").alias("format"), F.lit("bench").alias("db"),
                 F.lit("public").alias("schema"), F.lit("artists").alias("table"),
                 F.lit(str(batch)).alias("tx_id"), (op == "r").alias("snapshot")).alias("_source"),
        F.lit(batch).cast("long").alias("_batch_id"),
    )


def timed(label: str, action) -> float:
    started = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - started
    detail = f"  ({result.line()})" if hasattr(result, "line") else ""
    print(f"{label:<34} {seconds:8.1f} s{detail}", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batches", default="100000,1000000", help="change counts to merge, comma-separated")
    parser.add_argument("--write-mode", default="copy-on-write", choices=["copy-on-write", "merge-on-read"])
    parser.add_argument("--partition-by", default=PARTITION_BY, help="the mirror's partition fields")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logs.configure("WARNING")
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as home:
        cfg = load_config(overrides=[f"home={home}", f"jars={REPO / '.pipeline' / 'jars'}",
                                     f"mirror.keys.{TABLE}=artist_id", f"mirror.tables={TABLE}",
                                     f"mirror.write_mode={args.write_mode}",
                                     f"mirror.partition_by.{TABLE}={args.partition_by}", *args.overrides])
        spark = get_spark(cfg)
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{cfg.changelog.namespace}")
        appender = IcebergAppender(spark, f"{cfg.catalog.name}.{cfg.changelog.namespace}")
        stage = MirrorStage(cfg, spark)
        print(f"mirror bench: {args.rows:,} rows, batches {batches}, {args.write_mode}, partitioned by "
              f"{args.partition_by or 'nothing'}, master {spark.sparkContext.master}")
        timed(f"changelog: load {args.rows:,}", lambda: appender.append(changes(spark, args.rows, 0, 0, 0), TABLE, "bench", 0))
        timed(f"mirror: build {args.rows:,} rows", lambda: stage.merge_table(TABLE))
        merged: dict[int, float] = {}
        next_key = args.rows
        for number, count in enumerate(batches, start=1):
            timed(f"changelog: append {count:,} changes",
                  lambda: appender.append(changes(spark, count, number, args.rows, next_key), TABLE, "bench", number))
            next_key += count
            merged[count] = timed(f"mirror: merge {count:,} changes", lambda: stage.merge_table(TABLE))
        rebuild = timed("naive: rebuild from the changelog", lambda: (
            latest_per_key(spark.table(f"{cfg.catalog.name}.{cfg.changelog.namespace}.{TABLE}"), ["artist_id"])
            .writeTo(f"{cfg.catalog.name}.{cfg.mirror.namespace}.{TABLE}_rebuilt").createOrReplace()))
        spark.stop()
    first = batches[0]
    print(f"mirror: {first:,} changes into {args.rows:,} rows in {merged[first]:.1f} s, "
          f"{rebuild / merged[first]:.1f}x faster than a full rebuild ({rebuild:.1f} s)")


if __name__ == "__main__":
    main()
