"""The mirror's pure parts: MERGE text, time-travel SQL, key predicates, intervals, settings, Spark's hash."""

from __future__ import annotations

import argparse
import ast

import pytest
from pyspark.sql.types import StructType

from cdc.build import spark_hash
from cdc.merge import merge_clauses, merge_sql
from pipeline.cli.parser import _interval
from pipeline.ops.timetravel import QueryError, as_of_sql, checked_time, parse_key
from tables.lake import STORAGE_PARTITIONED_JOIN, key_predicate, merge_join_conf
from tests.conftest import REPO, make_config


META = ["_op", "_seq", "_source_ts", "_source", "_is_deleted", "_deleted_at", "_merged_at"]


def test_soft_delete_merge_keeps_values_and_never_regresses() -> None:
    sql = merge_sql("lake.mirror.t", "changes", merge_clauses(["id", "name", *META], ["id"], "soft"))
    lines = sql.splitlines()
    assert lines[0] == "MERGE INTO lake.mirror.t t USING changes s ON t.`id` = s.`id`"
    delete, update, insert = lines[1:]
    assert delete.startswith("WHEN MATCHED AND s._seq > t._seq AND s._is_deleted THEN UPDATE SET")
    assert "t.`name`" not in delete  # a soft delete keeps the last known values
    assert "t.`_is_deleted` = s.`_is_deleted`" in delete
    assert update.startswith("WHEN MATCHED AND s._seq > t._seq THEN UPDATE SET") and "t.`name` = s.`name`" in update
    assert insert.startswith("WHEN NOT MATCHED THEN INSERT")  # a first-seen delete is kept as a deleted row


def test_hard_delete_merge_removes_rows_and_skips_unseen_deletes() -> None:
    clauses = merge_clauses(["id", *META], ["id"], "hard")
    sql = merge_sql("m", "c", clauses)
    assert "WHEN MATCHED AND s._seq > t._seq AND s._is_deleted THEN DELETE" in sql
    assert "WHEN NOT MATCHED AND NOT s._is_deleted THEN INSERT" in sql


def test_unchanged_columns_keep_the_mirrors_value_and_are_not_stored() -> None:
    sql = merge_sql("m", "c", merge_clauses(["id", "name", "bio", *META, "_unchanged"], ["id"], "soft"))
    update, insert = sql.splitlines()[2:]
    kept = "t.`bio` = CASE WHEN array_contains(s._unchanged, 'bio') THEN t.`bio` ELSE s.`bio` END"
    assert kept in update
    assert "t.`id` = s.`id`" in update and "_unchanged" not in insert
    assert "t.`_unchanged`" not in sql


def test_composite_keys_join_on_every_column() -> None:
    assert merge_clauses(["a", "b", *META], ["a", "b"], "soft").on == "t.`a` = s.`a` AND t.`b` = s.`b`"


def test_as_of_pins_every_table_but_not_subqueries() -> None:
    sql = "SELECT * FROM mirror.a JOIN mirror.b ON a.id = b.id WHERE x IN (SELECT id FROM (SELECT 1 AS id))"
    assert as_of_sql(sql, "123") == ("SELECT * FROM mirror.a VERSION AS OF 123 JOIN mirror.b VERSION AS OF 123 "
                                     "ON a.id = b.id WHERE x IN (SELECT id FROM (SELECT 1 AS id))")
    assert as_of_sql("select * from t", "2026-11-22 18:00:00") == "select * from t TIMESTAMP AS OF '2026-11-22 18:00:00'"
    with pytest.raises(QueryError, match="FROM <table>"):
        as_of_sql("SELECT 1", "5")


@pytest.mark.parametrize("as_of", ["2026-11-22' OR '1'='1", "2026-11-22 18:00:00\\", "yesterday", "²"])
def test_an_as_of_that_is_no_time_is_refused_by_name(as_of: str) -> None:
    with pytest.raises(QueryError, match="--as-of .* is not a timestamp: give one such as '2026-11-22 18:00:00' or "
                                         "a snapshot id"):
        as_of_sql("SELECT * FROM mirror.a", as_of)
    with pytest.raises(QueryError, match="--as-of-source .* is not a timestamp"):
        checked_time(as_of, "--as-of-source")


def test_an_as_of_time_goes_into_sql_as_a_literal() -> None:
    assert as_of_sql("SELECT * FROM t", "2026-11-22T18:00:00+01:00") == \
        "SELECT * FROM t TIMESTAMP AS OF '2026-11-22T18:00:00+01:00'"
    assert checked_time("2026-11-22 18:00:00.250", "--as-of-source") == "2026-11-22 18:00:00.250"


def test_as_of_pins_quoted_table_names_whole() -> None:
    sql = "SELECT `order` FROM `lake`.`mirror`.`odd_order_items_d160c463` JOIN mirror.2024_select USING (`order`)"
    assert as_of_sql(sql, "7") == ("SELECT `order` FROM `lake`.`mirror`.`odd_order_items_d160c463` VERSION AS OF 7 "
                                   "JOIN mirror.2024_select VERSION AS OF 7 USING (`order`)")


def test_reserved_word_columns_are_quoted_in_the_merge() -> None:
    sql = merge_sql("`lake`.`mirror`.`t`", "`c`", merge_clauses(["order", "select", *META, "_unchanged"],
                                                                ["order"], "soft"))
    assert "ON t.`order` = s.`order`" in sql
    assert "t.`select` = CASE WHEN array_contains(s._unchanged, 'select') THEN t.`select` ELSE s.`select` END" in sql


def test_a_key_is_parsed_per_column_and_matched_with_values_cast_to_the_key_types() -> None:
    fields = StructType().add("id", "integer").add("a", "long").add("b", "string").fields
    assert parse_key(["a", "b"], "1,x") == {"a": "1", "b": "x"}
    assert key_predicate(fields, {"id": "299"}) == "`id` = CAST('299' AS int)"
    assert key_predicate(fields, parse_key(["a", "b"], "1,x")) == \
        "`a` = CAST('1' AS bigint) AND `b` = CAST('x' AS string)"
    assert key_predicate(fields, {"b": "'; DROP TABLE t"}) == "`b` = CAST('\\'; DROP TABLE t' AS string)"
    with pytest.raises(QueryError, match=r"the table's key is \(a, b\)"):
        parse_key(["a", "b"], "1")


def test_intervals() -> None:
    assert [_interval(v) for v in ("90", "30s", "5m", "1h")] == [90, 30, 300, 3600]
    for bad in ("soon", "0s", "-5m"):
        with pytest.raises(argparse.ArgumentTypeError):
            _interval(bad)


def test_mirror_settings_take_per_table_maps() -> None:
    cfg = make_config("mirror.keys.moma_artists=artist_id", "mirror.keys.hr_employee=employee_id, team",
                      "mirror.partition_by.moma_artists=nationality", "mirror.tables=moma_artists,hr_employee")
    assert cfg.mirror.key_columns("moma_artists") == ["artist_id"]
    assert cfg.mirror.key_columns("hr_employee") == ["employee_id", "team"]
    assert [str(f) for f in cfg.mirror.partition_fields("moma_artists")] == ["nationality"]
    assert cfg.mirror.key_columns("unknown") == []
    assert cfg.mirror.tables == ["moma_artists", "hr_employee"]


def test_scd2_settings_are_checked_where_they_are_read() -> None:
    from cdc.scd2 import tracked
    from pipeline.config.settings import ConfigError

    cfg = make_config("mirror.scd_type.shop_orders=2", "mirror.track_history_except_columns.shop_orders=note, ts")
    assert (cfg.mirror.scd_type_of("shop_orders"), cfg.mirror.scd_type_of("moma_artists")) == (2, 1)
    columns = ["order_id", "status", "note", "ts", "_op", "_seq"]
    assert tracked(columns, ["order_id"], *cfg.mirror.history_columns("shop_orders")) == ["status"]
    assert tracked(columns, ["order_id"], ["note"], None) == ["note"]
    assert tracked(columns, ["order_id"], None, None) == ["status", "note", "ts"]
    for settings, message in [
        (["mirror.scd_type.t=3"], "mirror.scd_type.t must be 1"),
        (["mirror.scd_type.t=2", "mirror.delete_mode=hard"], "cannot go with mirror.scd_type = 2"),
        (["mirror.track_history_columns.t=a"], "not an SCD2 table: set mirror.scd_type.t = 2"),
        (["mirror.scd_type.t=2", "mirror.track_history_columns.t=a", "mirror.track_history_except_columns.t=b"],
         "not both"),
    ]:
        with pytest.raises(ConfigError, match=message):
            make_config(*settings)


def test_airflow_dag_runs_the_cli() -> None:
    source = (REPO / "pipeline" / "ops" / "airflow_mirror.py").read_text()
    tree = ast.parse(source)
    commands = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    assert any("python -m pipeline" in c for c in commands)
    assert {"mirror", "maintain"} <= {kw.value.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                                      for kw in node.keywords if kw.arg == "task_id"}


def test_every_runs_at_its_cadence_until_stopped() -> None:
    import threading
    import time

    from pipeline.stages.mirror import MirrorStage

    class CountingStage(MirrorStage):
        def __init__(self) -> None:  # no Spark: only the scheduling loop is under test
            self.started: list[float] = []
            self.stopping = threading.Event()

        def run_once(self, requested=()):
            self.started.append(time.monotonic())
            if len(self.started) == 3:
                self.stopping.set()
            return []

    stage = CountingStage()
    stage.run_every(0.2, stopping=stage.stopping)
    assert len(stage.started) == 3
    gaps = [b - a for a, b in zip(stage.started, stage.started[1:])]
    assert all(0.15 <= gap < 1.0 for gap in gaps)


def test_a_mirror_bucketed_by_its_key_merges_with_a_storage_partitioned_join() -> None:
    cfg = make_config("mirror.partition_by.a=bucket(16, id)", "mirror.partition_by.b=nationality, bucket(4, name)",
                      "mirror.partition_by.c=nationality")
    assert merge_join_conf(cfg, "a", ["id"]) == STORAGE_PARTITIONED_JOIN
    assert merge_join_conf(cfg, "a", ["other"]) == {}  # bucketed, but not by a key: the join cannot use it
    assert merge_join_conf(cfg, "b", ["id", "name"]) == STORAGE_PARTITIONED_JOIN
    assert merge_join_conf(cfg, "c", ["id"]) == merge_join_conf(cfg, "unpartitioned", ["id"]) == {}


@pytest.mark.parametrize(("target", "namespace", "name"), [
    ("/lake/mirror/orders.v2", "mirror", "orders.v2"), ("s3://b/lake/mirror/orders.v2/", "mirror", "orders.v2"),
    ("delta.`/lake/mirror/a.b.c`", "mirror", "a.b.c"), ("lake.mirror.orders", "mirror", "orders"),
])
def test_apply_changes_names_the_table_its_target_names(target: str, namespace: str, name: str) -> None:
    from pipeline.api.apply import _config, _target

    where = _target(target)
    assert (where.namespace, where.name) == (namespace, name)
    cfg = _config(None, where, ["id"], 1, None, None, "soft", "merge")
    assert cfg.mirror.keys == {name: "id"} and cfg.mirror.namespace == namespace


def test_spark_hash_is_sparks_murmur3_of_an_int() -> None:
    """Values of Spark 4.1's `SELECT hash(CAST(n AS int))`, which the first build's shuffle key counts on."""
    assert [spark_hash(n) for n in (0, 1, 2)] == [933211791, -559580957, 1765031574]
