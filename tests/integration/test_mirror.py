"""Simulator -> Kafka -> changelog -> `pipeline mirror`: the mirrors equal the source's truth, incrementally,
under duplicates, reordering, deletes and re-inserts, partition moves, schema evolution, crashes and races,
with Debezium's semantic types, TOAST placeholders and truncates (the `shop.orders` table), and after maintenance."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pytest

import pipeline.api.apply as apply_module
import tables.history as history_module
import tables.pending as pending_module
from cdc.build import one_task_a_value, spark_hash
from pipeline.api.apply import apply_changes
from pipeline.stages.changelog import ChangelogStage
from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import MirrorError, MirrorStage, watermark
from pipeline.ops.timetravel import history, query, state
from pipeline.ops.verify import source_time_us, verify_lake
from registry.factory import serde_from_settings
from simulators.simulation import Simulation, SimulationOptions
from simulators.transport import KafkaTransport
from simulators.truth import TruthStore
from tables.lake import STORAGE_PARTITIONED_JOIN, lake_table, session_conf
from tables.pending import fold, mirror_state, pending_table
from tests.conftest import PROCESS_SETTINGS, REPO

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

pytestmark = pytest.mark.integration

KEYS = {"artists": "artist_id", "artworks": "artwork_id", "employee": "employee_id", "orders": "order_id"}
FAULTS = {"duplicates": 0.03, "reorder": 0.05, "poison": 0.01}
ORDER_TYPES = {"amount": "decimal(12,2)", "status": "string", "updated_at": "timestamp_ntz", "created_at": "timestamp",
               "ship_date": "date", "pickup": "string", "tags": "string", "ref": "string", "notes": "string"}


@dataclass
class Source:
    """One simulated source database, replayable: a longer run with the same seed repeats the shorter one."""

    cfg: PipelineConfig
    prefix: str
    folder: Path

    def simulate(self, events: int) -> TruthStore:
        truth = TruthStore(self.folder / f"{self.prefix}-{events}.db")
        options = SimulationOptions(format="debezium", tables="all,shop", events=events, snapshot_rows=40, seed=11,
                                    evolve_at=500, topic_prefix=self.prefix, **FAULTS)
        Simulation(options, KafkaTransport(self.cfg.kafka), truth, serde_from_settings(self.cfg.registry, self.cfg.aws)).run(progress=False)
        return truth

    def land(self, spark, **settings) -> None:
        changelog = self.cfg.changelog.model_copy(update={"topic_pattern": rf"{self.prefix}\..*",
                                                           "checkpoint": str(self.folder / "checkpoint"), **settings})
        ChangelogStage(self.cfg.model_copy(update={"changelog": changelog}), spark).run(until_caught_up=True)

    def tables(self) -> list[str]:
        return [f"{self.prefix}_{name}" for name in KEYS]


def _configure(cfg: PipelineConfig, prefix: str, lake_format: str = "iceberg", **mirror) -> PipelineConfig:
    keys = {f"{prefix}_{name}": key for name, key in KEYS.items()}
    return cfg.model_copy(update={
        "lake": cfg.lake.model_copy(update={"format": lake_format}),
        "mirror": cfg.mirror.model_copy(update={"keys": keys, "tables": list(keys), **mirror}),
    })


def _landed_source(cfg: PipelineConfig, spark, folder: Path, tag: str,
                   **mirror) -> tuple[PipelineConfig, Source, TruthStore]:
    """A new source of 900 simulated changes, landed in the changelog; its config names its tables' keys."""
    prefix = f"{tag}{uuid.uuid4().hex[:6]}"
    cfg = _configure(cfg, prefix, **mirror)
    source = Source(cfg, prefix, folder)
    truth = source.simulate(events=900)
    source.land(spark)
    return cfg, source, truth


@pytest.fixture
def landed(landed_source) -> tuple[PipelineConfig, Source, TruthStore]:
    """The session's landed source (`tests/conftest.py`), for the tests that only read its changelog; each of
    them merges into a mirror namespace of its own (`_own_mirrors`)."""
    return landed_source


def _own_mirrors(cfg: PipelineConfig, tag: str, **mirror) -> PipelineConfig:
    """`cfg` with a mirror namespace (and pending namespace) no other test merges into."""
    namespace = f"mirror_{tag}{uuid.uuid4().hex[:6]}"
    return cfg.model_copy(update={"mirror": cfg.mirror.model_copy(
        update={"namespace": namespace, "pending_namespace": f"{namespace}_pending", **mirror})})


def _assert_equal_to_truth(cfg: PipelineConfig, spark, truth: TruthStore, tables: list[str],
                           source_time: str | None = None) -> None:
    verdicts = verify_lake(cfg, spark, truth, tables, source_time)
    assert [v.table for v in verdicts] == tables
    report = "\n".join(line for v in verdicts for line in v.lines())
    assert all(v.mismatches == 0 for v in verdicts), report
    assert all(v.rows > 0 for v in verdicts)


def _last_job(spark) -> int:
    """The id of the newest Spark job the session's application ran (-1 before any). The status store learns of a
    job from the listener bus, after the job has returned: the bus is drained first, or a job just run is missed."""
    context = spark.sparkContext._jsc.sc()
    context.listenerBus().waitUntilEmpty()
    jobs = context.statusStore().jobsList(None)
    ends = {jobs.apply(0).jobId(), jobs.apply(jobs.length() - 1).jobId()} if jobs.length() else {-1}
    return max(ends)  # the list's order (newest first or last) is the status store's


def _single_row_per_key(cfg: PipelineConfig, spark, table: str) -> None:
    key = cfg.mirror.key_columns(table)[0]
    rows, keys = mirror_state(cfg, spark, table).selectExpr("count(*)", f"count(DISTINCT {key})").first()  # one job
    assert rows == keys


# Mirror configurations merged from one changelog: (layout, write mode, delete mode) per lake format.
MIRRORS = {"iceberg": [("pending", "copy-on-write", "soft"), ("pending", "merge-on-read", "hard"),
                       ("merge", "copy-on-write", "soft")],
           "delta": [("merge", "merge-on-read", "soft")]}


@pytest.mark.parametrize("lake_format", list(MIRRORS))
def test_mirror_equals_the_source_incrementally_and_after_maintenance(lake_format: str, stack, spark,
                                                                      cfg: PipelineConfig, tmp_path: Path) -> None:
    prefix = f"mr{uuid.uuid4().hex[:6]}"
    artworks = "classification" if lake_format == "delta" else "bucket(4, artwork_id)"  # Iceberg: merged by SPJ
    cfg = _configure(cfg, prefix, lake_format,
                     partition_by={f"{prefix}_artists": "nationality", f"{prefix}_artworks": artworks})
    mirrors = [_own_mirrors(cfg, layout[:3] + write_mode[:3], layout=layout, write_mode=write_mode,
                            delete_mode=delete_mode) for layout, write_mode, delete_mode in MIRRORS[lake_format]]
    source = Source(cfg, prefix, tmp_path)
    first = source.simulate(events=900)
    source.land(spark)
    first_commits = {}
    for mirror in mirrors:
        stage = MirrorStage(mirror, spark)
        reports = stage.run_once()
        assert [r.table for r in reports] == source.tables() and all(r.changes > 0 for r in reports)
        _assert_equal_to_truth(mirror, spark, first, source.tables())
        if lake_format == "iceberg":  # Iceberg mirrors also take transforms: the artworks' files are per key bucket
            ref = f"{mirror.catalog.name}.{mirror.mirror.namespace}.{prefix}_artworks"
            partitions = spark.sql(f"SELECT partition.* FROM {ref}.partitions")
            assert partitions.columns == ["artwork_id_bucket"]
            assert {row["artwork_id_bucket"] for row in partitions.collect()} == {0, 1, 2, 3}
        artists = lake_table(mirror, spark, mirror.mirror.namespace, f"{prefix}_artists")
        first_commits[mirror.mirror.namespace] = artists.commit_id()
        # Nothing new: nothing read, nothing committed, and no Spark job run (a quiet table is told by metadata).
        jobs = _last_job(spark)
        assert all(r.changes == 0 for r in stage.run_once())
        assert _last_job(spark) == jobs
        assert artists.commit_id() == first_commits[mirror.mirror.namespace]

    # The same source runs on (its first 900 events are delivered again): the mirror reads only the new commits.
    second = source.simulate(events=1800)
    orders = lake_table(cfg, spark, cfg.changelog.namespace, f"{prefix}_orders").read()
    truncates, untoasted = orders.selectExpr("count_if(_op = 't')", "count_if(size(_unchanged) > 0)").first()
    assert truncates > 0  # truncates, and updates that left the TOASTed notes alone
    assert untoasted > 0
    landed = {t: lake_table(cfg, spark, cfg.changelog.namespace, t).read().count() for t in source.tables()}
    source.land(spark)
    # Every mirror reads the same changelog, which no merge changes: its sizes are counted once.
    totals = {t: lake_table(cfg, spark, cfg.changelog.namespace, t).read().count() for t in source.tables()}
    for mirror in mirrors:
        namespace = mirror.mirror.namespace
        for report in MirrorStage(mirror, spark).run_once():
            assert report.changes == totals[report.table] - landed[report.table]
        _assert_equal_to_truth(mirror, spark, second, source.tables())
        for table in source.tables():
            _single_row_per_key(mirror, spark, table)  # partition moves left no stale copy behind
        deleted = mirror_state(mirror, spark, f"{prefix}_artists").where("_is_deleted").count()
        assert (deleted > 0) if mirror.mirror.delete_mode == "soft" else (deleted == 0)
        catalog = spark.catalog.currentCatalog()
        current = query(mirror, spark, f"SELECT * FROM {namespace}.{prefix}_artists{mirror.mirror.view_suffix}")
        assert spark.catalog.currentCatalog() == catalog  # Delta's names resolved without moving the session
        deleted_rows, rows = current.selectExpr("count_if(_is_deleted)", "count(*)").first()  # one job
        assert deleted_rows == 0
        assert rows == len(second.state_at("moma.public.artists"))

        orders = lake_table(mirror, spark, namespace, f"{prefix}_orders").read()
        assert {c: t for c, t in orders.dtypes if c in ORDER_TYPES} == ORDER_TYPES

        # Time travel: the first merge's commit still holds the first run's rows.
        live_then = query(mirror, spark, f"SELECT * FROM {namespace}.{prefix}_artists WHERE NOT _is_deleted",
                          as_of=str(first_commits[namespace])).count()
        assert live_then == len(first.state_at("moma.public.artists"))

    # Maintenance last, once time travel no longer needs the old snapshots: it expires them.
    _assert_maintenance_keeps_the_data(mirrors[0], spark, source, second)


def test_state_as_of_source_time_and_key_history_match_the_truth(landed, spark) -> None:
    cfg, source, truth = landed
    changes = truth.changes()
    middle = changes[len(changes) // 2].commit_us
    instant = (middle // 1000) * 1000 - 1  # the last microsecond of a millisecond: Debezium's ts_ms precision
    from datetime import datetime, timezone

    as_of = datetime.fromtimestamp(instant / 1e6, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    assert source_time_us(as_of) == instant
    _assert_equal_to_truth(cfg, spark, truth, source.tables(), source_time=as_of)
    assert state(cfg, spark, source.tables()[0], as_of).count() == len(truth.state_at("moma.public.artists", instant))

    busiest = max({c.key for c in changes if c.table == "moma.public.artists"},
                  key=lambda k: len(truth.history("moma.public.artists", k)))
    expected = truth.history("moma.public.artists", busiest)
    found = history(cfg, spark, source.tables()[0], str(busiest)).collect()
    assert [r["_op"] for r in found] == [c.op for c in expected]
    assert all(r["_commit"] is not None for r in found)
    assert [r["name"] for r in found] == [c.row["name"] for c in expected]

    # One key's state, read by key (pyiceberg for Iceberg), is the whole state's row of that key.
    one = state(cfg, spark, source.tables()[0], as_of, str(busiest)).drop("_merged_at").collect()  # the clock's
    assert one == state(cfg, spark, source.tables()[0], as_of).where(f"artist_id = {busiest}").drop("_merged_at").collect()
    then = truth.state_at("moma.public.artists", instant).get(busiest)
    assert [r["name"] for r in one] == ([then["name"]] if then else [])


def test_concurrent_merges_of_one_table_leave_it_correct(landed, spark) -> None:
    cfg, source, truth = landed
    cfg = _own_mirrors(cfg, "cc")
    stages = [MirrorStage(cfg, spark), MirrorStage(cfg, spark)]
    errors: list[BaseException] = []

    def run(stage: MirrorStage) -> None:
        try:
            stage.run_once(source.tables())
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(stage,)) for stage in stages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [], [str(error)[:2000] for error in errors]
    _assert_equal_to_truth(cfg, spark, truth, source.tables())
    for table in source.tables():
        _single_row_per_key(cfg, spark, table)


def test_consistent_mode_merges_every_table_up_to_one_source_position(landed, spark) -> None:
    cfg, source, truth = landed
    cfg = _own_mirrors(cfg, "cp", consistent=True)
    stage = MirrorStage(cfg, spark)
    position = stage.common_position(source.tables())
    reports = stage.run_once()
    assert sum(r.held_back for r in reports) > 0  # the tables reached different positions
    for report in reports:
        merged = mirror_state(cfg, spark, report.table)
        assert merged.selectExpr("max(_seq.source_major)").first()[0] <= position
        if report.held_back:  # the watermark stays before the held-back rows, so they are read again
            assert report.watermark is None
    # Without the common position, the held-back rows merge and the mirrors catch up with the source.
    relaxed = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"consistent": False})})
    MirrorStage(relaxed, spark).run_once()
    _assert_equal_to_truth(relaxed, spark, truth, source.tables())


def test_tables_merge_at_once_and_one_that_fails_stops_none_of_the_others(landed, spark) -> None:
    cfg, source, truth = landed
    unkeyed = source.tables()[1]  # keyed by a column it does not have (a Debezium table's own key is learned)
    keys = {**cfg.mirror.keys, unkeyed: "no_such_column"}
    cfg = _own_mirrors(cfg, "c", keys=keys, concurrent_tables=4)
    with pytest.raises(MirrorError, match=f"mirror.keys.{unkeyed} names no_such_column, which"):
        MirrorStage(cfg, spark).run_once()
    merged = [table for table in source.tables() if table != unkeyed]
    assert all(watermark(lake_table(cfg, spark, cfg.mirror.namespace, table)) is not None for table in merged)
    assert not lake_table(cfg, spark, cfg.mirror.namespace, unkeyed).exists()
    _assert_equal_to_truth(cfg, spark, truth, merged)  # each table's own changes and watermark, in sessions of their own


def _bucketed_orders(landed, spark) -> tuple[PipelineConfig, str, str, DataFrame, DataFrame]:
    """The landed orders table (deletes, TOAST placeholders, truncates, the `coupon` column the source gains) for a
    mirror in the pending layout bucketed by its key (each bucket written by one task, one file): the
    configuration, the table, its key, and its changes up to a source position and after it. The cut leaves some of
    each kind in the later part, and deletes and placeholders in the earlier one."""
    cfg, source, _ = landed
    table = f"{source.prefix}_orders"
    key = cfg.mirror.key_columns(table)[0]
    cfg = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(
        update={"partition_by": {table: f"bucket(4, {key})"}, "layout": "pending"})})
    changes = lake_table(cfg, spark, cfg.changelog.namespace, table).read()
    cut = changes.where("_op = 't'").selectExpr("min(_seq.source_major)").first()[0] - 1
    later = changes.where(f"_seq.source_major > {cut}")
    kinds = later.selectExpr("count_if(_op = 't')", "count_if(size(_unchanged) > 0)", "count_if(_op = 'd')",
                             "count_if(coupon IS NOT NULL)").first()
    assert all(kinds), kinds
    earlier = changes.where(f"_seq.source_major <= {cut}")
    assert earlier.where("size(_unchanged) > 0 OR _op = 'd'").count() > 0
    if earlier.where("coupon IS NOT NULL").isEmpty():  # as the changelog was before the source gained it
        earlier = earlier.drop("coupon")
    return cfg, table, key, earlier, later


def _apply(spark, mirror: PipelineConfig, table: str, key: str, changes: DataFrame, **options) -> None:
    apply_changes(spark, f"{mirror.catalog.name}.{mirror.mirror.namespace}.{table}", changes, [key], "_seq",
                  apply_as_deletes="_is_deleted", config=mirror, **options)


def test_a_first_build_gives_the_rows_of_a_build_continued_incrementally(landed, spark) -> None:
    """The landed orders as one first build of every change (`tables/first_build.py`, one pass), and as a first
    build of the changes up to a source position continued by an incremental run of the rest (appended to
    pending, then folded). Every row and column is the same: the values deleted rows keep, `_unchanged`, and the
    truncates' deletions too."""
    cfg, table, key, earlier, later = _bucketed_orders(landed, spark)

    def build(tag: str, *parts) -> tuple[dict, dict]:
        """The mirror's state (the overlay) after applying `parts` in turn, then its base after a fold: by key,
        without the merge clock (`_merged_at`)."""
        mirror = _own_mirrors(cfg, tag)
        for part in parts:
            _apply(spark, mirror, table, key, part, layout=mirror.mirror.layout)
        state = {r[key]: r.asDict() for r in mirror_state(mirror, spark, table).drop("_merged_at").collect()}
        if len(parts) == 1:  # the first build wrote the base alone, each of the 4 buckets by a task of its own
            assert pending_table(mirror, spark, table).read().isEmpty()
            files = spark.sql(f"SELECT partition, file_path FROM "
                              f"{lake_table(mirror, spark, mirror.mirror.namespace, table).ref}.files").collect()
            assert len(files) == len({tuple(f["partition"]) for f in files}) == 4
            # an Iceberg data file's name starts with its task's partition: the tests' 2 shuffle partitions, not 4
            assert len({Path(f["file_path"]).name.split("-")[0] for f in files}) == 4
        fold(mirror, spark, table, full=True)  # every key: the bases are compared
        base = lake_table(mirror, spark, mirror.mirror.namespace, table).read().drop("_merged_at")
        return state, {r[key]: r.asDict() for r in base.collect()}

    whole, whole_base = build("fb", lake_table(cfg, spark, cfg.changelog.namespace, table).read())
    continued, continued_base = build("fc", earlier, later)
    assert continued == whole
    assert continued_base == whole_base
    assert sum(r["_is_deleted"] for r in whole.values()) > 0


@pytest.mark.parametrize("layout, partition", [("pending", "bucket(4, {key})"), ("merge", "bucket(4, {key})"),
                                               ("merge", "")])
def test_a_first_build_of_keys_given_once_writes_the_rows_of_the_pass(landed, spark, layout: str,
                                                                     partition: str) -> None:
    """`keys_once` (a backfill's one pass, `tables/backfill_state.py`): the changes as they are read make the
    rows the pass makes of the same changes, one a key that knows every column; bucketed by key, each bucket is
    still written by a task of its own; a count of the changes read as the keys written."""
    cfg, table, key, _, _ = _bucketed_orders(landed, spark)
    changes = lake_table(cfg, spark, cfg.changelog.namespace, table).read()
    once = (changes.where("_op IN ('r', 'c', 'u') AND size(_unchanged) = 0")
            .selectExpr("*", f"row_number() OVER (PARTITION BY {key} ORDER BY _seq DESC) AS newest")
            .where("newest = 1").drop("newest"))
    keys = once.count()
    assert keys == once.select(key).distinct().count() > 50

    def build(tag: str, keys_once: bool) -> tuple[dict, object]:
        mirror = _own_mirrors(cfg, tag, layout=layout, partition_by={table: partition.format(key=key)} if partition else {})
        applied = apply_changes(spark, f"{mirror.catalog.name}.{mirror.mirror.namespace}.{table}", once, [key], "_seq",
                                apply_as_deletes="_is_deleted", config=mirror, layout=layout, keys_once=keys_once)
        state = {r[key]: r.asDict() for r in mirror_state(mirror, spark, table).drop("_merged_at").collect()}
        files = spark.sql(f"SELECT * FROM {lake_table(mirror, spark, mirror.mirror.namespace, table).ref}.files").collect()
        return state, (applied.changes, applied.keys, files)

    passed, (read, written, _) = build("kp", keys_once=False)
    given, (read_once, written_once, files) = build("ko", keys_once=True)
    assert given == passed
    assert (read_once, written_once) == (read, written) == (keys, keys)
    if partition:  # each of the 4 buckets one file, by a task of its own
        assert len(files) == len({tuple(f["partition"]) for f in files}) == 4
        assert len({Path(f["file_path"]).name.split("-")[0] for f in files}) == 4


def test_a_first_build_shuffles_each_bucket_into_a_task_of_its_own(spark) -> None:
    """Spark's hash spreads 16 bucket numbers over 16 tasks two to a task in six of them; the first build's shuffle
    key (`one_task_a_value`, from the same hash computed here) gives each its own."""
    from pyspark.sql import functions as F

    numbers = [0, 1, 15, 1000, -1, -12345, 2**31 - 1, -2**31]
    hashed = spark.createDataFrame([(n,) for n in numbers], "n int").selectExpr("n", "hash(n) AS h").collect()
    assert [spark_hash(r["n"]) for r in hashed] == [r["h"] for r in hashed]
    for count in (4, 16):
        buckets = spark.range(count * 100).select((F.col("id") % count).cast("int").alias("b"))
        plain = buckets.repartition(count, "b").select("b", F.spark_partition_id().alias("task")).distinct()
        assert plain.select("task").distinct().count() < count  # the hash alone: two buckets share a task
        spread = buckets.repartition(count, one_task_a_value(F.col("b"), count))
        assert spread.where(F.spark_partition_id() != F.col("b")).isEmpty()


def test_the_change_records_positions_and_constant_texts_are_written_plainly_in_every_table(landed, spark) -> None:
    """`RECORD_HINTS`: in the changelog table and in the mirror built from it, the change record's positions
    (nearly one a row) are written without a dictionary, and its constant texts without one and without bounds; the
    source's own columns keep Parquet's dictionary and bounds. The pending table, empty after a first build, is
    created with the same properties."""
    from cdc.normalize import CONSTANT_TEXTS, POSITIONS, UNBOUNDED
    from tables.append import RECORD_HINTS

    cfg, source, _ = landed
    table = source.tables()[0]
    mirror = _own_mirrors(cfg, "hints")
    assert [r.table for r in MirrorStage(mirror, spark).run_once([table])] == [table]
    written = [lake_table(cfg, spark, cfg.changelog.namespace, table),
               lake_table(mirror, spark, mirror.mirror.namespace, table)]
    assert RECORD_HINTS.items() <= pending_table(mirror, spark, table).properties().items()
    for lake in written:
        chunks = _column_chunks(spark, lake.ref)
        plain = [name for name in (*POSITIONS, *CONSTANT_TEXTS) if name in chunks]
        unbounded = [name for name in UNBOUNDED if name in chunks]
        assert {"_seq.source_minor", "_source.table"} <= set(plain) and "_source.tx_id" in unbounded, lake.ref
        assert not [name for name in plain if any("DICTIONARY" in e for e in chunks[name].encodings)], lake.ref
        assert not [name for name in unbounded if chunks[name].statistics is not None
                    and chunks[name].statistics.has_min_max], lake.ref
        nationality = chunks["nationality"]
        assert any("DICTIONARY" in e for e in nationality.encodings) and nationality.statistics.has_min_max


def test_maintenance_hints_a_table_made_before_the_hints_and_keeps_a_hint_set_otherwise(landed, spark) -> None:
    """A table of change records made without `RECORD_HINTS`, as the pipeline made its tables before them, in two
    files, one hint set otherwise by its user: `maintain` adds the hints it lacks, keeps the user's, and the
    file its compaction writes has the positions without a dictionary."""
    from cdc.normalize import POSITIONS
    from tables.append import RECORD_HINTS
    from tables.lake import create_namespace
    from tables.maintenance import maintain

    cfg, source, _ = landed
    table = source.tables()[0]
    mirror = _own_mirrors(cfg, "unhinted")
    create_namespace(spark, mirror.catalog.name, mirror.mirror.namespace)
    old = lake_table(mirror, spark, mirror.mirror.namespace, table)
    theirs = "write.parquet.dict-encoding-enabled.column._seq.source_minor"
    changes = lake_table(cfg, spark, cfg.changelog.namespace, table).read().coalesce(1)
    changes.writeTo(old.ref).using("iceberg").tableProperty(theirs, "true").create()
    changes.writeTo(old.ref).append()
    assert not RECORD_HINTS.keys() - {theirs} & old.properties().keys()

    report = maintain(old, mirror.maintenance)
    assert (report.files_rewritten, report.files_added) == (2, 1)
    held = old.properties()
    assert held[theirs] == "true"
    assert {key: value for key, value in RECORD_HINTS.items() if key != theirs}.items() <= held.items()
    chunks = _column_chunks(spark, old.ref)
    assert [name for name in POSITIONS if any("DICTIONARY" in e for e in chunks[name].encodings)] == [
        "_seq.source_minor"]  # the user's hint: a dictionary of a value or two


def _column_chunks(spark, ref: str) -> dict:  # type: ignore[no-untyped-def]
    """The column chunks of the first row group of a data file of Iceberg table `ref`, by column path."""
    from urllib.parse import urlparse

    import pyarrow.parquet as pq

    path = urlparse(spark.sql(f"SELECT file_path FROM {ref}.files LIMIT 1").first()[0]).path
    group = pq.ParquetFile(path).metadata.row_group(0)
    return {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}


def test_storage_partitioned_joins_change_no_row_of_any_mirror_write(landed, spark, monkeypatch) -> None:
    """Issue 40, item 5: with the one-side shuffle on, Spark 4.1 can drop matches of storage-partitioned joins in
    plans of several joins (SPARK-59050), so the product turns them on for the single MERGE join only
    (`merge_join_conf`). Each write of a bucketed Iceberg mirror of the landed orders runs with them on for every
    plan (the four settings in the session) and off for every plan: the first build, changes appended to pending
    and folded (`maintain`'s fold), an incremental MERGE (the merge layout), and an SCD2 mirror's first build and
    fold. With them on, broadcast joins are off, so that the buckets' grouped scans replace the shuffles; off is
    Spark's defaults. The rows after each write are the same both ways, and the last ones equal the truth."""
    cfg, table, key, earlier, later = _bucketed_orders(landed, spark)
    median = later.selectExpr("median(_seq.source_major)").first()[0]

    def rows(mirror: PipelineConfig) -> list:
        return sorted(mirror_state(mirror, spark, table).drop("_merged_at").collect(), key=repr)

    def writes(tag: str) -> tuple[list[list], PipelineConfig, PipelineConfig]:
        """The rows after each write, and the SCD1 and SCD2 mirrors' configurations: each mirror's first build
        of the earlier changes, an append of later ones to pending, and a fold; then the SCD1 mirror's MERGE of
        the rest."""
        scd1, scd2 = _own_mirrors(cfg, f"{tag}1"), _own_mirrors(cfg, f"{tag}2", scd_type={table: 2})
        found = []
        for mirror, appended in ((scd1, later.where(f"_seq.source_major <= {median}")), (scd2, later)):
            scd_type = mirror.mirror.scd_type_of(table)
            for part in (earlier, appended):
                _apply(spark, mirror, table, key, part, layout="pending", stored_as_scd_type=scd_type)
                found.append(rows(mirror))
            fold(mirror, spark, table)
            found.append(rows(mirror))
        _apply(spark, scd1, table, key, later.where(f"_seq.source_major > {median}"), layout="merge")
        found.append(rows(scd1))
        return found, scd1, scd2

    unbroadcast = {"spark.sql.autoBroadcastJoinThreshold": "-1"}  # else tables this small are broadcast, not joined
    with session_conf(spark, {**unbroadcast, **STORAGE_PARTITIONED_JOIN}):  # by their buckets (grouped scans)
        joined, scd1, scd2 = writes("spj")
    for module in (pending_module, history_module, apply_module):  # every place that asks for them
        monkeypatch.setattr(module, "merge_join_conf", lambda *_: {})
    assert writes("nospj")[0] == joined
    for mirror in (scd1, scd2):
        _assert_equal_to_truth(mirror, spark, landed[2], [table])


# The killed mirror's tables, half SCD1 and half SCD2 (the orders: TOAST placeholders and truncates). The SCD1 ones
# are built together and reported first (`MirrorStage.merge_together`); the kill lands once they are committed,
# while the SCD2 ones are merged side by side, each in a session of its own.
KILLED_SCD_TYPES = {"artists": 1, "artworks": 2, "employee": 1, "orders": 2}


def test_kill_9_during_a_merge_then_rerun_yields_the_same_table(landed, spark) -> None:
    """Killed twice, inside the merge of the SCD1 tables together (`merge_together`: one write job, then a commit
    a table) and then while the SCD2 tables are merged one by one, then run to the end. For the SCD2 tables
    `verify` compares every version of every key with the truth's (duplicates, reordered deliveries, TOAST
    placeholders, truncates and the schema change are in the landed changelog); the SCD1 tables hold one row per
    key."""
    cfg, source, truth = landed
    scd_types = {f"{source.prefix}_{name}": scd_type for name, scd_type in KILLED_SCD_TYPES.items()}
    cfg = _own_mirrors(cfg, "k", scd_type=scd_types)
    keys = [f"--set=mirror.keys.{table}={cfg.mirror.key_columns(table)[0]}" for table in source.tables()]
    keys += [f"--set=mirror.scd_type.{table}={scd_type}" for table, scd_type in scd_types.items()]
    command = [sys.executable, "-m", "pipeline", "--log-format", "json", *[f"--set={s}" for s in PROCESS_SETTINGS],
               *keys, f"--set=mirror.tables={','.join(source.tables())}", f"--set=mirror.namespace={cfg.mirror.namespace}",
               "mirror"]

    def killed_at(point: str, seen: Callable[[str], bool]) -> str:
        """The line of the mirror process's log at which it was SIGKILLed: the first that `seen`."""
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert process.stdout is not None
        for line in process.stdout:
            if seen(line):
                break
        else:
            pytest.fail(f"the mirror process ended before {point}")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        return line

    # Inside the SCD1 tables' merge together: planned, their check, write and commits (one a table) to come.
    killed_at("merging tables together", lambda line: '"mirror.together_planned"' in line)
    # Rerun, and killed again once one table is merged and the others are being merged.
    line = killed_at("merging a table", lambda line: '"mirror.table"' in line and any(
        f"{t}:" in line for t in source.tables()))
    first = next(t for t in source.tables() if f"{t}:" in line)
    merged = lake_table(cfg, spark, cfg.mirror.namespace, first)
    assert watermark(merged) is not None  # the table reported merged was committed before the kill
    MirrorStage(cfg, spark).run_once()
    _assert_equal_to_truth(cfg, spark, truth, source.tables())
    for table in source.tables():
        if scd_types[table] == 1:
            _single_row_per_key(cfg, spark, table)
        else:  # one current version per key, and some keys with several
            key = cfg.mirror.key_columns(table)[0]
            current, keys, versions = mirror_state(cfg, spark, table).selectExpr(  # one job for the three
                "count_if(_is_current)", f"count(DISTINCT {key})", "count(*)").first()
            assert current == keys
            assert versions > keys


def _assert_maintenance_keeps_the_data(cfg: PipelineConfig, spark, source: Source, truth: TruthStore) -> None:
    """`maintain` compacts, expires every snapshot a watermark does not need and removes orphan files, and the
    changelog, the mirror and the next incremental run are as before (Iceberg mirrors in the pending layout: the
    changelog, the pending table and the base, folded first; Delta: the changelog and the base)."""
    from urllib.parse import urlparse

    from pipeline.ops.maintain import maintain_lake

    cfg = cfg.model_copy(update={"maintenance": cfg.maintenance.model_copy(
        update={"retain_hours": 0.0, "orphan_age_hours": 24.0})})
    iceberg = cfg.lake.format == "iceberg"
    artists = f"{source.prefix}_artists"
    pending = pending_table(cfg, spark, artists)
    waiting = spark.table(pending.ref).count() if pending is not None else 0
    assert (waiting > 0) == iceberg
    mirror = lake_table(cfg, spark, cfg.mirror.namespace, artists)
    data_file = ([r[0] for r in spark.sql(f"SELECT file_path FROM {mirror.ref}.files").collect()] if iceberg
                 else mirror.read().inputFiles())[0]
    orphan = Path(urlparse(data_file).path).parent / "orphan-from-a-failed-write.parquet"
    orphan.write_bytes(b"not referenced by any snapshot")
    two_days_ago = time.time() - 48 * 3600
    os.utime(orphan, (two_days_ago, two_days_ago))
    rows_before = {t: lake_table(cfg, spark, cfg.changelog.namespace, t).read().count() for t in source.tables()}

    reports = maintain_lake(cfg, spark, source.tables())
    assert len(reports) == (3 if iceberg else 2) * len(source.tables())
    if pending is not None:  # folded by key: what stays pending are keys whose rows need the base's values
        assert spark.table(pending.ref).count() < waiting
        assert lake_table(cfg, spark, cfg.mirror.namespace, artists).read().count() == \
            mirror_state(cfg, spark, artists).count()
    assert not orphan.exists()
    if iceberg:
        assert sum(r.files_removed or 0 for r in reports) >= 1
        assert sum(r.files_rewritten for r in reports) > 0
        assert sum(r.snapshots_expired for r in reports) > 0
    assert {t: lake_table(cfg, spark, cfg.changelog.namespace, t).read().count() for t in source.tables()} == rows_before
    _assert_equal_to_truth(cfg, spark, truth, source.tables())
    # The watermarks survived expiry: the next run finds nothing new instead of re-reading everything.
    assert all(r.changes == 0 for r in MirrorStage(cfg, spark).run_once())
