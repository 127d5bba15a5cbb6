"""SCD2 mirrors (`mirror.scd_type.<t> = 2`, `tables/history.py`) against a reference model of versions: late and
duplicate changes, deletes and re-inserts, TOAST placeholders, untracked columns, folds, re-runs, both lake
formats; and the bad input that stops a run before anything is written."""

from __future__ import annotations

import uuid

import pytest

from cdc.merge import Relations
from pipeline.config.settings import PipelineConfig
from pipeline.ops.maintain import maintain_lake
from pipeline.ops.timetravel import query
from pipeline.stages.mirror import MirrorError, MirrorStage, watermark
from tables.append import DeltaAppender, IcebergAppender
from tables.lake import lake_table
from tables.pending import fold, mirror_state, pending_table
from tests.integration.test_mirror_layout import SCHEMA, TABLE_COLUMNS, _base_summary, _change, _random_batches

pytestmark = pytest.mark.integration

VERSION = ("_seq_from", "_seq_to", "_seq", "_valid_from", "_valid_to", "_is_current", "_is_deleted")


def _versions(changes: list[dict], tracked: tuple[str, ...]) -> dict[tuple, dict]:
    """The versions the source's history defines, (key, `_seq_from`) -> row: changes in `_seq` order, each column
    carried from the newest earlier change that knew it (a delete and a TOAST placeholder know none / not
    theirs); a change whose deletion and `tracked` values equal the previous one's updates that version."""
    rows: dict[tuple, dict] = {}
    last: dict[int, tuple[tuple, tuple]] = {}  # key -> (its newest version's id, its signature)
    known: dict[int, dict] = {}
    for change in sorted(changes, key=lambda c: c["_seq"]):
        key = change["id"]
        values = known.setdefault(key, {})
        for column in TABLE_COLUMNS[1:]:
            if not change["_is_deleted"] and column not in change["_unchanged"]:
                values[column] = change[column]
        row = {c: values.get(c, change[c] if c not in change["_unchanged"] else None) for c in TABLE_COLUMNS[1:]}
        signature = (change["_is_deleted"], *[row[c] for c in tracked])
        if key in last and last[key][1] == signature:
            rows[last[key][0]].update(row, _seq=tuple(change["_seq"]))
            continue
        at = (key, tuple(change["_seq"]))
        if key in last:
            rows[last[key][0]].update(_seq_to=at[1], _valid_to=change["_source_ts"], _is_current=False)
        rows[at] = {"id": key, **row, "_seq_from": at[1], "_seq_to": None, "_seq": at[1],
                    "_valid_from": change["_source_ts"], "_valid_to": None, "_is_current": True,
                    "_is_deleted": change["_is_deleted"]}
        last[key] = (at, signature)
    return rows


def _state(frame) -> dict[tuple, dict]:
    def plain(value):
        return tuple(value) if isinstance(value, tuple) or hasattr(value, "asDict") else value
    return {(row["id"], tuple(row["_seq_from"])): {c: plain(row[c]) for c in (*TABLE_COLUMNS, *VERSION)}
            for row in frame.collect()}


def _setup(cfg: PipelineConfig, spark, lake_format: str = "iceberg", **mirror):
    tag = uuid.uuid4().hex[:6]
    name = f"history_{tag}"
    cfg = cfg.model_copy(update={
        "lake": cfg.lake.model_copy(update={"format": lake_format}),
        "changelog": cfg.changelog.model_copy(update={"namespace": f"changelog_{tag}"}),
        "mirror": cfg.mirror.model_copy(update={"namespace": f"mirror_{tag}", "pending_namespace": f"pending_{tag}",
                                                "keys": {name: "id"}, "tables": [name], "scd_type": {name: 2},
                                                **mirror})})
    if lake_format == "delta":
        return cfg, name, DeltaAppender(spark, f"{cfg.lake.delta_root}/{cfg.changelog.namespace}")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{cfg.changelog.namespace}")
    return cfg, name, IcebergAppender(spark, f"{cfg.catalog.name}.{cfg.changelog.namespace}")


def _land(spark, appender, name: str, rows: list[dict], batch: int) -> None:
    appender.append(spark.createDataFrame([{**r, "_seq": tuple(r["_seq"]), "_batch_id": batch} for r in rows], SCHEMA),
                    name, "test", batch)


def test_versions_equal_the_model_with_late_and_duplicate_changes_folds_and_reruns(cfg: PipelineConfig, spark) -> None:
    cfg, name, appender = _setup(cfg, spark)
    stage = MirrorStage(cfg, spark)
    batches = _random_batches(seed=5, keys=30, batches=4, per_batch=40)
    landed: list[dict] = []
    for number, batch in enumerate(batches):
        _land(spark, appender, name, batch, number)
        landed += batch
        stage.merge_table(name)
        expected = _versions(landed, TABLE_COLUMNS[1:])
        assert _state(mirror_state(cfg, spark, name)) == expected, f"after batch {number}"
        if number == 0:  # the first run builds the table's versions straight away
            assert spark.table(pending_table(cfg, spark, name).ref).count() == 0
        if number == 1:  # versions that live in the pending table, for time travel below
            then = (pending_table(cfg, spark, name).commit_id(), expected)
        if number == 2:
            assert fold(cfg, spark, name) > 0  # a fold in the middle changes nothing a reader sees
            assert _state(mirror_state(cfg, spark, name)) == expected
            folded = _base_summary(cfg, spark, name)  # merged on read: position deletes, no rewrite of the base
            assert int(folded.get("added-position-delete-files", 0)) > 0 and "deleted-data-files" not in folded
    views = f"{cfg.catalog.name}.{cfg.mirror.namespace}.{name}"
    assert _state(spark.table(f"{views}_history")) == expected
    current = {k: r for k, r in expected.items() if r["_is_current"] and not r["_is_deleted"]}
    assert _state(spark.table(f"{views}_current")) == current
    assert _state(spark.table(f"{views}_deleted")) == {k: r for k, r in expected.items()
                                                        if r["_is_current"] and r["_is_deleted"]}
    assert any(r["_is_deleted"] and not r["_is_current"] for r in expected.values())  # a delete, then a re-insert
    # A lost watermark: the last batch again, then the fold; nothing changes, and the base holds the versions.
    _land(spark, appender, name, batches[-1], len(batches))
    stage.merge_table(name)
    maintain_lake(cfg, spark, [name])
    base = lake_table(cfg, spark, cfg.mirror.namespace, name)
    assert _state(base.read()) == expected
    assert spark.sql(f"SELECT count(*) FROM {base.ref}.delete_files").first()[0] == 0  # compacted
    assert all(r.changes == 0 for r in stage.run_once())
    # Time travel to a pending commit: the versions readers saw then.
    assert _state(query(cfg, spark, f"SELECT * FROM {cfg.mirror.namespace}.{name}", as_of=str(then[0]))) == then[1]


def test_merge_layout_versions_track_the_chosen_columns(cfg: PipelineConfig, spark) -> None:
    """On Delta (the merge layout's MERGE of versions; Iceberg's is docs/api.md's example, with an except list)."""
    cfg, name, appender = _setup(cfg, spark, "delta", layout="merge")
    cfg = cfg.model_copy(update={"mirror": cfg.mirror.model_copy(update={"track_history_columns": {name: "city"}})})
    # In order: a late change inside a version that absorbed changes of untracked columns is the case a version
    # row cannot rebuild exactly (cdc/scd2.py); late and duplicate changes are the test above's.
    batches = _random_batches(seed=9, keys=15, batches=3, per_batch=30, late=False)
    landed: list[dict] = []
    for number, batch in enumerate(batches):
        _land(spark, appender, name, batch, number)
        landed += batch
        MirrorStage(cfg, spark).merge_table(name)
    expected = _versions(landed, ("city",))
    assert pending_table(cfg, spark, name) is None
    assert _state(lake_table(cfg, spark, cfg.mirror.namespace, name).read()) == expected
    assert len(expected) < len(_versions(landed, TABLE_COLUMNS[1:]))  # a change of name alone opened none


def test_bad_input_stops_an_scd2_run_before_anything_is_written(cfg: PipelineConfig, spark) -> None:
    cfg, name, appender = _setup(cfg, spark)
    _land(spark, appender, name, [_change(1, 1, "c", {"name": "a", "city": "A", "notes": "x"})], 0)
    MirrorStage(cfg, spark).merge_table(name)
    mirror = lake_table(cfg, spark, cfg.mirror.namespace, name)
    before = watermark(mirror, pending_table(cfg, spark, name))
    untimed = {**_change(1, 2, "u", {"name": "b", "city": "A", "notes": "y"}), "_source_ts": None}
    _land(spark, appender, name, [untimed], 1)
    with pytest.raises(MirrorError, match=rf"{name}: 1 change\(s\) without a source time \(_source_ts\).*"
                                          rf"mirror.scd_type.{name} = 1"):
        MirrorStage(cfg, spark).merge_table(name)
    unordered = {**_change(1, 3, "u", {"name": "c", "city": "A", "notes": "y"}), "_seq": (None, 0, 0, 9)}
    _land(spark, appender, name, [unordered], 2)
    with pytest.raises(MirrorError, match=rf"{name}: .*with a null _seq"):
        MirrorStage(cfg, spark).merge_table(name)
    assert watermark(mirror, pending_table(cfg, spark, name)) == before


def test_a_first_build_checks_the_changes_in_its_pass_and_writes_nothing_when_one_fails(cfg: PipelineConfig,
                                                                                        spark) -> None:
    """An SCD2 mirror's first build (`first_history_build`) checks as it writes: a change without a source time
    or a position, or two different changes of a key at one `_seq`, stops it with the check's message and leaves
    no table; the changes without them then build the model's versions, with the keys counted."""
    good = [_change(1, 1, "c", {"name": "a", "city": "A", "notes": "x"}),
            _change(1, 2, "u", {"name": "b", "city": "B", "notes": "y"}),
            _change(2, 3, "c", {"name": "c", "city": "A", "notes": "z"}),
            _change(2, 4, "d", {"name": None, "city": None, "notes": None})]
    untimed = {**_change(3, 5, "c", {"name": "d", "city": "A", "notes": "w"}), "_source_ts": None}
    tied = [_change(4, 6, "c", {"name": "e", "city": "A", "notes": "v"}),
            _change(4, 6, "c", {"name": "f", "city": "A", "notes": "v"})]
    unordered = {**_change(3, 5, "c", {"name": "d", "city": "A", "notes": "w"}), "_seq": (None, 0, 0, 9)}
    for bad, message in (((untimed,), r"1 change\(s\) without a source time"), (tied, r"1 key\(s\) have different"),
                         ((unordered,), r"1 change\(s\) with a null _seq")):
        failing, name, appender = _setup(cfg, spark)
        _land(spark, appender, name, [*good, *bad], 0)
        with pytest.raises(MirrorError, match=rf"{name}: {message}"):
            MirrorStage(failing, spark).merge_table(name)
        assert not lake_table(failing, spark, failing.mirror.namespace, name).exists()
    cfg, name, appender = _setup(cfg, spark)
    _land(spark, appender, name, good, 0)
    report = MirrorStage(cfg, spark).merge_table(name)
    assert (report.changes, report.merged) == (4, 2)
    assert _state(lake_table(cfg, spark, cfg.mirror.namespace, name).read()) == _versions(good, TABLE_COLUMNS[1:])
    assert spark.table(pending_table(cfg, spark, name).ref).count() == 0


@pytest.mark.parametrize("tracked", [TABLE_COLUMNS[1:], ("city",)])
def test_the_versions_pass_gives_the_rows_of_the_versions_sql(spark, tracked: tuple[str, ...]) -> None:
    """jvm/cdc `Versions` (what the writes use) against `versions_sql` (the definition, which the views read):
    stored versions rebuilt with late, duplicate and TOAST-placeholder changes, deletes and re-inserts."""
    from cdc.merge import prepared
    from cdc.scd2 import version_rows_sql, versions_of, versions_sql
    from tables.history import with_versions

    keys = ["id"]
    batches = _random_batches(seed=11, keys=25, batches=4, per_batch=40)
    frame = prepared(spark.createDataFrame([{**r, "_seq": tuple(r["_seq"])} for r in sum(batches, [])], SCHEMA))
    changes = frame.drop("_batch_id", "_merged_at").localCheckpoint()
    columns = [c for c in changes.columns if c != "_unchanged"]
    tag = uuid.uuid4().hex[:6]

    def view(name: str, rows) -> str:
        rows.createOrReplaceTempView(f"{name}_{tag}")
        return f"{name}_{tag}"

    def both(on: Relations):
        by_sql = spark.sql(versions_sql(columns, keys, list(tracked), on))
        by_pass = versions_of(spark.sql(version_rows_sql(columns, keys, on)), keys, list(tracked)).rows
        return _rows(by_sql), _rows(by_pass)

    empty = view("empty", with_versions(changes).limit(0))
    first = changes.where(changes["_seq.source_major"] <= 60)
    stored_sql, stored_pass = both(Relations(empty, view("first", first)))
    assert stored_pass == stored_sql
    stored = view("stored", spark.sql(versions_sql(columns, keys, list(tracked),
                                                   Relations(empty, view("first", first)))).localCheckpoint())
    later = view("later", changes.where("_seq.source_major > 60"))
    rebuilt_sql, rebuilt_pass = both(Relations(stored, later))
    assert rebuilt_pass == rebuilt_sql
    # A fold repeated after a crash: the stored versions hold the changes again, each at the `_seq` it had.
    rebuilt = view("rebuilt", spark.sql(versions_sql(columns, keys, list(tracked), Relations(stored, later))))
    assert both(Relations(rebuilt, later)) == (rebuilt_sql, rebuilt_sql)
    assert any(r[-1] is False for r in rebuilt_sql) and any(r[columns.index("_is_deleted")] for r in rebuilt_sql)
    assert any(r[len(columns)] for r in stored_sql)  # a version whose first change was a placeholder


def _rows(frame) -> list[tuple]:
    def plain(value):
        return tuple(plain(v) for v in value) if isinstance(value, (list, tuple)) else value
    return sorted((plain(tuple(row)) for row in frame.collect()), key=repr)
