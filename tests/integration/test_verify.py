"""`verify`'s comparison finds every kind of mismatch, counts all of them and lists the first ones."""

from __future__ import annotations

from pipeline.ops.verify import MAX_REPORTED, compare


def test_missing_extra_and_differing_rows_are_found_and_counted(spark) -> None:
    lake = spark.createDataFrame([(1, "a", 9), (2, "b", 9), (4, "d", 9)], "id bigint, name string, _seq int")
    truth = {1: {"id": 1, "name": "a"}, 2: {"id": 2, "name": "B"}, 3: {"id": 3, "name": "c"}}
    verdict = compare(spark, lake, truth, ["id"], "shop_items", "shop.public.items")
    assert verdict.mismatches == 3
    found = {(m.kind, m.key): m.columns for m in verdict.examples}
    assert found == {("differs", (2,)): {"name": ("b", "B")}, ("missing", (3,)): {}, ("extra", (4,)): {}}


def test_more_mismatches_than_listed_are_all_counted(spark) -> None:
    lake = spark.range(MAX_REPORTED + 7).selectExpr("id", "'lake' AS name")
    truth = {i: {"id": i, "name": "truth"} for i in range(MAX_REPORTED + 7)}
    verdict = compare(spark, lake, truth, ["id"], "shop_items", "shop.public.items")
    assert verdict.mismatches == MAX_REPORTED + 7 and len(verdict.examples) == MAX_REPORTED
    assert compare(spark, lake, {i: {"id": i, "name": "lake"} for i in range(MAX_REPORTED + 7)}, ["id"],
                   "shop_items", "shop.public.items").mismatches == 0
