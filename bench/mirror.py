"""Mirror merge cost against table size: does a mirror run cost what its changes cost, or what the table costs?

For each size (1M and 10M rows by default) it loads a changelog of that many inserts, builds the mirror (the
product's first build, timed against the naive rebuild below of the same changelog in two rounds, the order
swapped in the second; both run once untimed on a small changelog first, `--warmup`), then merges 100k changes
(70% updates, 20% inserts, 10% deletes) twice: keys uniform at random over the table, and keys skewed to recent
rows (80% of the updates and deletes hit the newest 5% of the keys). Each merge is compared with the changelog
append of the same changes (timed in the same run), and each size with the naive way (rebuild the state from the
whole changelog with a window function and overwrite). Growth is the merge's time at the largest size over its
time at the smallest. In the pending layout it then times the fold that `pipeline maintain` runs (the pending
changes of both merges written into the base, merged on read; by key, so the keys whose rows need the base's
values, the soft deletes here, stay pending), the fold of every key that a later fold does for those (printed, not
in the ratio: it comes once in several folds) and the compaction of the base that follows it.

The product's default settings (`mirror.layout`, `mirror.write_mode`); the mirror is bucketed by its key, as a
data engineer lays out a large mirror served by key (`--partition-by`, '' for none; Delta takes columns only:
`--set lake.format=delta --partition-by ''`, with `--set mirror.write_mode=merge-on-read` for deletion vectors). Needs no services: the
changelog is synthesised in Spark in a throw-away folder. Then, for each size, the initial load of a PostgreSQL table
of as many rows (`bench/backfill.py`, which starts PostgreSQL from the stack; `--no-initial-load` leaves it out).
Usage: bench/mirror.py [--sizes 1000000,10000000] [--changes 100000] [--warmup 200000]
[--partition-by "bucket(16, artist_id)"] [--no-initial-load] [--set k=v ...]
The SCD2 mirror of the same changelog (`mirror.scd_type = 2`) is built and merged into too, and its line
(`scd2: 100k into 10M in <s> s, <x>x the append, growth <x> (uniform); fold <s> s = <x>x the rebuild, growth <x>`,
the rebuild the current-state one's) comes before the
summary. Ends with: `mirror: 100k into 10M in <s> s, <x>x the append, <x>x faster than a rebuild, growth <x> (uniform),
<x> (skewed), first build <x>x the rebuild, fold <x>x the rebuild (10M), growth <x>, initial load <n> rows/CPU-s
(1M), <n> rows/CPU-s (10M)` (the largest size's; the fold's growth from the smallest size).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.backfill import initial_load  # noqa: E402
from cdc.merge import latest_per_key  # noqa: E402
from pipeline.config.settings import load_config  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.stages.mirror import MirrorStage  # noqa: E402
from tables.append import Appender, DeltaAppender, IcebergAppender  # noqa: E402
from tables.lake import lake_table  # noqa: E402
from tables.maintenance import maintain  # noqa: E402
from tables.pending import fold, pending_table  # noqa: E402

TABLE = "bench_artists"
PARTITION_BY = "bucket(16, artist_id)"  # how a data engineer lays out a large mirror that is merged into by key
NATIONALITIES = "array('American','French','German','British','Japanese','Spanish','Italian','Mexican')"
DISTRIBUTIONS = ("uniform", "skewed")


def changes(spark, count: int, batch: int, live_keys: int, first_new_key: int, skewed: bool = False):
    """`count` canonical change records: the initial load (batch 0) inserts keys [0, count); later batches
    update and delete live keys (uniform over [0, live_keys), or `skewed`: 80% of them in the newest 5%) and
    insert new keys from `first_new_key`."""
    from pyspark.sql import functions as F

    rows = spark.range(count).withColumn("r", F.rand(seed=batch))
    if batch == 0:
        op, key = F.lit("r"), F.col("id")
    else:
        op = F.when(F.col("r") < 0.7, "u").when(F.col("r") < 0.9, "c").otherwise("d")
        spread = F.rand(seed=batch + 1000)
        existing = (spread * live_keys).cast("long")
        if skewed:
            recent = int(live_keys * 0.95)
            existing = F.when(F.rand(seed=batch + 2000) < 0.8, F.lit(recent) + (spread * (live_keys - recent)).cast("long")
                              ).otherwise(existing)
        key = F.when(op == "c", F.col("id") + first_new_key).otherwise(existing)
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
    print(f"{label:<44} {seconds:8.1f} s{detail}", flush=True)
    return seconds


def short(count: int) -> str:
    return f"{count // 1_000_000}M" if count % 1_000_000 == 0 else f"{count // 1000}k"


def changelog_appender(spark, cfg) -> Appender:
    """Appends to the bench's changelog namespace, in the lake's format (the namespace made first)."""
    changelog = f"{cfg.catalog.name}.{cfg.changelog.namespace}"
    if cfg.lake.format == "delta":
        return DeltaAppender(spark, f"{cfg.lake.delta_root}/{cfg.changelog.namespace}")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {changelog}")
    return IcebergAppender(spark, changelog)


def one_size(spark, cfg, rows: int, count: int) -> dict[str, float]:
    """Figures at one size, in a namespace pair of its own: append and merge per distribution, and the rebuild."""
    appender = changelog_appender(spark, cfg)
    stage = MirrorStage(cfg, spark)
    timed(f"{short(rows)}: changelog load of {rows:,} rows", lambda: appender.append(changes(spark, rows, 0, 0, 0), TABLE, "bench", 0))
    figures, next_key = first_builds(spark, cfg, stage, rows), rows
    for number, distribution in enumerate(DISTRIBUTIONS, start=1):
        batch = changes(spark, count, number, rows, next_key, skewed=distribution == "skewed")
        figures[f"append {distribution}"] = timed(f"{short(rows)}: changelog append of {short(count)} ({distribution})",
                                                  lambda: appender.append(batch, TABLE, "bench", number))
        next_key += count
        figures[f"merge {distribution}"] = timed(f"{short(rows)}: mirror merge of {short(count)} ({distribution})",
                                                 lambda: stage.merge_table(TABLE))
    if pending_table(cfg, spark, TABLE) is not None:
        figures["fold"] = timed(f"{short(rows)}: fold of {short(count * len(DISTRIBUTIONS))} pending changes",
                                lambda: fold(cfg, spark, TABLE))
        kept = spark.table(pending_table(cfg, spark, TABLE).ref).count()
        figures["fold of the kept"] = timed(f"{short(rows)}: fold of the {kept:,} changes it kept",
                                            lambda: fold(cfg, spark, TABLE, full=True))
        figures["compaction"] = timed(f"{short(rows)}: compaction after the fold", lambda: maintain(
            lake_table(cfg, spark, cfg.mirror.namespace, TABLE), cfg.maintenance))
    figures["rebuild"] = timed(f"{short(rows)}: naive rebuild from the changelog", lambda: rebuild(spark, cfg))
    figures.update(history_figures(spark, cfg, appender, rows, count, next_key))
    return figures


def first_builds(spark, cfg, stage: MirrorStage, rows: int) -> dict[str, float]:
    """The first build against the naive rebuild of the same changelog, twice, the second time in the other order
    (whichever runs first pays for what the JIT has still to compile of the code both run, and the second build
    goes into a mirror namespace of its own): each one's seconds summed over both rounds. The merges that follow
    go into the first round's mirror."""
    again = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={
        "namespace": f"{cfg.mirror.namespace}_again", "pending_namespace": f"{cfg.mirror.pending_namespace}_again"})})
    label = f"{short(rows)}: first build"
    build = timed(label, lambda: stage.merge_table(TABLE))
    rebuilt = timed(f"{short(rows)}: naive rebuild of the same changelog", lambda: rebuild(spark, cfg))
    rebuilt += timed(f"{short(rows)}: naive rebuild of the same changelog, again", lambda: rebuild(spark, cfg))
    build += timed(f"{label}, again, after the rebuild", lambda: MirrorStage(again, spark).merge_table(TABLE))
    return {"first build": build, "first rebuild": rebuilt}


def warm_up(spark, cfg, rows: int) -> None:
    """The first build and the naive rebuild of a `rows`-row changelog, untimed: the JVM compiles both before
    either is timed (else the first build, the first heavy job of the run, pays the JIT's warm-up alone)."""
    started = time.perf_counter()
    changelog_appender(spark, cfg).append(changes(spark, rows, 0, 0, 0), TABLE, "bench", 0)
    MirrorStage(cfg, spark).merge_table(TABLE)
    rebuild(spark, cfg)
    print(f"warm-up: first build and rebuild of {short(rows)} rows, untimed, {time.perf_counter() - started:.1f} s",
          flush=True)


def history_figures(spark, cfg, appender: Appender, rows: int, count: int, next_key: int) -> dict[str, float]:
    """The same changelog as an SCD2 mirror (`mirror.scd_type`), in a namespace of its own: built from every
    change so far, then `count` more changes (uniform) merged, timed against their append, then folded."""
    history = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={
        "namespace": f"{cfg.mirror.namespace}_scd2", "pending_namespace": f"{cfg.mirror.pending_namespace}_scd2",
        "scd_type": {TABLE: 2}})})
    stage = MirrorStage(history, spark)
    timed(f"{short(rows)}: SCD2 mirror build", lambda: stage.merge_table(TABLE))
    batch = changes(spark, count, len(DISTRIBUTIONS) + 1, rows, next_key)
    figures = {"scd2 append": timed(f"{short(rows)}: changelog append of {short(count)} (uniform)",
                                    lambda: appender.append(batch, TABLE, "bench", len(DISTRIBUTIONS) + 1))}
    figures["scd2 merge"] = timed(f"{short(rows)}: SCD2 mirror merge of {short(count)} (uniform)",
                                  lambda: stage.merge_table(TABLE))
    if pending_table(history, spark, TABLE) is not None:
        figures["scd2 fold"] = timed(f"{short(rows)}: SCD2 fold of {short(count)} pending changes",
                                     lambda: fold(history, spark, TABLE))
    return figures


def rebuild(spark, cfg) -> None:
    """The naive way: the newest change per key of the whole changelog, overwriting a table of its own."""
    state = latest_per_key(lake_table(cfg, spark, cfg.changelog.namespace, TABLE).read(), ["artist_id"])
    if cfg.lake.format == "delta":
        state.write.format("delta").mode("overwrite").save(f"{cfg.lake.delta_root}/{cfg.mirror.namespace}/rebuilt")
    else:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{cfg.mirror.namespace}")
        state.writeTo(f"{cfg.catalog.name}.{cfg.mirror.namespace}.{TABLE}_rebuilt").createOrReplace()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000000,10000000", help="mirror sizes in rows, comma-separated")
    parser.add_argument("--changes", type=int, default=100_000, help="changes per merge")
    parser.add_argument("--partition-by", default=PARTITION_BY, help="the mirror's partition fields")
    parser.add_argument("--warmup", type=int, default=200_000,
                        help="rows of an untimed first build and rebuild before the sizes (0: none)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--no-initial-load", dest="initial_load", action="store_false",
                        help="leave out the initial load of each size (bench/backfill.py, which starts PostgreSQL)")
    args = parser.parse_args()
    logs.configure("WARNING")
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as home:
        settings = [f"home={home}", f"jars={REPO / '.pipeline' / 'jars'}", f"mirror.keys.{TABLE}=artist_id",
                    f"mirror.tables={TABLE}", f"mirror.partition_by.{TABLE}={args.partition_by}", *args.overrides]
        spark = get_spark(load_config(overrides=settings))
        defaults = load_config(overrides=settings)
        layout = defaults.mirror.layout if defaults.lake.format == "iceberg" else "merge"
        print(f"mirror bench: {defaults.lake.format}, sizes {sizes}, {args.changes:,} changes per merge, layout "
              f"{layout}, write mode {defaults.mirror.write_mode}, partitioned by {args.partition_by or 'nothing'}, "
              f"master {spark.sparkContext.master}", flush=True)
        def sized(label: str):
            return load_config(overrides=[*settings, f"changelog.namespace=changelog_{label}",
                                          f"mirror.namespace=mirror_{label}", f"mirror.pending_namespace=mirror_pending_{label}"])

        if args.warmup:
            warm_up(spark, sized("warmup"), args.warmup)
        for rows in sizes:
            results[rows] = one_size(spark, sized(short(rows)), rows, args.changes)
        spark.stop()
    loads = {rows: initial_load(rows, []) for rows in sizes} if args.initial_load else {}
    small, large = results[sizes[0]], results[sizes[-1]]
    for rows, figures in results.items():
        print(f"{short(rows)}: " + ", ".join(
            f"{d} merge {figures[f'merge {d}']:.1f} s = {figures[f'merge {d}'] / figures[f'append {d}']:.1f}x the append"
            for d in DISTRIBUTIONS) + (f", fold {figures['fold']:.1f} s = {figures['fold'] / figures['rebuild']:.2f}x the "
                                       f"rebuild, compaction {figures['compaction']:.1f} s" if "fold" in figures else "")
            + f", rebuild {figures['rebuild']:.1f} s, first builds {figures['first build']:.1f} s = "
              f"{figures['first build'] / figures['first rebuild']:.2f}x the rebuilds of their changelog "
              f"({figures['first rebuild']:.1f} s, two rounds each)")
    scd2 = large["scd2 merge"]
    print(f"scd2: {short(args.changes)} into {short(sizes[-1])} in {scd2:.1f} s, {scd2 / large['scd2 append']:.1f}x the "
          f"append, growth {scd2 / small['scd2 merge']:.2f} (uniform)" + (
              f"; fold {large['scd2 fold']:.1f} s = {large['scd2 fold'] / large['rebuild']:.2f}x the rebuild, "
              f"growth {large['scd2 fold'] / small['scd2 fold']:.2f}"
              if "scd2 fold" in large else ""))
    merge = large["merge uniform"]
    print(f"mirror: {short(args.changes)} into {short(sizes[-1])} in {merge:.1f} s, "
          f"{merge / large['append uniform']:.1f}x the append, {large['rebuild'] / merge:.1f}x faster than a rebuild, "
          f"growth {merge / small['merge uniform']:.2f} (uniform), "
          f"{large['merge skewed'] / small['merge skewed']:.2f} (skewed), "
          f"first build {large['first build'] / large['first rebuild']:.2f}x the rebuild"
          + (f", fold {large['fold'] / large['rebuild']:.2f}x the rebuild ({short(sizes[-1])}), growth "
             f"{large['fold'] / small['fold']:.2f}" if "fold" in large else "")
          + (", initial load " + ", ".join(f"{rate:,.0f} rows/CPU-s ({short(rows)})" for rows, rate in loads.items())
             if loads else ""))


if __name__ == "__main__":
    main()
