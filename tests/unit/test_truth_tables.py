"""`pipeline verify` finds the truth's source table of a lake table under each naming rule (`names.*`)."""

from __future__ import annotations

import pytest

from pipeline.ops.verify import truth_table_for
from tables.names import LakeNames


class Truth:
    def tables(self) -> list[str]:
        return ["shop.public.orders", "shop.sales.orders", "shop.public.customers"]


def test_a_lake_table_finds_its_truth_table_by_table_then_schema_then_the_map() -> None:
    truth, names = Truth(), LakeNames()
    assert truth_table_for(truth, "run1_customers", names) == "shop.public.customers"  # a topic prefix as <db>
    assert truth_table_for(truth, "run1_sales_orders", names) == "shop.sales.orders"
    assert truth_table_for(truth, "run1_public_orders", names) == "shop.public.orders"
    mapped = LakeNames(tables={"run1.sales.orders": "sold"})
    assert truth_table_for(truth, "sold", mapped) == "shop.sales.orders"


def test_an_ambiguous_lake_table_names_the_ways_to_name_it() -> None:
    with pytest.raises(ValueError, match="matches 2 truth tables .* or named in names.tables"):
        truth_table_for(Truth(), "run1_orders", LakeNames())
