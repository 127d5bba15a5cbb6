"""The initial load of a large table (issue 40): `pipeline backfill` of a PostgreSQL table, its snapshot into the
changelog and then the mirror's first build, in rows per CPU-second of the backfill's whole process tree (the CLI's
Python, the Spark JVM, its Python workers), against plain Spark doing the landing (JDBC by the same key ranges ->
an Iceberg append) in the same run. The target, from the issue: OLake's 37,600 rows per CPU-second.

Starts PostgreSQL alone from the stack, in a home of its own (stopped at the end when the bench started it; the
table stays there for the next run), and fills a table of `--rows` rows with the types a real table holds (a
bigint key, ints, a decimal, a double, texts, a timestamptz, a timestamp, a date, a boolean, a small jsonb) by
`generate_series`. Then plain Spark and the backfill run one after the other, each in a process of
its own whose CPU is sampled from `/proc` (`bench/cpu.py`); PostgreSQL's CPU is printed apart and not counted.
Usage: bench/backfill.py [--rows 1000000] [--set k=v ...]. Ends with
`backfill: <rows> rows, <n> rows/CPU-s (landing <n>, first build <s> CPU-s), landing <x>x plain Spark`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.cpu import Group, Sampler, describe  # noqa: E402
from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.stack import Stack  # noqa: E402
from pipeline.stack.psql import Psql  # noqa: E402

TABLE = "trips"
PREFIX = "bench"  # the topic prefix the backfilled table is named by: bench.public.trips -> bench_trips
SETTINGS = ["home=/tmp/backfill-bench-home", "stack.postgres=true", f"jars={REPO / '.pipeline' / 'jars'}", "stack.postgres_port=25432",
            "spark.driver_memory=3g"]
DDL = f"""
DROP TABLE IF EXISTS {TABLE};
CREATE TABLE {TABLE} (
    id bigint PRIMARY KEY, vendor int, passengers smallint, fare numeric(10, 2), distance double precision,
    pickup_zone text, dropoff_zone text, picked_up timestamptz, dropped_off timestamp, service_day date,
    paid_by_card boolean, extras jsonb);
"""
FILL = f"""
INSERT INTO {TABLE} SELECT n, n % 7, (n % 5)::smallint, (n % 10000) / 100.0, n % 997 * 0.37,
    'zone ' || (n % 263), 'zone ' || (n * 7 % 263),
    timestamptz '2026-01-01 00:00:00+00' + n * interval '1 second',
    timestamp '2026-01-01 00:00:00' + n * interval '1 second' + interval '17 minutes',
    date '2026-01-01' + (n % 365)::int, n % 3 = 0, jsonb_build_object('tip', n % 20, 'toll', n % 2 = 0)
FROM generate_series(1, %d) AS n;
ANALYZE {TABLE};
"""


def plain(cfg: PipelineConfig, rows: int) -> None:
    """Plain Spark's landing: the table through JDBC in as many key ranges a batch as the backfill reads, appended
    to an Iceberg table as Spark reads it (the bench's own process, run with `--plain`)."""
    from pipeline.runtime.spark import get_spark
    from pipeline.sources.postgres_snapshot import PostgresSnapshot

    spark = get_spark(cfg)
    tasks, batch_rows = spark.sparkContext.defaultParallelism, cfg.backfill.batch_rows
    target = f"{cfg.catalog.name}.plain.{TABLE}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.plain")
    spark.sql(f"DROP TABLE IF EXISTS {target} PURGE")
    options = PostgresSnapshot(spark, cfg.backfill, "public", TABLE).options  # the backfill's connection
    first = 1
    while first <= rows:
        last = min(rows, first + batch_rows - 1)
        frame = (spark.read.format("jdbc").options(**options)
                 .option("dbtable", f"(SELECT id, vendor, passengers::int AS passengers, fare, distance, pickup_zone, "
                                    f"dropoff_zone, picked_up, dropped_off, service_day, paid_by_card, extras::text AS "
                                    f"extras FROM {TABLE} WHERE id BETWEEN {first} AND {last}) AS batch")
                 .option("partitionColumn", "id").option("lowerBound", first).option("upperBound", last + 1)
                 .option("numPartitions", tasks).load())
        if first > 1:
            frame.writeTo(target).append()
        else:
            frame.writeTo(target).using("iceberg").create()
        print(json.dumps({"event": "plain.batch", "rows": last}), flush=True)
        first = last + 1


def measured(command: list[str], postgres: int, marker: str) -> tuple[Sampler, float | None, float]:
    """Run `command`, its CPU and PostgreSQL's sampled; the time of its last output line holding `marker`."""
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = Sampler([Group("process tree", (process.pid,)), Group("postgres", (postgres,))]).start()
    marked, lines = None, []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if marker in line:
            marked = time.time()
    process.wait()
    sampler.stop()
    if process.returncode != 0:
        sys.exit(f"{command[3:]} failed:\n{''.join(lines[-30:])}")
    return sampler, marked, time.time()


def tree(cpu: dict[tuple[str, str], float]) -> float:
    return sum(seconds for (group, _), seconds in cpu.items() if group == "process tree")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)  # the plain Spark side's process
    args = parser.parse_args()
    if args.plain:
        plain(load_config(overrides=[*SETTINGS, *args.overrides], environ={}), args.rows)
        return
    initial_load(args.rows, args.overrides)


def initial_load(rows: int, overrides: list[str]) -> float:
    """The race for a table of `rows` rows, PostgreSQL started from the stack unless it runs: the backfill's rows
    per CPU-second (`bench/mirror.py` reports it too)."""
    overrides = [*SETTINGS, *overrides]
    cfg = load_config(overrides=overrides, environ={})
    stack = Stack(cfg, only=["postgres"])
    started = stack.up()
    try:
        return race(cfg, rows, overrides, next(s for s in stack.services if s.name == "postgres").process.pid())
    finally:
        if started:  # stopped as found: the table stays in the bench's home for the next run
            stack.down()


def race(cfg: PipelineConfig, rows: int, overrides: list[str], postgres: int) -> float:
    """The table of `rows` rows made (or kept from an earlier run), then plain Spark's landing and the backfill,
    each in a process of its own, PostgreSQL's CPU apart."""
    started, psql = time.monotonic(), Psql(cfg.stack)
    held = psql.execute(f"SELECT count(*) FROM {TABLE};").strip() if psql.execute(
        f"SELECT to_regclass('{TABLE}') IS NOT NULL;").strip() == "t" else "0"
    if held != str(rows):  # a table of this size from an earlier run is used as it is
        psql.execute(DDL + FILL.replace("%d", str(rows)))
    print(f"table: {rows:,} rows made in {time.monotonic() - started:.1f} s", flush=True)
    settings = [f"--set={s}" for s in overrides]
    base, table = [sys.executable, str(Path(__file__).resolve())], f"{PREFIX}_{TABLE}"
    for folder in ("warehouse", "catalog.db"):  # each run lands into an empty lake
        subprocess.run(["rm", "-rf", str(cfg.home / folder)], check=True)

    sampler, _, _ = measured([*base, "--plain", "--rows", str(rows), *settings], postgres, '"plain.batch"')
    plain_cpu = tree(sampler.total())
    print(f"plain Spark landing: {rows / plain_cpu:,.0f} rows/CPU-s; {describe(sampler.total())}", flush=True)

    command = [sys.executable, "-m", "pipeline", "--log-format", "json", *settings, "backfill", "--table",
               f"{PREFIX}.public.{TABLE}"]
    sampler, landed_at, ended = measured(command, postgres, '"backfill.batch"')
    first_at = sampler.samples[0][0]
    landing, total = tree(sampler.between(first_at, landed_at or ended)), tree(sampler.total())
    build = total - landing
    print(f"backfill: landing {describe(sampler.between(first_at, landed_at or ended))}", flush=True)
    print(f"backfill: whole run {describe(sampler.total())} ({table})", flush=True)
    print(f"backfill: {rows:,} rows, {rows / total:,.0f} rows/CPU-s (landing {rows / landing:,.0f}, "
          f"first build {build:.1f} CPU-s), landing {plain_cpu / landing:.2f}x plain Spark", flush=True)
    return rows / total


if __name__ == "__main__":
    main()
