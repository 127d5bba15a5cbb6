"""The pending layout (`tables/pending.py`) against a reference model of the mirror's semantics, and the bad
input a mirror refuses. The changelog is written directly (no transport), so every case is exact: late and
duplicate events, soft deletes and resurrections, TOAST placeholders, partition moves, folds at any point."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta

import pytest

import tables.pending as pending_module
from pipeline.config.settings import PipelineConfig
from pipeline.ops.maintain import maintain_lake
from pipeline.ops.timetravel import query
from pipeline.stages.mirror import MirrorError, MirrorStage, watermark
from tables.append import IcebergAppender
from tables.catalog import load_pyiceberg_catalog
from tables.current_state import read_current_state
from tables.lake import IcebergLakeTable, lake_table
from tables.pending import WATERMARK, fold, mirror_state, pending_table

pytestmark = pytest.mark.integration

TABLE_COLUMNS = ("id", "name", "city", "notes")
TOMBSTONE = ("_op", "_seq", "_is_deleted", "_source_ts", "_deleted_at")
START = datetime(2026, 1, 1)
SCHEMA = ("id BIGINT, name STRING, city STRING, notes STRING, _op STRING, _is_deleted BOOLEAN, _source_ts TIMESTAMP, "
          "_seq STRUCT<source_major: BIGINT, source_minor: BIGINT, transport_partition: INT, transport_offset: BIGINT>, "
          "_source STRUCT<connector: STRING, db: STRING>, _unchanged ARRAY<STRING>, _batch_id BIGINT")


def _change(key: int | None, position: int, op: str, values: dict[str, str | None], unchanged: tuple[str, ...] = (),
            offset: int = 0) -> dict:
    return {"id": key, **values, "_op": op, "_is_deleted": op == "d", "_source_ts": START + timedelta(seconds=position),
            "_seq": (position, 0, 0, offset or position), "_source": ("test", "db"), "_unchanged": list(unchanged),
            "_batch_id": 0}


def _random_batches(seed: int, keys: int, batches: int, per_batch: int, late: bool = True) -> list[list[dict]]:
    """Changes of `keys` keys over `batches` batches: inserts, updates (some with TOAST placeholders for
    `notes`), deletes (key only) and re-inserts, and with `late`, delivered late (a change lands a batch or
    two after younger ones) and twice (same source position, a later transport offset, the next batch)."""
    rng = random.Random(seed)
    alive: dict[int, bool] = {}
    timeline = []
    for position in range(1, batches * per_batch + 1):
        key = rng.randrange(keys)
        if not alive.get(key):
            op, values = ("c", {"name": f"n{position}", "city": rng.choice("ABC"), "notes": f"x{position}"})
            alive[key] = True
        elif rng.random() < 0.2:
            op, values = "d", {"name": None, "city": None, "notes": None}
            alive[key] = False
        else:
            op, values = "u", {"name": f"n{position}", "city": rng.choice("ABC"), "notes": f"x{position}"}
        toast = ("notes",) if op == "u" and rng.random() < 0.4 else ()
        if toast:
            values["notes"] = "__debezium_unavailable_value"
        timeline.append(_change(key, position, op, values, toast))
    landed: list[list[dict]] = [[] for _ in range(batches + 2)]
    for change in timeline:
        batch = (change["_seq"][0] - 1) // per_batch + (rng.choice((1, 2)) if late and rng.random() < 0.1 else 0)
        landed[batch].append(change)
        if late and rng.random() < 0.05:  # delivered again later, by another transport offset
            landed[min(batch + 1, batches + 1)].append({**change, "_seq": (*change["_seq"][:3], change["_seq"][3] + 10**6)})
    return [batch for batch in landed if batch]


def _model(changes: list[dict], delete_mode: str) -> dict[int, dict]:
    """The mirror as the source's history defines it: changes applied in `_seq` order, a TOAST placeholder and
    a soft delete keeping the row's last values; a change not newer than the row is ignored."""
    rows: dict[int, dict] = {}
    for change in sorted(changes, key=lambda c: c["_seq"]):
        if change["_op"] == "t":  # every key live before it is deleted at it, keeping its values
            at = {"_op": "t", "_seq": change["_seq"], "_is_deleted": True, "_source_ts": change["_source_ts"],
                  "_deleted_at": change["_source_ts"]}
            rows.update({key: {**row, **at} for key, row in rows.items() if not row["_is_deleted"]})
            continue
        row = rows.get(change["id"])
        if row is not None and row["_seq"] >= change["_seq"]:
            continue
        new = {c: change[c] for c in (*TABLE_COLUMNS, *TOMBSTONE[:4])}
        new["_deleted_at"] = change["_source_ts"] if change["_is_deleted"] else None
        kept = TABLE_COLUMNS[1:] if change["_is_deleted"] else change["_unchanged"]
        if row is not None:
            new.update({c: row[c] for c in kept})
        elif not change["_is_deleted"]:  # a placeholder with no value before it: unknown
            new.update({c: None for c in kept})
        rows[change["id"]] = new
    if delete_mode == "hard":
        return {k: r for k, r in rows.items() if not r["_is_deleted"]}
    return rows


def _state(frame) -> dict[int, dict]:
    return {row["id"]: {c: (tuple(row[c]) if c == "_seq" else row[c]) for c in (*TABLE_COLUMNS, *TOMBSTONE)}
            for row in frame.collect()}


def _pyiceberg_state(cfg: PipelineConfig, name: str) -> dict[int, dict]:
    """The current state as a pyiceberg user reads it (`tables.current_state`), in `_state`'s shape."""
    catalog = load_pyiceberg_catalog(cfg.catalog, cfg.aws)
    rows = read_current_state(catalog, f"{cfg.mirror.namespace}.{name}", ["id"],
                              pending_namespace=cfg.mirror.pending_namespace, delete_mode=cfg.mirror.delete_mode)
    def spark_like(value):  # Spark hands timestamps back naive, in the session's (here the machine's) zone
        if isinstance(value, dict):
            return tuple(value.values())
        return value.astimezone().replace(tzinfo=None) if isinstance(value, datetime) else value

    return {row["id"]: {c: spark_like(row[c]) for c in (*TABLE_COLUMNS, *TOMBSTONE)} for row in rows.to_pylist()}


def _pending_changes(spark, pending: str) -> set[tuple[int, tuple]]:
    """Each pending change as (key, `_seq`)."""
    return {(row["id"], tuple(row["_seq"])) for row in spark.table(pending).select("id", "_seq").collect()}


def _assert_folded_by_key(cfg: PipelineConfig, spark, name: str, waiting: set[tuple[int, tuple]]) -> None:
    """A fold by key (`tables.pending.fold`) wrote the keys whose newest change knows every column and left the
    others pending, each with all its changes: here the TOAST placeholders and, with soft deletes, the deletes."""
    kept = _pending_changes(spark, pending_table(cfg, spark, name).ref)
    kept_keys = {key for key, _ in kept}
    assert kept == {(key, seq) for key, seq in waiting if key in kept_keys}
    assert kept_keys and kept_keys != {key for key, _ in waiting}, "the fold wrote every key or none"
    base = {row["id"]: tuple(row["_seq"]) for row in lake_table(cfg, spark, cfg.mirror.namespace, name).read().collect()}
    for key in {key for key, _ in waiting} - kept_keys:  # written: its newest change is the base row, or deleted it
        assert base.get(key, max(seq for k, seq in waiting if k == key)) == max(seq for k, seq in waiting if k == key)
    assert kept_keys <= base.keys()  # a key the base did not hold is always written


def _base_summary(cfg: PipelineConfig, spark, name: str) -> dict[str, str]:
    """The summary of the base's newest snapshot."""
    base = lake_table(cfg, spark, cfg.mirror.namespace, name).ref
    return dict(spark.sql(f"SELECT summary FROM {base}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0])


def _setup(cfg: PipelineConfig, spark, **mirror) -> tuple[PipelineConfig, str, IcebergAppender]:
    cfg, names, appender = _setup_tables(cfg, spark, 1, **mirror)
    return cfg, names[0], appender


def _setup_tables(cfg: PipelineConfig, spark, count: int,
                  **mirror) -> tuple[PipelineConfig, list[str], IcebergAppender]:
    tag = uuid.uuid4().hex[:6]
    names = [f"layout_{tag}"] if count == 1 else [f"layout_{tag}_{i}" for i in range(count)]
    cfg = cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"namespace": f"changelog_{tag}"}),
        "mirror": cfg.mirror.model_copy(update={"namespace": f"mirror_{tag}", "pending_namespace": f"pending_{tag}",
                                                "keys": {name: "id" for name in names}, "tables": names,
                                                "partition_by": {name: "city" for name in names}, **mirror})})
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{cfg.changelog.namespace}")
    return cfg, names, IcebergAppender(spark, f"{cfg.catalog.name}.{cfg.changelog.namespace}")


def _land(spark, appender: IcebergAppender, name: str, rows: list[dict], batch: int) -> None:
    frame = spark.createDataFrame([{**r, "_seq": tuple(r["_seq"])} for r in rows], SCHEMA)
    appender.append(frame.withColumn("_batch_id", frame["_batch_id"] + batch), name, "test", batch)


@pytest.mark.parametrize("delete_mode", ["soft", "hard"])
def test_pending_layout_equals_the_model_before_and_after_folds(delete_mode: str, cfg: PipelineConfig, spark) -> None:
    cfg, name, appender = _setup(cfg, spark, delete_mode=delete_mode)
    stage = MirrorStage(cfg, spark)
    # A hard delete forgets its key once folded: an older change of the key arriving after that comes back, as
    # with the merge layout. So the hard case lands its changes in order.
    batches = _random_batches(seed=7, keys=40, batches=6, per_batch=50, late=delete_mode == "soft")
    landed: list[dict] = []
    for number, batch in enumerate(batches):
        _land(spark, appender, name, batch, number)
        landed += batch
        stage.merge_table(name)
        pending = pending_table(cfg, spark, name)
        assert pending is not None
        if number == 0:  # the first run builds the base: its changes are folded at once
            assert spark.table(pending.ref).count() == 0 and lake_table(cfg, spark, cfg.mirror.namespace, name).read().count() > 0
        expected = _model(landed, delete_mode)
        assert _state(mirror_state(cfg, spark, name)) == expected, f"after batch {number}"
        assert _pyiceberg_state(cfg, name) == expected, f"pyiceberg after batch {number}"
        view = f"{cfg.catalog.name}.{cfg.mirror.namespace}.{name}{cfg.mirror.view_suffix}"
        assert _state(spark.table(view)) == {k: r for k, r in expected.items() if not r["_is_deleted"]}
        if number == 2:  # a state that lives in the pending table, for time travel below
            then = (pending.commit_id(), expected)
        if number == 3:
            waiting = _pending_changes(spark, pending.ref)
            assert fold(cfg, spark, name) > 0  # a fold in the middle changes nothing a reader sees
            _assert_folded_by_key(cfg, spark, name, waiting)
            folded = _base_summary(cfg, spark, name)  # merged on read: position deletes, no rewrite of the base
            assert int(folded.get("added-position-delete-files", 0)) > 0 and "deleted-data-files" not in folded
            assert _state(mirror_state(cfg, spark, name)) == expected
            assert _pyiceberg_state(cfg, name) == expected
    # Re-running the last batch's changes (a lost watermark) and folding twice change nothing either.
    _land(spark, appender, name, batches[-1], len(batches))
    stage.merge_table(name)
    reports = maintain_lake(cfg, spark, [name])
    assert len(reports) == 3  # the changelog, the pending table and the base
    base_ref = lake_table(cfg, spark, cfg.mirror.namespace, name).ref  # compacted: no delete file is left
    assert spark.sql(f"SELECT count(*) FROM {base_ref}.delete_files").first()[0] == 0
    fold(cfg, spark, name, full=True)  # and what a fold by key leaves pending
    assert spark.table(pending_table(cfg, spark, name).ref).count() == 0
    assert fold(cfg, spark, name) == 0
    expected = _model(landed, delete_mode)
    base = lake_table(cfg, spark, cfg.mirror.namespace, name).read()
    assert _state(base) == expected  # folded: the base itself holds the current state
    assert base.count() == base.select("id").distinct().count()  # partition moves left no stale copy
    assert all(r.changes == 0 for r in stage.run_once())  # the watermark survived the fold and the expiry
    # Time travel to a pending commit: the base and the pending table as they were then.
    past = query(cfg, spark, f"SELECT * FROM {cfg.mirror.namespace}.{name}", as_of=str(then[0]))
    assert _state(past) == then[1]


def test_tables_whose_changes_only_append_are_merged_together(cfg: PipelineConfig, spark) -> None:
    """A run checks and appends the changes of its tables in the pending layout together (one check, one write:
    `MirrorStage.merge_together`), late and twice-delivered changes included, small first builds too (their base
    written, views made); a table that needs more (a larger first build, a truncate, new columns) is
    merged alone in the same run, and one whose changes fail a check is named while the others merge."""
    cfg, names, appender = _setup_tables(cfg, spark, 4)
    plain, widening, truncating, tied = names
    history = {name: _random_batches(seed=11 + i, keys=25, batches=3, per_batch=30, late=name != truncating)
               for i, name in enumerate(names)}
    batches = {name: [*found[:2], [c for batch in found[2:] for c in batch]] for name, found in history.items()}
    landed: dict[str, list[dict]] = {name: [] for name in names}

    def land(name: str, number: int, rows: list[dict], schema: str = SCHEMA) -> None:
        frame = spark.createDataFrame([{**r, "_seq": tuple(r["_seq"])} for r in rows], schema)
        appender.append(frame.withColumn("_batch_id", frame["_batch_id"] + number), name, "test", number)
        landed[name] += rows

    def reports(stage: MirrorStage) -> dict[str, object]:
        found = {report.table: report for report in stage.run_once()}
        for name in found:
            assert _state(mirror_state(cfg, spark, name)) == _model(landed[name], "soft"), name
        return found

    for name in names:
        land(name, 0, batches[name][0])
    # A first build of at most `mirror.pending_build_rows` changelog rows is written together with the others; a
    # larger one alone. Both write the base.
    limit = min(len(batches[name][0]) for name in names)
    small = [name for name in names if len(batches[name][0]) <= limit]
    assert 0 < len(small) < len(names)
    first = reports(MirrorStage(cfg.model_copy(update={
        "mirror": cfg.mirror.model_copy(update={"pending_build_rows": limit})}), spark))
    for name in names:
        assert first[name].together == (len(small) if name in small else 1), name
        assert not lake_table(cfg, spark, cfg.mirror.namespace, name).read().isEmpty(), name
        assert spark.table(pending_table(cfg, spark, name).ref).isEmpty(), name
    views = {v["viewName"] for v in spark.sql(f"SHOW VIEWS IN {cfg.catalog.name}.{cfg.mirror.namespace}").collect()}
    assert {f"{name}{cfg.mirror.view_suffix}" for name in names} <= views
    for name in small:  # the views of the mirrors built together, made from the columns their planning read
        model = _model(landed[name], "soft")
        current = spark.table(f"{cfg.catalog.name}.{cfg.mirror.namespace}.{name}{cfg.mirror.view_suffix}")
        assert _state(current) == {k: r for k, r in model.items() if not r["_is_deleted"]}, name
        latest = spark.table(f"{cfg.catalog.name}.{cfg.changelog.namespace}.{name}{cfg.mirror.latest_view_suffix}")
        assert latest.count() == len(model) and set(latest.columns) >= {"id", "name", "_seq"}, name
    for name in names:
        land(name, 1, batches[name][1])
    second = reports(MirrorStage(cfg, spark))
    assert {name: (second[name].together, second[name].changes) for name in names} == {
        name: (4, len(batches[name][1])) for name in names}
    assert all(pending_table(cfg, spark, name).commit_metadata(WATERMARK)[1] == str(second[name].watermark)
               for name in names)
    # where each mirror stands, looked up in the JVM for all tables at once (jvm/cdc `Positions`): as each
    # table's own metadata says, and nothing for a table never mirrored
    positions = MirrorStage(cfg, spark).positions([*names, "never_mirrored"])
    assert positions["never_mirrored"] is None
    for name in names:
        at, changelog = positions[name], lake_table(cfg, spark, cfg.changelog.namespace, name)
        assert at is not None and at.pending and at.through == changelog.commit_id(), name
        assert at.merged == watermark(lake_table(cfg, spark, cfg.mirror.namespace, name),
                                      pending_table(cfg, spark, name)) == second[name].watermark, name
    appended = spark.table(pending_table(cfg, spark, plain).ref)  # a placeholder is stored as null, and listed
    assert appended.where("array_contains(_unchanged, 'notes')").count() > 0
    assert appended.where("notes = '__debezium_unavailable_value' OR _merged_at IS NULL").count() == 0

    # A truncate (no key) goes alone; a tie stops its table, named, with its watermark where it was.
    truncate = _change(None, 95, "t", {"name": None, "city": None, "notes": None}, offset=10**7)
    land(truncating, 2, [*batches[truncating][2], truncate])
    tie = [_change(1, 10**6, "u", {"name": name, "city": "A", "notes": "x"}) for name in ("a", "b")]
    land(tied, 2, [*batches[tied][2], *tie])
    land(plain, 2, batches[plain][2][:10])
    before = watermark(lake_table(cfg, spark, cfg.mirror.namespace, tied), pending_table(cfg, spark, tied))
    with pytest.raises(MirrorError, match=f"{tied}: 1 key\\(s\\) have different changes with the same _seq, "
                                          r'e.g. key \{"id":1\} at _seq'):
        MirrorStage(cfg, spark).run_once()
    assert watermark(lake_table(cfg, spark, cfg.mirror.namespace, tied), pending_table(cfg, spark, tied)) == before
    for name in (plain, truncating):
        assert _state(mirror_state(cfg, spark, name)) == _model(landed[name], "soft"), name
    assert any(row["_op"] == "t" for row in _state(mirror_state(cfg, spark, truncating)).values())

    # A new column goes alone; the others, the truncated table among them, together again.
    cfg = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"tables": [plain, widening, truncating]})})
    land(plain, 3, batches[plain][2][10:])
    land(truncating, 3, [_change(k, 100 + k, "c", {"name": f"t{k}", "city": "B", "notes": "y"}) for k in range(5)])
    land(widening, 3, [{**r, "extra": f"e{r['_seq'][0]}"} for r in batches[widening][2]], f"{SCHEMA}, extra STRING")
    third = reports(MirrorStage(cfg, spark))
    assert (third[plain].together, third[truncating].together, third[widening].together) == (2, 2, 1)
    assert mirror_state(cfg, spark, widening).where("extra IS NOT NULL").count() > 0


@pytest.mark.parametrize("delete_mode", ["soft", "hard"])
def test_a_small_first_build_resolved_by_its_writing_task_equals_the_one_pass_build(delete_mode: str,
                                                                                     cfg: PipelineConfig, spark) -> None:
    """New small mirrors built together, each resolved by the task that writes it (`cdc.spark.MirrorRows`), hold
    exactly the rows of the one-pass build a large one gets (`cdc/build.py`) and of the model: late and
    twice-delivered changes, TOAST placeholders with and without an earlier value, deletes of keys never seen,
    resurrections. A first build whose changes hold a truncate or a tie is left to be built alone: the truncate
    is applied there, the tie named, and nothing of it committed."""
    cfg, names, appender = _setup_tables(cfg, spark, 5, delete_mode=delete_mode, partition_by={})
    first, second, large, truncating, tied = names
    landed = {name: [c for batch in _random_batches(seed=5 + (name == second), keys=30, batches=3, per_batch=40)
                     for c in batch] for name in names}
    for name in names:  # a delete of a key never seen, and a placeholder no earlier change fills
        landed[name] += [_change(1000, 300, "d", {"name": None, "city": None, "notes": None}),
                         _change(1001, 301, "u", {"name": "n", "city": "C", "notes": "__debezium_unavailable_value"},
                                 ("notes",))]
    landed[truncating] += [_change(None, 70, "t", {"name": None, "city": None, "notes": None}, offset=10**7),
                           _change(3, 200, "c", {"name": "after", "city": "B", "notes": "y"})]
    landed[tied] += [_change(1, 10**6, "u", {"name": name, "city": "A", "notes": "x"}) for name in ("a", "b")]
    for name in names:
        _land(spark, appender, name, landed[name], 0)

    reports = {r.table: r for r in MirrorStage(cfg, spark).run_once([first, second, truncating])}
    assert (reports[first].together, reports[second].together, reports[truncating].together) == (2, 2, 1)
    alone = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"pending_build_rows": 0})})
    assert MirrorStage(alone, spark).run_once([large])[0].together == 1
    for name in (first, second, large, truncating):
        expected = _model(landed[name], delete_mode)
        assert _state(lake_table(cfg, spark, cfg.mirror.namespace, name).read()) == expected, name
        assert reports.get(name) is None or reports[name].merged == len({c["id"] for c in landed[name]} - {None})
    assert reports[first].changes == len(landed[first])

    def base(name: str) -> list[dict]:  # every column but the run's time, `_unchanged` included
        rows = lake_table(cfg, spark, cfg.mirror.namespace, name).read().drop("_merged_at").collect()
        return sorted((row.asDict(recursive=True) for row in rows), key=lambda row: row["id"])

    assert base(first) == base(large)
    assert any(row["_unchanged"] for row in base(first))  # a placeholder no earlier change knew

    with pytest.raises(MirrorError, match=f"{tied}: 1 key\\(s\\) have different changes with the same _seq"):
        MirrorStage(cfg, spark).run_once([tied])
    assert watermark(lake_table(cfg, spark, cfg.mirror.namespace, tied), pending_table(cfg, spark, tied)) is None
    assert lake_table(cfg, spark, cfg.mirror.namespace, tied).read().isEmpty()


@pytest.mark.parametrize("stopped_at", ["append_pending", "remove_files_of"])
def test_a_fold_stopped_after_any_of_its_commits_changes_nothing_a_reader_sees(stopped_at: str, cfg: PipelineConfig,
                                                                               spark, monkeypatch) -> None:
    """A fold by key commits three times: the MERGE into the base, the kept keys' changes appended to pending, the
    folded pending files removed. Stopped before the second or the third (a kill at that point: each commit is
    whole or absent), the state is the model's; the next fold and a fold of every key finish the work."""
    cfg, name, appender = _setup(cfg, spark)
    batches = _random_batches(seed=11, keys=40, batches=4, per_batch=50)
    for number, batch in enumerate(batches):
        _land(spark, appender, name, batch, number)
        MirrorStage(cfg, spark).merge_table(name)
    expected = _model([c for b in batches for c in b], "soft")
    base = lake_table(cfg, spark, cfg.mirror.namespace, name)
    before = base.commit_id()

    def stop(*_args, **_kwargs):
        raise RuntimeError("killed")

    with monkeypatch.context() as patched:
        owner = pending_module if stopped_at == "append_pending" else IcebergLakeTable
        patched.setattr(owner, stopped_at, stop)
        with pytest.raises(RuntimeError, match="killed"):
            fold(cfg, spark, name)
    assert base.commit_id() != before  # the MERGE committed
    assert _state(mirror_state(cfg, spark, name)) == expected
    fold(cfg, spark, name)
    assert _state(mirror_state(cfg, spark, name)) == expected
    fold(cfg, spark, name, full=True)
    assert spark.table(pending_table(cfg, spark, name).ref).count() == 0
    assert _state(lake_table(cfg, spark, cfg.mirror.namespace, name).read()) == expected


def test_switching_back_to_the_merge_layout_folds_the_pending_changes_first(cfg: PipelineConfig, spark) -> None:
    cfg, name, appender = _setup(cfg, spark)
    batches = _random_batches(seed=3, keys=20, batches=3, per_batch=30)
    for number, batch in enumerate(batches[:2]):
        _land(spark, appender, name, batch, number)
        MirrorStage(cfg, spark).merge_table(name)
    merging = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"layout": "merge"})})
    for number, batch in enumerate(batches[2:], start=2):  # the late changes land in a batch or two more
        _land(spark, appender, name, batch, number)
    MirrorStage(merging, spark).merge_table(name)
    assert pending_table(cfg, spark, name) is None
    # The newest change of each key won (the MERGE's own rules for values: cdc/merge.py).
    newest = ("_seq", "_is_deleted")
    merged = _state(lake_table(cfg, spark, cfg.mirror.namespace, name).read())
    expected = _model([c for b in batches for c in b], "soft")
    assert {k: [r[c] for c in newest] for k, r in merged.items()} == {k: [r[c] for c in newest] for k, r in expected.items()}


def test_a_change_without_its_key_stops_the_run_before_anything_is_written(cfg: PipelineConfig, spark) -> None:
    cfg, name, appender = _setup(cfg, spark)
    _land(spark, appender, name, [_change(1, 1, "c", {"name": "a", "city": "A", "notes": "x"})], 0)
    MirrorStage(cfg, spark).merge_table(name)
    mirror = lake_table(cfg, spark, cfg.mirror.namespace, name)
    before = watermark(mirror)
    _land(spark, appender, name, [_change(None, 2, "u", {"name": "b", "city": "A", "notes": "y"})], 1)
    with pytest.raises(MirrorError, match=r"1 change\(s\) with a null key column \(id\).*mirror.keys"):
        MirrorStage(cfg, spark).merge_table(name)
    assert watermark(mirror, pending_table(cfg, spark, name)) == before


def test_two_different_changes_of_a_key_at_one_position_stop_the_run(cfg: PipelineConfig, spark) -> None:
    cfg, name, appender = _setup(cfg, spark)
    _land(spark, appender, name, [_change(1, 1, "c", {"name": "a", "city": "A", "notes": "x"}),
                                  _change(1, 5, "u", {"name": "b", "city": "A", "notes": "x"}),
                                  _change(1, 5, "u", {"name": "c", "city": "A", "notes": "x"})], 0)
    with pytest.raises(MirrorError, match=r"different changes with the same _seq, e.g. .*\"id\":1"):
        MirrorStage(cfg, spark).merge_table(name)
    # The same change delivered twice at one position is no conflict.
    cfg, name, appender = _setup(cfg, spark)
    _land(spark, appender, name, [_change(1, 5, "c", {"name": "b", "city": "A", "notes": "x"})] * 2, 0)
    assert MirrorStage(cfg, spark).merge_table(name).merged == 1


def test_a_key_type_change_widens_the_mirror_or_stops_with_the_fix(cfg: PipelineConfig, spark) -> None:
    cfg, name, appender = _setup(cfg, spark)
    narrow = SCHEMA.replace("id BIGINT", "id INT")
    first = [_change(1, 1, "c", {"name": "a", "city": "A", "notes": "x"})]
    appender.append(spark.createDataFrame(first, narrow), name, "test", 0)
    MirrorStage(cfg, spark).merge_table(name)
    _land(spark, appender, name, [_change(2, 2, "c", {"name": "b", "city": "A", "notes": "x"})], 1)  # id BIGINT now
    MirrorStage(cfg, spark).merge_table(name)
    mirror = lake_table(cfg, spark, cfg.mirror.namespace, name)
    assert dict(mirror.read().dtypes)["id"] == "bigint"
    assert sorted(r["id"] for r in mirror_state(cfg, spark, name).collect()) == [1, 2]

    # A changelog recreated with the key as text (a type no widening reaches): the run stops and names the fix.
    changelog = f"{cfg.catalog.name}.{cfg.changelog.namespace}.{name}"
    spark.sql(f"DROP TABLE {changelog}")
    appender.append(spark.createDataFrame([{**first[0], "id": "1"}], SCHEMA.replace("id BIGINT", "id STRING")),
                    name, "test", 2)
    with pytest.raises(MirrorError, match="key column id is string in the changelog but bigint in the mirror.*Rebuild"):
        MirrorStage(cfg, spark).merge_table(name)
