"""The one rule from source table names to lake table names, identifier quoting and string literals."""

from __future__ import annotations

import hashlib

import pytest

from tables.names import (MAX_LENGTH, LakeNames, NoTableName, SourceTable, UnmappableName, lake_table_name, quote,
                         sql_string)


@pytest.mark.parametrize(("db", "table"), [("moma", "artists"), ("hr", "employee"), ("run1", "order_items"),
                                           ("shop", "order"), ("2024", "select"), ("a", "_x9")])
def test_plain_names_keep_the_name_they_always_had(db: str, table: str) -> None:
    assert lake_table_name(db, table) == f"{db}_{table}"


@pytest.mark.parametrize(("db", "table", "folded"), [
    ("odd", "Order-Items", "odd_order_items"),  # mixed case, dash
    ("odd", "order items", "odd_order_items"),  # space
    ("odd", "v1.2", "odd_v1_2"),  # dot (DMS metadata and S3 folders may hold one)
    ("odd", 'say "hi"', "odd_say__hi_"),  # quotes
    ("odd", "a`b", "odd_a_b"),  # a backtick
    ("shop", "café", "shop_cafe"),  # an accent folds to its ASCII letter
    ("shop", "Größe", "shop_gro_e"),  # ß has no ASCII base
    ("shop", "名前", "shop___"),  # nor has CJK
    ("Moma", "artists", "moma_artists"),  # the database part follows the same rule
])
def test_other_names_fold_and_take_a_hash_of_the_source_name(db: str, table: str, folded: str) -> None:
    name = lake_table_name(db, table)
    stem, digest = name.rsplit("_", 1)
    assert stem == folded and digest == hashlib.sha256(f"{db}\0{table}".encode()).hexdigest()[:8]  # of the name
    assert lake_table_name(db, table) == name  # stable: the same source table lands in the same lake table


def test_source_tables_that_fold_alike_never_share_a_lake_table() -> None:
    names = {lake_table_name("odd", t) for t in ("order_items", "Order-Items", "ORDER ITEMS", "order.items")}
    assert len(names) == 4
    assert "odd_order_items" in names  # the plain one keeps its name
    assert lake_table_name("a-b", "c") != lake_table_name("a", "b-c")  # the hash knows where the db ends


def test_a_record_without_a_table_is_no_table_name() -> None:
    with pytest.raises(NoTableName) as caught:
        lake_table_name("moma", "")
    assert caught.value.error_class == "NoTableName"
    with pytest.raises(NoTableName):
        LakeNames().of_topic("moma..")  # what the Kinesis source makes of a record that names no table


@pytest.mark.parametrize(("db", "table"), [("", "artists"), ("moma", "x" * MAX_LENGTH),
                                           ("moma", "X" * (MAX_LENGTH - 13))])
def test_names_that_cannot_be_lake_tables_are_unmappable(db: str, table: str) -> None:
    with pytest.raises(UnmappableName) as caught:
        lake_table_name(db, table)
    assert caught.value.error_class == "UnmappableName" and str(caught.value)


def test_the_longest_name_leaves_room_for_the_view_suffixes() -> None:
    name = lake_table_name("moma", "x" * (MAX_LENGTH - 5))
    assert len(name) == MAX_LENGTH and len(f"{name}_current") <= 255


def test_a_topic_names_its_table_by_its_first_and_last_part() -> None:
    assert LakeNames().of_topic("moma.public.artists") == "moma_artists"
    assert LakeNames().of_topic("odd.public.Order-Items") == lake_table_name("odd", "Order-Items")
    assert SourceTable.of_topic("srv.inventory.public.orders") == SourceTable("srv", "inventory.public", "orders")
    assert str(SourceTable.of_topic("moma.public.artists")) == "moma.public.artists"


def test_by_default_two_schemas_tables_of_one_name_map_to_one_lake_table() -> None:
    names = LakeNames()
    assert names.of_topic("inv.public.orders") == names.of_topic("inv.sales.orders") == "inv_orders"


@pytest.mark.parametrize("listed", ["*", "sales", "inv.sales"])
def test_a_listed_schema_puts_the_schema_in_its_tables_names(listed: str) -> None:
    names = LakeNames(with_schema=frozenset({listed}))
    assert names.of_topic("inv.sales.orders") == "inv_sales_orders"
    assert names.of_topic("inv.public.orders") == ("inv_public_orders" if listed == "*" else "inv_orders")
    assert names.of_topic("other.sales.orders") == ("other_orders" if listed == "inv.sales" else "other_sales_orders")
    assert names.of_topic("inv.orders") == "inv_orders"  # a topic with no schema part keeps <db>_<table>


def test_names_with_a_schema_fold_and_hash_the_three_parts() -> None:
    names = LakeNames(with_schema=frozenset({"*"}))
    odd = names.of_topic("inv.Sales.Order-Items")
    assert odd.startswith("inv_sales_order_items_") and odd != lake_table_name("inv", "Order-Items")
    assert names.of_topic("inv.a-b.c") != names.of_topic("inv.a.b-c")  # the hash knows where the schema ends
    with pytest.raises(NoTableName):
        names.of_topic("moma..")


def test_a_source_table_named_in_the_map_gets_its_name_over_the_rule() -> None:
    names = LakeNames(with_schema=frozenset({"*"}), tables={"inv.sales.orders": "orders_of_sales"})
    assert names.of(SourceTable("inv", "sales", "orders")) == "orders_of_sales"
    assert names.of_topic("inv.public.orders") == "inv_public_orders"


def test_quote_doubles_an_embedded_quote_mark() -> None:
    assert quote("lake", "mirror", "order") == "`lake`.`mirror`.`order`"
    assert quote("a`b") == "`a``b`"
    assert quote("mirror", 'x"y', mark='"') == '"mirror"."x""y"'


@pytest.mark.parametrize(("value", "literal"), [
    ("2026-11-22 18:00:00", "'2026-11-22 18:00:00'"),
    ("it's", r"'it\'s'"),  # a quote cannot end the literal
    ("a\\", r"'a\\'"),  # nor can a trailing backslash escape the closing quote
    ("x' OR '1'='1", r"'x\' OR \'1\'=\'1'"),
    ("\\'", r"'\\\''"),  # a backslash before a quote: both escaped
    ("café 名前", "'café 名前'"),
])
def test_sql_string_holds_any_value_as_one_literal(value: str, literal: str) -> None:
    assert sql_string(value) == literal
