"""`apply_changes` (pipeline/api): docs/api.md's example runs as written, and bad input stops a call before
anything is written."""

from __future__ import annotations

import re
import uuid

import pytest

from cdc.validate import ChangeError
from pipeline import apply_changes
from tests.conftest import REPO

pytestmark = pytest.mark.integration

SCHEMA = "order_id INT, status STRING, _op STRING, _seq BIGINT, changed_at STRING"


def test_the_documented_example_runs(spark, monkeypatch) -> None:
    """The doc's session builder attaches to the suite's session (one JVM a process): its catalog settings
    are applied to it, and the example's own assertions check the tables it wrote. Its catalog's name
    (`example`) must stay one no test uses as a namespace: `demo.customers` once resolved to a `demo` catalog."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)
    example = next(block for block in blocks if "getOrCreate" in block)
    monkeypatch.chdir(REPO)
    exec(compile(example, "docs/api.md", "exec"), {})


def test_bad_input_names_the_table_and_column_before_writing(spark) -> None:
    target = f"lake.api_{uuid.uuid4().hex[:6]}.orders"
    rows = [(1, "new", "c", 1, "2026-11-20 10:00:00")]
    changes = spark.createDataFrame(rows, SCHEMA)
    with pytest.raises(ChangeError, match=r"orders: the changes have no column id .*keys="):
        apply_changes(spark, target=target, source=changes, keys=["id"], sequence_by="_seq")
    unordered = spark.createDataFrame([(1, "new", "c", None, None)], SCHEMA)
    with pytest.raises(ChangeError, match=r"orders: 1 change\(s\) with a null _seq"):
        apply_changes(spark, target=target, source=unordered, keys=["order_id"], sequence_by="_seq")
    untimed = spark.createDataFrame([(1, "new", "c", 1, None)], SCHEMA).drop("changed_at")
    with pytest.raises(ChangeError, match=r"orders: 1 change\(s\) without a source time.*source_time="):
        apply_changes(spark, target=target, source=untimed, keys=["order_id"], sequence_by="_seq",
                      stored_as_scd_type=2)
    keyless = spark.createDataFrame([(None, "new", None, 1, "2026-11-20 10:00:00")], SCHEMA)  # not a truncate
    with pytest.raises(ChangeError, match=r"orders: 1 change\(s\) with a null key column \(order_id\)"):
        apply_changes(spark, target=target, source=keyless, keys=["order_id"], sequence_by="_seq",
                      source_time="changed_at", stored_as_scd_type=2)
    assert not spark.catalog.tableExists(target)


def test_a_null_deletion_flag_is_no_delete(spark) -> None:
    """A source's own `_is_deleted` (no `apply_as_deletes`) that is null: the change is no delete, in the table
    and in how its versions are made."""
    target = f"lake.api_{uuid.uuid4().hex[:6]}.orders"
    rows = [(1, "new", 1, "2026-11-20 10:00:00", None), (1, "paid", 2, "2026-11-20 11:00:00", None)]
    changes = spark.createDataFrame(rows, "order_id INT, status STRING, _seq BIGINT, changed_at STRING, "
                                          "_is_deleted BOOLEAN")
    apply_changes(spark, target=target, source=changes, keys=["order_id"], sequence_by="_seq",
                  source_time="changed_at", stored_as_scd_type=2)
    versions = spark.table(target).orderBy("_seq_from").collect()
    assert [(r.status, r._is_deleted, r._is_current) for r in versions] == [("new", False, False), ("paid", False, True)]


def test_ignored_nulls_keep_the_value_and_column_lists_shape_the_target(spark) -> None:
    target = f"lake.api_{uuid.uuid4().hex[:6]}.orders"
    schema = "order_id INT, status STRING, note STRING, _seq BIGINT"
    for rows in ([(1, "new", "ring twice", 1), (2, "new", "x", 2)], [(1, None, None, 3), (2, "shipped", None, 4)]):
        apply_changes(spark, target=target, source=spark.createDataFrame(rows, schema), keys=["order_id"],
                      sequence_by="_seq", ignore_null_updates_column_list=["note"], except_column_list=["status"])
    state = spark.table(target).orderBy("order_id")
    assert "status" not in state.columns
    assert [(r.order_id, r.note, r._seq.source_major) for r in state.collect()] == [(1, "ring twice", 3), (2, "x", 4)]


def test_a_delta_path_whose_last_folder_has_a_dot_is_written_there(spark, tmp_path) -> None:
    from delta.tables import DeltaTable

    target = tmp_path / "mirror" / "orders.v2"
    changes = spark.createDataFrame([(1, "new", "c", 1, "2026-11-20 10:00:00")], SCHEMA)
    apply_changes(spark, target=str(target), source=changes, keys=["order_id"], sequence_by="_seq")
    assert DeltaTable.isDeltaTable(spark, str(target)) and not (tmp_path / "mirror" / "v2").exists()
    assert [(r.order_id, r.status) for r in spark.read.format("delta").load(str(target)).collect()] == [(1, "new")]


ODD = "id INT, `a.b` STRING, `a{b}` STRING, `{pending}` STRING, _seq BIGINT, changed_at TIMESTAMP"


@pytest.mark.parametrize(("scd_type", "layout"), [(1, "merge"), (1, "pending"), (2, "merge"), (2, "pending")])
def test_columns_named_with_dots_and_braces_mirror_like_any_other(spark, scd_type: int, layout: str) -> None:
    """`a.b` is one column, not a field of `a`; `a{b}` and `{pending}` are columns, not slots of a template.
    Built, then changed (appended to the pending table in that layout), then folded into the base."""
    from datetime import datetime

    target = f"lake.api_{uuid.uuid4().hex[:6]}.odd"
    at = [datetime(2026, 11, 20, 10, minute) for minute in range(3)]
    batches = ([(1, "x1", "y1", "z1", 1, at[0]), (2, "x2", "y2", "z2", 2, at[1])], [(1, "x1b", "y1b", "z1b", 3, at[2])],
               [])
    for rows, how in zip(batches, (layout, layout, "merge")):  # the last call folds what is pending
        apply_changes(spark, target=target, source=spark.createDataFrame(rows, ODD), keys=["id"], sequence_by="_seq",
                      source_time="changed_at", stored_as_scd_type=scd_type, layout=how)
    table = spark.table(target)
    current = table.where("_is_current") if scd_type == 2 else table
    assert sorted(tuple(r) for r in current.select("id", "`a.b`", "`a{b}`", "`{pending}`").collect()) == [
        (1, "x1b", "y1b", "z1b"), (2, "x2", "y2", "z2")]
    if scd_type == 2:
        assert [r["a.b"] for r in table.where("id = 1").orderBy("_seq_from").collect()] == ["x1", "x1b"]
