"""The one rule from source table names to lake table names, and identifier quoting."""

from __future__ import annotations

import pytest

from tables.names import MAX_LENGTH, NoTableName, UnmappableName, lake_table_name, quote, topic_table_name


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
    assert stem == folded and len(digest) == 8 and int(digest, 16) >= 0
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
        topic_table_name("moma..")  # what the Kinesis source makes of a record that names no table


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
    assert topic_table_name("moma.public.artists") == "moma_artists"
    assert topic_table_name("odd.public.Order-Items") == lake_table_name("odd", "Order-Items")


def test_quote_doubles_an_embedded_quote_mark() -> None:
    assert quote("lake", "mirror", "order") == "`lake`.`mirror`.`order`"
    assert quote("a`b") == "`a``b`"
    assert quote("mirror", 'x"y', mark='"') == '"mirror"."x""y"'
