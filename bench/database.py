"""A whole database (issue 41): the fixed cost a table adds to a changelog batch and to a mirror run, and where
the changelog's time goes.

1. The simulator writes `--events` Debezium changes of `synthetic:1` (one table) to Kafka, and as many of
   `synthetic:<--tables>` (the same number of changes, skewed over the tables: a few hot, a long quiet tail), each
   under a topic prefix of its own.
2. The changelog stage drains each prefix in one batch (`changelog --until-caught-up`, one Spark session for
   both); t1 and tN are those drains. The fixed cost per table is (tN - t1) / (N - 1); the issue's targets are
   <= 50 ms per table and tN <= 2 t1 + 10 s. That batch creates the tables (the issue's figure); then the same
   changes are sent again and drained as the next batch, which appends to them (a running stream's batch).
3. While an N-table batch lands, the driver's calls that cost per table are timed (`Probe`: registry lookups,
   catalog and snapshot lookups, the appends' writes and commits, the topics' plans) and Spark's jobs counted
   and summed from its status store. The probes are thread-seconds: `changelog.concurrent_topics` threads
   overlap them, so they add up to more than the wall time.
4. The driver's heap in use after the N-table batches (after a full GC) is printed against the 2 GiB bound.
5. Real types: one topic of a synthetic table with timestamps, decimals and JSON (`real_types_table`), drained by
   the stage against plain Spark doing the same in the same run: Kafka -> `from_avro` -> the same type conversions
   written by hand (`HAND_WRITTEN`) -> an Iceberg append. It is `bench/changelog.py`'s race (a pool of 200k
   distinct changes replayed to `--real-types-events`, the schema evolving a tenth of the way in, the baseline
   reading the first writer's messages), first untimed on `--warmup-real-types` events, then `--rounds` rounds on
   one new topic a side: the first drains it into a new table, each later one sends as many events again and
   drains them from the same checkpoint into the same table, an append, as a running stream's batch is; the last
   round (that steady state) is the figure. The baseline lands the
   envelope as `bench/changelog.py`'s does, every field as it is, both row images converted by hand
   (`envelope_by_hand`); a second baseline drains the same topic keeping only the row image, the operation and its
   time (`image_by_hand`: what no mirror can be ordered from), and the stage's ratio to it is printed beside.

6. The mirror half: after each drain, one `mirror` run over the tables it landed (t1 and tN again: the first
   run builds the mirrors, the second merges the appended changes); per table (tN - t1) / (N - 1), the issue's
   target <= 100 ms. Then a run over the N tables with nothing new (a quiet table's cost), and a run where only
   10 tables have new changes against one over those 10 tables alone (target <= 2x): the same 10 tables' changes
   (one seed) land under two prefixes; the first 10 are mirrored alone, the second with N - 10 of the merged
   tables.

Both drains and a mirror run are first run untimed on a small database of their own (class loading, the JIT's
first compiles).

Needs the stack (`python -m pipeline stack up`, or the test stack with its settings passed by `--set`).
Usage: bench/database.py [--only changelog|real-types] [--tables 500] [--events 200000] [--warmup 2000]
[--real-types-events 1000000] [--warmup-real-types 50000] [--rounds 3] [--set k=v ...]
Ends with: `database: <N> tables, changelog <ms> ms/table (appending to them: <ms>), mirror <ms> ms/table
(appending: <ms>; a quiet table <ms> ms; 10 changed of all <x>x 10 alone), real types <x>x plain Spark (the row
image alone: <x>x)` (`n/a` for a part `--only` leaves out; `--only changelog` includes the mirror half).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from changelog import POOL, race, report, simulate_pool  # noqa: E402  (bench/changelog.py)
from pyspark.sql import Column  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.catalog import Catalog  # noqa: E402
from pyspark.sql.readwriter import DataFrameWriterV2  # noqa: E402

from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.stages.changelog import ChangelogStage  # noqa: E402
from pipeline.stages.changelog import landing as landing_module  # noqa: E402
from pipeline.stages.changelog import quiet as quiet_module  # noqa: E402
from pipeline.stages.mirror import MirrorStage, MissingKeys  # noqa: E402
from registry import resolver as resolver_module  # noqa: E402
from registry.factory import serde_from_settings  # noqa: E402
from simulators import synthetic  # noqa: E402
from simulators.simulation import Simulation, SimulationOptions  # noqa: E402
from simulators.tables import Column as SourceColumn, Table  # noqa: E402
from simulators.transport import KafkaTransport  # noqa: E402
from simulators.truth import TruthStore  # noqa: E402
from tables import append as append_module  # noqa: E402
from tables.lake import table_names  # noqa: E402

SNAPSHOT_ROWS = 10  # rows per table before the changes start: the skew is in the changes, not the snapshot

# (module or class, attribute, label): the driver calls a table's landing makes, timed while the batch lands
PROBED: list[tuple[Any, str, str]] = [
    (resolver_module.SchemaResolver, "subject_writers", "registry: subject's writers"),
    (resolver_module.SchemaResolver, "group_listing", "registry: the quiet subjects' versions (one search)"),
    (resolver_module.SchemaResolver, "readers", "registry: readers"),
    (resolver_module.SchemaResolver, "key_columns", "registry: record key"),
    (landing_module.Landing, "_key", "table key lookup"),
    (landing_module.Owners, "claim", "owner claim (catalog)"),
    (landing_module.Landing, "_topic", "topic: plan + append (all)"),
    (landing_module.Landing, "_created", "new table properties"),
    (append_module.IcebergAppender, "append", "append: whole call"),
    (landing_module.Landing, "_quiet_topic", "one plan: a topic's driver work (all)"),
    (quiet_module, "change_record", "one plan: a topic's change record"),
    (append_module.ManyTablesAppender, "target", "one plan: a table's check or create"),
    (quiet_module, "append", "one plan: decode, write and commit"),
    (append_module.ManyTablesAppender, "stage", "one job: stage a table (check, create, plan)"),
    (append_module.ManyTablesAppender, "append", "one job: write and commit the staged tables"),
    (append_module, "_loaded", "append: load the table (or none)"),
    (append_module.IcebergAppender, "committed", "append: idempotence lookup"),
    (landing_module, "stamped", "plan: batch stamp"),
    (Catalog, "tableExists", "catalog: table exists"),
    (DataFrameWriterV2, "create", "write: create table (job + commit)"),
    (DataFrameWriterV2, "append", "write: append (job + commit)"),
    (landing_module.Landing, "append_dead_letters", "dead letters"),
]


class Probe:
    """Thread-seconds and calls per label, of the functions in `PROBED`, while `timing()` is on."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def wrap(self, function: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds[label] += time.perf_counter() - started
                    self.calls[label] += 1
        return timed

    @contextmanager
    def timing(self) -> Iterator[None]:
        originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in PROBED]
        for owner, name, label in PROBED:
            original = owner.__dict__[name]
            wrapped = self.wrap(original.__func__ if isinstance(original, staticmethod) else original, label)
            setattr(owner, name, staticmethod(wrapped) if isinstance(original, staticmethod) else wrapped)
        try:
            yield
        finally:
            for owner, name, original in originals:
                setattr(owner, name, original)


def simulate(cfg: PipelineConfig, prefix: str, tables: int, events: int, folder: Path, round_: str = "") -> int:
    """`events` Debezium changes of `synthetic:<tables>` to Kafka under `prefix`; returns the tables written.
    A second round under the same prefix sends the same tables' changes again (the same seed: the same tables)."""
    options = SimulationOptions(format="debezium", tables=f"synthetic:{tables}", events=events,
                                snapshot_rows=SNAPSHOT_ROWS, topic_prefix=prefix)
    transport = KafkaTransport(cfg.kafka, partitions=cfg.stack.kafka_partitions)
    started = time.perf_counter()
    summary = Simulation(options, transport, TruthStore(folder / f"{prefix}{round_}.db"),
                         serde_from_settings(cfg.registry, cfg.aws)).run(progress=False)
    touched = len({table for table, _ in summary.events})
    print(f"  simulated {summary.total_events:,} changes of {touched} tables under {prefix} "
          f"in {time.perf_counter() - started:.1f} s", flush=True)
    return touched


def drain(cfg: PipelineConfig, spark: Any, prefix: str, folder: Path) -> float:
    """Seconds the stage takes to drain what is new in the prefix's topics (one batch), in this process's Spark
    session; the checkpoint is the prefix's, so a second drain is the stage's next batch."""
    changelog = cfg.changelog.model_copy(update={"topic_pattern": rf"{prefix}\..*", "topics": [],
                                                 "checkpoint": str(folder / f"checkpoint-{prefix}")})
    stage = ChangelogStage(cfg.model_copy(update={"changelog": changelog}), spark)
    started = time.perf_counter()
    stage.run(until_caught_up=True)
    return time.perf_counter() - started


def spark_jobs(spark: Any) -> dict[int, tuple[float, str]]:
    """Job id -> (seconds, name) of the finished jobs Spark's status store holds."""
    jobs = {}
    listed = spark.sparkContext._jsc.sc().statusStore().jobsList(None)  # noqa: SLF001  # a Scala Seq
    for job in (listed.apply(i) for i in range(listed.length())):
        if job.completionTime().isDefined() and job.submissionTime().isDefined():
            seconds = (job.completionTime().get().getTime() - job.submissionTime().get().getTime()) / 1000
            jobs[job.jobId()] = (seconds, job.name())
    return jobs


def heap_mib(spark: Any) -> float:
    """The driver's heap in use after a full GC."""
    runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()  # noqa: SLF001
    spark.sparkContext._jvm.java.lang.System.gc()  # noqa: SLF001
    return (runtime.totalMemory() - runtime.freeMemory()) / 2**20


def breakdown(title: str, probe: Probe, jobs: dict[int, tuple[float, str]], tables: int, threads: int) -> None:
    """Where a batch's driver time went (the probes' thread-seconds) and its Spark jobs."""
    print(f"where the {title} batch's driver time goes (thread-seconds, {threads} threads; nested labels overlap):")
    for label, seconds in sorted(probe.seconds.items(), key=lambda item: -item[1]):
        calls = probe.calls[label]
        print(f"  {label:<36} {seconds:8.1f} s  {calls:6d} calls  {1000 * seconds / max(calls, 1):8.1f} ms/call")
    job_seconds = sum(seconds for seconds, _ in jobs.values())
    print(f"  Spark jobs: {len(jobs)} ({len(jobs) / max(tables, 1):.1f} per table), {job_seconds:.1f} job-seconds")


def per_table(name: str, t1: float, tn: float, tables: int, target_ms: int = 50, bounded: bool = True) -> float:
    """The fixed cost a table adds to a batch (or a mirror run), in ms, printed against the issue's targets: the
    changelog's 50 ms and tN <= 2 t1 + 10 s (`bounded`), the mirror's 100 ms."""
    ms = 1000 * (tn - t1) / max(tables - 1, 1)
    bound = f"; t{tables} {'<=' if tn <= 2 * t1 + 10 else '>'} 2 t1 + 10 s ({2 * t1 + 10:.1f} s)" if bounded else ""
    print(f"{name}: fixed cost per table ({tn:.1f} - {t1:.1f}) / {tables - 1} = {ms:.0f} ms (target <= {target_ms})"
          f"{bound}", flush=True)
    return ms


# The real-types race's baseline: what a Spark user writes by hand for the semantic types of its table, to the
# lake types docs/types.md gives them (a decimal with its logical type, as the simulator writes it, JSON, enums
# and UUIDs need nothing).
HAND_WRITTEN: dict[str, Callable[[Column], Column]] = {
    "io.debezium.time.Timestamp": lambda c: F.timestamp_millis(c).cast("timestamp_ntz"),
    "io.debezium.time.MicroTimestamp": lambda c: F.timestamp_micros(c).cast("timestamp_ntz"),
    "io.debezium.time.NanoTimestamp": lambda c: F.timestamp_micros(F.floor(c / 1000)).cast("timestamp_ntz"),
    "org.apache.kafka.connect.data.Timestamp": lambda c: c.cast("timestamp_ntz"),  # timestamp-millis: an instant
    "io.debezium.time.ZonedTimestamp": lambda c: c.cast("timestamp"),
    "io.debezium.time.Date": F.date_from_unix_date,
}
AS_DECODED = frozenset({"org.apache.kafka.connect.data.Decimal", "org.apache.kafka.connect.data.Date",
                        *(f"io.debezium.data.{name}" for name in ("Json", "Xml", "Uuid", "Enum", "EnumSet"))})
TIMESTAMPS = frozenset(name for name in HAND_WRITTEN if "Timestamp" in name)


def _semantic(column: SourceColumn) -> str | None:
    return column.avro_type.get("connect.name") if isinstance(column.avro_type, dict) else None


def real_types_table() -> tuple[int, Table]:
    """The first seed whose `synthetic:1` table has timestamps, decimals and JSON, 8 to 24 columns, no TOAST-able
    text (its values are kilobytes), and only semantic types `HAND_WRITTEN` or `AS_DECODED` covers; and the table."""
    for seed in itertools.count():
        table = synthetic.database(1, seed)[0]
        kinds = {_semantic(column) for column in table.columns}
        if (8 <= len(table.columns) <= 24 and not table.toasted and kinds <= {None, *HAND_WRITTEN, *AS_DECODED}
                and kinds & TIMESTAMPS and "org.apache.kafka.connect.data.Decimal" in kinds
                and "io.debezium.data.Json" in kinds):
            return seed, table
    raise AssertionError("unreachable: itertools.count() does not end")


def converted(table: Table, image: Column) -> list[Column]:
    """The columns of `table`'s row `image`, each converted by hand."""
    return [HAND_WRITTEN.get(_semantic(column) or "", lambda c: c)(image[column.name]).alias(column.name)
            for column in table.columns]


def envelope_by_hand(table: Table) -> Callable[[Column], list[Column]]:
    """The baseline of the figure: a decoded envelope landed as `bench/changelog.py`'s baseline lands it, every
    field of the simulator's Debezium envelope as it is (the source's positions, the transaction, the operation
    and its time: what orders a key's changes), with the columns of both row images converted by hand."""
    def columns(envelope: Column) -> list[Column]:
        images = [F.when(envelope[part].isNotNull(), F.struct(*converted(table, envelope[part]))).alias(part)
                  for part in ("before", "after")]
        return images + [envelope[field].alias(field) for field in ("source", "transaction", "op", "ts_ms")]
    return columns


def image_by_hand(table: Table) -> Callable[[Column], list[Column]]:
    """A lighter baseline, printed beside the figure: the row's image alone (the after image, else the before
    image) converted by hand, the operation and the source time; nothing that orders a key's changes."""
    def columns(envelope: Column) -> list[Column]:
        image = F.coalesce(envelope["after"], envelope["before"])
        return converted(table, image) + [envelope["op"].alias("_op"),
                                          F.timestamp_millis(envelope["source"]["ts_ms"]).alias("_source_ts")]
    return columns


def real_types(cfg: PipelineConfig, spark: Any, events: int, warmup: int, rounds: int) -> tuple[float, float]:
    """The stage's rate over plain Spark's on one topic of the real-types table, in the last round: against the
    envelope landed (the figure), and against the row image alone."""
    seed, table = real_types_table()
    print(f"real types: synthetic:1 of seed {seed}, {table.name}: "
          + ", ".join(f"{c.name} ({_semantic(c) or c.avro_type})" for c in table.columns), flush=True)
    pool = simulate_pool(cfg, f"rt{uuid.uuid4().hex[:6]}", POOL, tables="synthetic:1", seed=seed)
    envelope, image = envelope_by_hand(table), image_by_hand(table)
    ratio = image_ratio = 0.0
    with tempfile.TemporaryDirectory() as folder:
        if warmup:
            print(f"real types warm-up: {warmup:,} events each, untimed", flush=True)
            race(cfg, spark, pool, 1, warmup, "w", Path(folder), envelope, also=[image])
        for round_ in range(1, rounds + 1):  # one tag: the same topics, checkpoints and tables every round
            stage_s, envelope_s, image_s = race(cfg, spark, pool, 1, events, "r", Path(folder), envelope,
                                                also=[image])
            _, ratio = report(f"real types, round {round_}", events, stage_s, envelope_s)
            image_ratio = image_s / stage_s
            print(f"real types, round {round_}: the row image alone {events / image_s:12,.0f} events/s  "
                  f"({events:,} events, {image_s:.1f} s): the stage {image_ratio:.2f}x", flush=True)
    return ratio, image_ratio


def tables_of(cfg: PipelineConfig, spark: Any, prefix: str) -> list[str]:
    """The changelog tables the topics under `prefix` landed in (`<prefix>_<table>`)."""
    return [name for name in table_names(cfg, spark, cfg.changelog.namespace) if name.startswith(f"{prefix}_")]


def mirror_run(cfg: PipelineConfig, spark: Any, tables: list[str]) -> tuple[float, int]:
    """Seconds of one `mirror` run over `tables`, and how many of them had changes to merge. A keyless table
    (one in fifty of a synthetic database) is listed by the run, which mirrors the others."""
    stage = MirrorStage(cfg, spark)
    started = time.perf_counter()
    try:
        reports = stage.run_once(tables)
    except MissingKeys as exc:
        reports = exc.reports
    return time.perf_counter() - started, sum(report.changes > 0 for report in reports)


@dataclass
class MirrorCosts:
    """Step 5's figures, in ms: the fixed cost per table of the mirror run after each landing, a table's cost in
    a run with nothing new, and a run where 10 tables changed over one of those 10 alone."""

    created: float = 0.0
    appended: float = 0.0
    quiet: float = 0.0
    ten_ratio: float = 0.0

    def line(self) -> str:
        return (f"mirror {self.created:.0f} ms/table (appending: {self.appended:.0f}; a quiet table "
                f"{self.quiet:.0f} ms; 10 changed of all {self.ten_ratio:.2f}x 10 alone)")


def ten_changed(cfg: PipelineConfig, spark: Any, run: str, many: list[str], args: argparse.Namespace,
                folder: Path) -> float:
    """Step 6: the same 10 tables' changes landed twice, under two prefixes (one seed: the same tables and
    changes); the mirror run over the first 10 alone, then over all-but-10 of the merged `many` (nothing new)
    with the second 10: a run of len(many) tables where only 10 changed. Returns the second over the first."""
    events = max(args.events // 10, 100)
    for copy in ("a", "b"):
        simulate(cfg, f"{run}ten{copy}", 10, events, folder)
        drain(cfg, spark, f"{run}ten{copy}", folder)
    alone, changed = mirror_run(cfg, spark, tables_of(cfg, spark, f"{run}tena"))
    print(f"mirror, {changed} tables with {events:,} new changes alone: {alone:.1f} s", flush=True)
    mixed = many[:max(len(many) - 10, 0)] + tables_of(cfg, spark, f"{run}tenb")
    among, changed = mirror_run(cfg, spark, mixed)
    ratio = among / alone
    print(f"mirror, the same changes in {changed} of {len(mixed)} tables: {among:.1f} s, {ratio:.2f}x "
          "(target <= 2x)", flush=True)
    return ratio


def changelog_costs(cfg: PipelineConfig, spark: Any, args: argparse.Namespace) -> tuple[int, float, float, MirrorCosts]:
    """Steps 1-6: the tables touched and the fixed cost per table, in ms, of a batch that creates them and of one
    that appends to them; and the mirror's figures."""
    threads = cfg.changelog.concurrent_topics
    run = f"db{uuid.uuid4().hex[:6]}"
    seconds: dict[tuple[str, str], float] = {}
    mirrored: dict[tuple[str, str], float] = {}
    costs = MirrorCosts()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.warmup:
            for tables in (1, min(args.tables, 20)):
                simulate(cfg, f"{run}w{tables}", tables, args.warmup, folder)
                print(f"warm-up: {tables} table(s), {drain(cfg, spark, f'{run}w{tables}', folder):.1f} s, untimed",
                      flush=True)
                print(f"warm-up: mirror of {tables} table(s), "
                      f"{mirror_run(cfg, spark, tables_of(cfg, spark, f'{run}w{tables}'))[0]:.1f} s, untimed")
        for round_ in ("new", "existing"):  # the first batch creates the tables, the second appends to them
            simulate(cfg, f"{run}one", 1, args.events, folder, round_)
            touched = simulate(cfg, f"{run}many", args.tables, args.events, folder, round_)
            seconds[round_, "one"] = drain(cfg, spark, f"{run}one", folder)
            print(f"{round_} tables, 1 table: {seconds[round_, 'one']:.1f} s", flush=True)
            mirrored[round_, "one"], _ = mirror_run(cfg, spark, tables_of(cfg, spark, f"{run}one"))
            print(f"{round_} tables, mirror of 1 table: {mirrored[round_, 'one']:.1f} s", flush=True)
            probe, before = Probe(), spark_jobs(spark)
            with probe.timing():
                seconds[round_, "many"] = drain(cfg, spark, f"{run}many", folder)
            jobs = {k: v for k, v in spark_jobs(spark).items() if k not in before}
            print(f"{round_} tables, {touched} tables: {seconds[round_, 'many']:.1f} s", flush=True)
            breakdown(f"{touched}-table ({round_} tables)", probe, jobs, touched, threads)
            many = tables_of(cfg, spark, f"{run}many")
            mirrored[round_, "many"], changed = mirror_run(cfg, spark, many)
            print(f"{round_} tables, mirror of {len(many)} tables ({changed} with changes): "
                  f"{mirrored[round_, 'many']:.1f} s", flush=True)
        quiet, changed = mirror_run(cfg, spark, many)
        costs.quiet = 1000 * quiet / len(many)
        print(f"mirror with nothing new ({changed} tables changed) over {len(many)} tables: {quiet:.1f} s, "
              f"{costs.quiet:.0f} ms a table", flush=True)
        costs.ten_ratio = ten_changed(cfg, spark, run, many, args, folder)
    print(f"driver heap in use after the batches: {heap_mib(spark):,.0f} MiB (bound 2,048 MiB)")
    created, appended = (per_table(f"{round_} tables", seconds[round_, "one"], seconds[round_, "many"], touched)
                         for round_ in ("new", "existing"))
    costs.created, costs.appended = (per_table(f"mirror after {round_} tables", mirrored[round_, "one"],
                                               mirrored[round_, "many"], len(many), target_ms=100, bounded=False)
                                     for round_ in ("new", "existing"))
    return touched, created, appended, costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", choices=("changelog", "real-types"), help="run one part of the benchmark")
    parser.add_argument("--tables", type=int, default=500)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--warmup", type=int, default=2_000, help="events of the untimed first drains")
    parser.add_argument("--real-types-events", type=int, default=1_000_000)
    parser.add_argument("--warmup-real-types", type=int, default=50_000, help="events of its untimed first race")
    parser.add_argument("--rounds", type=int, default=3,
                        help="real-types races: the first into new tables, the next appending to them; the last one "
                             "is the figure")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logs.configure("WARNING")
    cfg = load_config(overrides=args.overrides)
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min average, {os.cpu_count()} CPUs); "
          f"changelog.concurrent_topics={cfg.changelog.concurrent_topics}", flush=True)
    spark = get_spark(cfg)
    changelog, mirror, real = f"{args.tables} tables, changelog n/a", "mirror n/a", "n/a"
    if args.only != "real-types":
        touched, created, appended, costs = changelog_costs(cfg, spark, args)
        changelog = f"{touched} tables, changelog {created:.0f} ms/table (appending to them: {appended:.0f})"
        mirror = costs.line()
    if args.only != "changelog":
        ratio, image_ratio = real_types(cfg, spark, args.real_types_events, args.warmup_real_types, args.rounds)
        real = f"{ratio:.2f}x plain Spark (the row image alone: {image_ratio:.2f}x)"
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min average)")
    print(f"database: {changelog}, {mirror}, real types {real}")


if __name__ == "__main__":
    main()
