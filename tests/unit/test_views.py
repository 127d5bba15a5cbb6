"""The views' SQL: one Spark definition, rendered for Spark and for Athena (parsed back in Athena's dialect)."""

from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from pipeline.config.settings import load_config
from pipeline.stack.services import all_services
from tables.catalog import keeps_views
from tables.views import athena_type, table_views


def _cfg(tmp_path: Path, *overrides: str):
    return load_config(overrides=[f"home={tmp_path}", *overrides], environ={})


def test_each_table_has_three_views_in_spark_and_athena(tmp_path: Path) -> None:
    views = table_views(_cfg(tmp_path), "moma_artists", ["artist_id"], ["artist_id", "name", "_is_deleted", "_seq"])
    assert [(v.namespace, v.name) for v in views] == [
        ("mirror", "moma_artists_current"), ("mirror", "moma_artists_deleted"), ("changelog", "moma_artists_latest")]
    assert views[0].spark_ddl("lake") == ("CREATE OR REPLACE VIEW `lake`.`mirror`.`moma_artists_current` AS "
                                          "SELECT * FROM `lake`.`mirror`.`moma_artists` WHERE NOT _is_deleted")
    for view in views:
        spark = sqlglot.parse_one(view.spark_ddl("lake"), read="spark")
        athena = sqlglot.parse_one(view.athena_ddl(), read="athena")
        assert isinstance(spark, exp.Create) and isinstance(athena, exp.Create) and athena.kind == "VIEW"
        assert athena.this.sql("athena") == f'"{view.namespace}"."{view.name}"'
    latest = sqlglot.parse_one(views[2].athena_ddl(), read="athena")
    assert [c.alias_or_name for c in latest.expression.expressions] == ["artist_id", "name", "_is_deleted", "_seq"]


def test_an_scd2_mirror_has_history_views_in_spark_and_athena(tmp_path: Path) -> None:
    """In the pending layout they rebuild the pending keys' versions (window functions, `last_value … IGNORE
    NULLS`, `max_by` over a row), which Athena's dialect must take too."""
    cfg = _cfg(tmp_path, "mirror.keys.shop_orders=order_id", "mirror.scd_type.shop_orders=2",
               "mirror.track_history_except_columns.shop_orders=note")
    columns = ["order_id", "status", "note", "_op", "_is_deleted", "_source_ts", "_seq"]
    for pending in (None, columns):
        views = table_views(cfg, "shop_orders", ["order_id"], columns, pending, columns)
        assert [v.name for v in views] == ["shop_orders_current", "shop_orders_deleted", "shop_orders_history",
                                           "shop_orders_latest"]
        assert views[0].select("`t`", "`p`").endswith("WHERE _is_current AND NOT _is_deleted")
        assert ("_pending" in views[2].spark_ddl("lake")) == (pending is not None)
        for view in views:
            athena = sqlglot.parse_one(view.athena_ddl(), read="athena")
            assert athena.this.sql("athena") == f'"{view.namespace}"."{view.name}"'
        selected = sqlglot.parse_one(views[2].athena_ddl(), read="athena").expression.expressions
        assert [c.alias_or_name for c in selected] == [*columns, "_valid_from", "_valid_to", "_seq_from", "_seq_to",
                                                       "_is_current"]
    tracked = views[2].spark_ddl("lake")
    assert "struct(_is_deleted, `status`)" in tracked and "last_value(" in tracked  # note is not tracked


def test_views_quote_names_a_bare_identifier_cannot_take(tmp_path: Path) -> None:
    """A table starting with a digit, key and columns named by reserved words: quoted in Spark and in Athena."""
    columns = ["order", "select", "a`b", "_is_deleted", "_seq", "_op", "_source_ts"]
    views = table_views(_cfg(tmp_path), "2024_select", ["order", "select"], columns)
    assert views[0].spark_ddl("lake").startswith("CREATE OR REPLACE VIEW `lake`.`mirror`.`2024_select_current` AS ")
    latest = views[2].spark_ddl("lake")
    assert "PARTITION BY `order`, `select`" in latest and "PARTITION BY c.`order`, c.`select`" in latest
    assert "SELECT `order`, `select`, `a``b`, " in latest
    for view in views:
        sqlglot.parse_one(view.spark_ddl("lake"), read="spark")
        athena = sqlglot.parse_one(view.athena_ddl(), read="athena")
        assert athena.this.sql("athena") == f'"{view.namespace}"."{view.name}"'
    selected = sqlglot.parse_one(views[2].athena_ddl(), read="athena").expression.expressions
    assert [c.alias_or_name for c in selected] == columns


def test_glue_keeps_no_views_and_the_metastore_runs_when_asked(tmp_path: Path) -> None:
    assert keeps_views(_cfg(tmp_path).catalog)
    assert not keeps_views(_cfg(tmp_path, "catalog.type=glue", "catalog.warehouse=s3://lake/wh").catalog)
    assert "metastore" not in [s.name for s in all_services(_cfg(tmp_path))]
    assert "metastore" in [s.name for s in all_services(_cfg(tmp_path, "catalog.type=hive"))]
    assert "metastore" in [s.name for s in all_services(_cfg(tmp_path, "stack.metastore=true"))]


def test_spark_types_are_named_as_athena_names_them() -> None:
    from pyspark.sql.types import (ArrayType, DateType, DecimalType, StructField, StructType, TimestampNTZType,
                                   TimestampType)

    assert athena_type(TimestampNTZType()) == "timestamp" and athena_type(TimestampType()) == "timestamp"
    assert athena_type(DecimalType(12, 2)) == "decimal(12,2)" and athena_type(DateType()) == "date"
    nested = StructType([StructField("at", ArrayType(TimestampNTZType()))])
    assert athena_type(nested) == "struct<at:array<timestamp>>"


def test_pending_layout_views_overlay_the_pending_table_in_spark_and_athena(tmp_path: Path) -> None:
    """A mirror in the pending layout: its views read its base and its pending table (two namespaces), and
    the overlay's aggregate (max_by over a row) survives the translation to Athena's dialect."""
    cfg = _cfg(tmp_path, "mirror.keys.moma_artists=artist_id")
    columns = ["artist_id", "name", "_op", "_seq", "_source_ts", "_source", "_is_deleted", "_deleted_at", "_merged_at"]
    current, deleted, _ = table_views(cfg, "moma_artists", ["artist_id"], columns, overlay_columns=columns)
    ddl = current.spark_ddl("lake")
    assert "FROM `lake`.`mirror`.`moma_artists` b WHERE NOT EXISTS (SELECT 1 FROM `lake`.`mirror_pending`.`moma_artists`" in ddl
    assert ddl.endswith("WHERE NOT _is_deleted") and deleted.spark_ddl("lake").endswith("WHERE _is_deleted")
    assert "array_contains(_unchanged, 'name')" in ddl  # a TOAST placeholder keeps the column's last value
    athena = current.athena_ddl()
    parsed = sqlglot.parse_one(athena, read="athena")
    assert isinstance(parsed, exp.Create) and parsed.kind == "VIEW"
    assert 'FROM "mirror_pending"."moma_artists"' in athena and "MAX_BY(" in athena and "ROW(" in athena
    assert "CONTAINS(" in athena  # Spark's array_contains in Trino's spelling


@pytest.mark.parametrize("scd_type", [1, 2])
def test_column_names_with_braces_and_dots_stay_columns(tmp_path: Path, scd_type: int) -> None:
    """A DMS column `a{b}`, `{pending}` or `a.b` is an identifier like any other: never a template's slot."""
    cfg = _cfg(tmp_path, "mirror.keys.odd=id", f"mirror.scd_type.odd={scd_type}")
    odd = ["a{b}", "{pending}", "{table}", "a.b", "}{"]
    columns = ["id", *odd, "_op", "_is_deleted", "_source_ts", "_seq"]
    views = table_views(cfg, "odd", ["id"], columns, columns, columns if scd_type == 2 else None)
    for view in views:
        ddl = view.spark_ddl("lake")
        sqlglot.parse_one(ddl, read="spark")
        assert all(f"`{name}`" in ddl for name in odd)
        tables = {(t.db, t.name) for t in sqlglot.parse_one(ddl, read="spark").find_all(exp.Table)}
        assert tables - {(view.namespace, view.name)} <= {(view.namespace, "odd"), ("mirror_pending", "odd")}
