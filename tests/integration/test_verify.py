"""`verify`'s comparison finds every kind of mismatch, counts all of them and lists the first ones, on the
driver (a table of at most `DRIVER_ROWS` rows) and by a join in Spark (a larger one), with the same verdicts."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from pipeline.ops import verify
from pipeline.ops.verify import MAX_REPORTED, compare


@pytest.fixture(params=["driver", "join"])
def path(request, monkeypatch) -> str:
    if request.param == "join":
        monkeypatch.setattr(verify, "DRIVER_ROWS", 0)
    return request.param


def test_missing_extra_and_differing_rows_are_found_and_counted(spark, path: str) -> None:
    lake = spark.createDataFrame([(1, "a", 9), (2, "b", 9), (4, "d", 9)], "id bigint, name string, _seq int")
    truth = {1: {"id": 1, "name": "a"}, 2: {"id": 2, "name": "B"}, 3: {"id": 3, "name": "c"}}
    verdict = compare(spark, lake, truth, ["id"], "shop_items", "shop.public.items")
    assert verdict.mismatches == 3
    found = {(m.kind, m.key): m.columns for m in verdict.examples}
    assert found == {("differs", (2,)): {"name": ("b", "B")}, ("missing", (3,)): {}, ("extra", (4,)): {}}


def test_more_mismatches_than_listed_are_all_counted(spark, path: str) -> None:
    lake = spark.range(MAX_REPORTED + 7).selectExpr("id", "'lake' AS name")
    truth = {i: {"id": i, "name": "truth"} for i in range(MAX_REPORTED + 7)}
    verdict = compare(spark, lake, truth, ["id"], "shop_items", "shop.public.items")
    assert verdict.mismatches == MAX_REPORTED + 7 and len(verdict.examples) == MAX_REPORTED
    assert compare(spark, lake, {i: {"id": i, "name": "lake"} for i in range(MAX_REPORTED + 7)}, ["id"],
                   "shop_items", "shop.public.items").mismatches == 0


def test_values_compare_as_spark_holds_them(spark, path: str) -> None:
    """A zoned time equals the instant the lake holds, a decimal its value whatever its scale, NaN equals NaN,
    bytes and nested values by content; a time a microsecond off differs."""
    lake = spark.sql("SELECT 1 AS id, TIMESTAMP '2026-03-01 12:00:00 UTC' AS at, DATE '2026-03-01' AS day, "
                     "CAST(1.5 AS DECIMAL(10, 2)) AS amount, double('NaN') AS ratio, X'00FF' AS raw, "
                     "array(1, 2) AS list, named_struct('a', 'x') AS nested")
    row = {"id": 1, "at": datetime(2026, 3, 1, 12, tzinfo=timezone.utc), "day": date(2026, 3, 1),
           "amount": Decimal("1.5"), "ratio": float("nan"), "raw": b"\x00\xff", "list": [1, 2], "nested": ("x",)}
    assert compare(spark, lake, {1: row}, ["id"], "t", "db.public.t").mismatches == 0
    off = {**row, "at": datetime(2026, 3, 1, 12, 0, 0, 1, tzinfo=timezone.utc)}
    verdict = compare(spark, lake, {1: off}, ["id"], "t", "db.public.t")
    assert verdict.mismatches == 1 and set(verdict.examples[0].columns) == {"at"}
