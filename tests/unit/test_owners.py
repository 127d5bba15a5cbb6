"""Which source table a lake table holds (`tables/owners.py`), against tables that only keep properties."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from tables.append import SOURCE_PROPERTY
from tables.names import LakeNames, NoTableName, SourceTable
from tables.owners import Owners, TableNameCollision

PUBLIC, SALES = SourceTable("inv", "public", "orders"), SourceTable("inv", "sales", "orders")


@dataclass
class FakeTable:
    """The part of a `LakeTable` owners use; counts the questions it is asked."""

    created: bool = False
    props: dict[str, str] = field(default_factory=dict)
    asked: int = 0

    def exists(self) -> bool:
        self.asked += 1
        return self.created

    def properties(self) -> dict[str, str]:
        return dict(self.props)

    def set_properties(self, properties: dict[str, str]) -> None:
        self.props.update(properties)


def _owners(tables: dict[str, FakeTable], names: LakeNames = LakeNames()) -> Owners:
    return Owners(names, lambda name: tables.setdefault(name, FakeTable()))


def test_the_first_source_table_owns_a_new_lake_table_and_a_second_is_refused_with_both_names_and_the_fix() -> None:
    owners = _owners({})
    assert owners.claim(PUBLIC) == "inv_orders"
    assert owners.claim(PUBLIC) == "inv_orders"
    with pytest.raises(TableNameCollision) as refused:
        owners.claim(SALES)
    message = str(refused.value)
    assert refused.value.error_class == "TableNameCollision"
    assert "inv.sales.orders" in message and "inv.public.orders" in message and "inv_orders" in message
    assert 'names.with_schema = ["sales"]' in message and 'names.tables."inv.sales.orders"' in message


def test_a_table_keeps_the_owner_it_records_across_processes() -> None:
    tables = {"inv_orders": FakeTable(created=True, props={SOURCE_PROPERTY: "inv.sales.orders"})}
    owners = _owners(tables)
    with pytest.raises(TableNameCollision):
        owners.claim(PUBLIC)
    assert owners.claim(SALES) == "inv_orders"
    assert tables["inv_orders"].asked == 1  # the owner is asked once, then known


def test_a_table_made_before_owners_were_recorded_is_adopted_by_the_first_to_land() -> None:
    tables = {"inv_orders": FakeTable(created=True)}
    owners = _owners(tables)
    assert owners.claim(SALES) == "inv_orders"
    assert tables["inv_orders"].props == {SOURCE_PROPERTY: "inv.sales.orders"}
    with pytest.raises(TableNameCollision):
        _owners(tables).claim(PUBLIC)  # another process sees the adoption


def test_no_source_table_lands_in_the_dead_letters() -> None:
    owners = Owners(LakeNames(), lambda name: FakeTable(), reserved="dead_letters")
    with pytest.raises(TableNameCollision, match="dead letters"):
        owners.claim(SourceTable("dead", "public", "letters"))


def test_with_the_schema_in_the_names_both_land_apart() -> None:
    owners = _owners({}, LakeNames(with_schema=frozenset({"*"})))
    assert (owners.claim(PUBLIC), owners.claim(SALES)) == ("inv_public_orders", "inv_sales_orders")


def test_a_batch_claims_in_name_order_whatever_thread_lands_first() -> None:
    tables: dict[str, FakeTable] = {}
    owners = _owners(tables)
    others = [SourceTable("inv", "public", f"t{i}") for i in range(20)]  # their lookups in threads
    owners.claim_first([SourceTable("x", "", ""), PUBLIC, SALES, *others], threads=4)  # unmappable: `claim`'s
    with pytest.raises(TableNameCollision):
        owners.claim(SALES)
    assert owners.claim(PUBLIC) == "inv_orders"
    with pytest.raises(NoTableName):
        owners.claim(SourceTable("x", "", ""))
    assert [owners.claim(source) for source in others] == [f"inv_t{i}" for i in range(20)]
    assert {name: table.asked for name, table in tables.items()} == {name: 1 for name in tables}  # asked once


def test_threads_claiming_one_new_table_leave_one_owner() -> None:
    owners, results = _owners({}), []
    sources = [SourceTable("inv", f"s{i}", "orders") for i in range(8)]

    def claim(source: SourceTable) -> None:
        try:
            results.append(owners.claim(source))
        except TableNameCollision:
            results.append(None)

    threads = [threading.Thread(target=claim, args=(source,)) for source in sources]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results, key=lambda name: name is None) == ["inv_orders", *[None] * 7]
