"""Keys without settings: where a table's key comes from (a setting, Debezium's record key, a DMS table-def), how
a changelog table keeps it, and the one message that names every table with none."""

from __future__ import annotations

import json

import pytest

from cdc.dms_tables import TableDef
from pipeline.stages.mirror import MissingKeys, TableReport, table_keys
from registry.backend import RegistryError
from registry.resolver import SchemaResolver
from registry.subjects import SubjectStrategy
from tables.keys import KEYS_PROPERTY, keys_property, stored_keys, table_key
from tests.conftest import make_config

# The control record of AWS's DMS Kafka target documentation (IncludeControlDetails), its table-def as sent
SBTEST_TABLE_DEF = {"columns": {"id": {"type": "WSTRING", "length": 512, "nullable": False},
                                "fname": {"type": "WSTRING", "length": 255, "nullable": True},
                                "lname": {"type": "WSTRING", "length": 255, "nullable": True},
                                "REGION": {"type": "WSTRING", "length": 1000, "nullable": True}},
                    "primary-key": ["id"], "collation-name": "latin1_swedish_ci"}


def test_a_kept_key_round_trips_through_its_table_property() -> None:
    kept = keys_property(["tenant", "id,with comma"])
    assert set(kept) == {KEYS_PROPERTY}
    assert stored_keys(kept) == ["tenant", "id,with comma"]
    assert keys_property([]) == {}  # no key: nothing kept, so the mirror asks for a setting


@pytest.mark.parametrize("text", [None, "", "not json", '{"id": 1}', "[]"])
def test_a_table_without_a_readable_key_keeps_none(text: str | None) -> None:
    assert stored_keys({} if text is None else {KEYS_PROPERTY: text}) == []


def test_the_setting_overrides_the_kept_key() -> None:
    kept = keys_property(["id"])
    assert table_key(["artist_id"], kept) == ["artist_id"]
    assert table_key([], kept) == ["id"]
    assert table_key([], {}) == []


def test_a_dms_table_def_names_the_primary_key_and_columns() -> None:
    definition = TableDef.parse(json.dumps(SBTEST_TABLE_DEF))
    assert definition.primary_key == ["id"]
    assert list(definition.columns) == ["id", "fname", "lname", "REGION"]
    assert TableDef.parse('{"columns": {"a": {"type": "INT4"}}}').primary_key == []  # a table with no key


@pytest.mark.parametrize("text", ['{"primary-key": "id"}', '{"columns": ["id"]}', "[1]"])
def test_a_malformed_table_def_is_refused_with_what_it_holds(text: str) -> None:
    with pytest.raises(ValueError):
        TableDef.parse(text)


def _resolver(strategy: SubjectStrategy, subjects: dict[str, str]) -> SchemaResolver:
    def latest(subject: str) -> str:
        if subject not in subjects:
            raise RegistryError(f"no subject {subject}", 404)
        return subjects[subject]

    return SchemaResolver(None, strategy, latest, retry_s=0)  # type: ignore[arg-type]


KEY = json.dumps({"type": "record", "name": "Key", "namespace": "shop.public.orders",
                  "fields": [{"name": "tenant", "type": "int"}, {"name": "id", "type": "long"}]})


@pytest.mark.parametrize(("strategy", "subject"), [(SubjectStrategy.TOPIC, "shop.public.orders-key"),
                                                   (SubjectStrategy.RECORD, "shop.public.orders.Key"),
                                                   (SubjectStrategy.TOPIC_RECORD,
                                                    "shop.public.orders-shop.public.orders.Key")])
def test_debeziums_record_key_names_the_key_columns(strategy: SubjectStrategy, subject: str) -> None:
    assert _resolver(strategy, {subject: KEY}).key_columns("shop.public.orders") == ["tenant", "id"]


def test_a_topic_without_a_key_schema_has_no_key_and_an_outage_is_not_hidden() -> None:
    assert _resolver(SubjectStrategy.TOPIC, {}).key_columns("shop.public.log") == []
    assert _resolver(SubjectStrategy.TOPIC, {"t-key": '"string"'}).key_columns("t") == []  # a key that is no record

    def down(subject: str) -> str:
        raise RegistryError("registry unreachable")

    with pytest.raises(RegistryError, match="unreachable"):
        SchemaResolver(None, SubjectStrategy.TOPIC, down, retry_s=0).key_columns("t")  # type: ignore[arg-type]


def test_every_keyless_table_is_named_in_one_message_with_its_setting() -> None:
    message = str(MissingKeys(["shop_log", "shop_audit"], [TableReport("shop_orders", 3, 2, 0, 7, 0.1)]))
    assert "2 table(s) have no key: shop_log, shop_audit" in message
    assert "--set mirror.keys.shop_log=" in message and "--set mirror.keys.shop_audit=" in message
    assert "the other 1 table(s) were mirrored" in message
    assert "mirrored" not in str(MissingKeys(["shop_log"]))  # `history`, `state`: one table, nothing mirrored


class _Table:
    """A changelog table as `table_keys` sees it."""

    ref = "lake.changelog.shop_orders"

    def __init__(self, properties: dict[str, str], columns: list[str]) -> None:
        self._properties, self._columns = properties, columns

    def exists(self) -> bool:
        return True

    def properties(self) -> dict[str, str]:
        return self._properties

    def fields(self):  # type: ignore[no-untyped-def]
        from pyspark.sql.types import StringType, StructField

        return [StructField(name, StringType()) for name in self._columns]


def test_table_keys_takes_the_kept_key_and_checks_it_against_the_columns() -> None:
    cfg = make_config()
    assert table_keys(cfg, "shop_orders", _Table(keys_property(["id"]), ["id", "amount"])) == ["id"]
    with pytest.raises(MissingKeys, match="mirror.keys.shop_orders"):
        table_keys(cfg, "shop_orders", _Table({}, ["id"]))
    with pytest.raises(Exception, match="does not have"):
        table_keys(cfg, "shop_orders", _Table(keys_property(["order_id"]), ["id"]))
    overridden = make_config("mirror.keys.shop_orders=amount")
    assert table_keys(overridden, "shop_orders", _Table(keys_property(["id"]), ["id", "amount"])) == ["amount"]
