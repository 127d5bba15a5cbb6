"""AWS DMS on Kafka: every table of a task on one topic, routed by each record's own table metadata, as on
Kinesis; control records counted, never dead-lettered, their table-def kept as the table's key.

The records are those of AWS's DMS Kafka target documentation: a `create-table` control record with
`table-def`, sent with `IncludeControlDetails` (the documentation's names table `sbtest_t1`; here it is the
`sbtest_x` its insert goes to), an insert into `sbtest.sbtest_x` with the transaction details, and the same
insert as a task sends it by default, without them. Then two tables with the same key value on one topic, and
control records of every operation AWS lists that the other records do not show."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from pipeline.config import kafka
from pipeline.config.settings import PipelineConfig
from pipeline.stages.changelog import ChangelogStage
from pipeline.stages.changelog.report import BatchReport
from tables.keys import DMS_TABLE_DEF_PROPERTY, KEYS_PROPERTY
from tables.lake import lake_table, table_names

pytestmark = pytest.mark.integration

SBTEST_TABLE_DEF = {"columns": {"id": {"type": "WSTRING", "length": 512, "nullable": False},
                                "fname": {"type": "WSTRING", "length": 255, "nullable": True},
                                "lname": {"type": "WSTRING", "length": 255, "nullable": True},
                                "REGION": {"type": "WSTRING", "length": 1000, "nullable": True}},
                    "primary-key": ["id"], "collation-name": "latin1_swedish_ci"}
CREATE_SBTEST = {"control": {"table-def": SBTEST_TABLE_DEF},
                 "metadata": {"timestamp": "2019-11-21T19:14:22.223792Z", "record-type": "control",
                              "operation": "create-table", "partition-key-type": "task-id", "schema-name": "sbtest",
                              "table-name": "sbtest_x"}}
INSERT_SBTEST = {"data": {"id": 100000161, "fname": "val61s", "lname": "val61s", "REGION": "val61s"},
                 "metadata": {"timestamp": "2019-10-31T22:53:59.721201Z", "record-type": "data",
                              "operation": "insert", "partition-key-type": "primary-key",
                              "partition-key-value": "sbtest.sbtest_x.100000161", "schema-name": "sbtest",
                              "table-name": "sbtest_x", "transaction-id": 9324410911751,
                              "transaction-record-id": 1, "prev-transaction-id": 9324410910341,
                              "prev-transaction-record-id": 10, "commit-timestamp": "2019-10-31T22:53:55.000000Z",
                              "stream-position": "mysql-bin-changelog.002171:36912271:0:36912333:9324410911751:"
                                                 "mysql-bin-changelog.002171:36912209"}}

TRANSACTION_DETAILS = ("transaction-id", "transaction-record-id", "prev-transaction-id", "prev-transaction-record-id",
                       "commit-timestamp", "stream-position")
INSERT_BY_DEFAULT = {"data": {**INSERT_SBTEST["data"], "id": 100000162},  # IncludeTransactionDetails is off
                     "metadata": {**{k: v for k, v in INSERT_SBTEST["metadata"].items()
                                     if k not in TRANSACTION_DETAILS},
                                  "partition-key-value": "sbtest.sbtest_x.100000162"}}


def _data(table: str, row: dict, position: int) -> dict:
    return {"data": row, "metadata": {"timestamp": f"2019-11-22T00:00:0{position}.000000Z", "record-type": "data",
                                      "operation": "insert", "partition-key-type": "primary-key",
                                      "schema-name": "sbtest", "table-name": table, "transaction-id": 42 + position,
                                      "transaction-record-id": 1}}


def _control(table: str, operation: str, table_def: dict | None = None, schema: str = "sbtest") -> dict:
    return {**({"control": {"table-def": table_def}} if table_def else {}),
            "metadata": {"timestamp": "2019-11-21T19:14:23.000000Z", "record-type": "control", "operation": operation,
                         "partition-key-type": "task-id", "schema-name": schema, "table-name": table}}


CUSTOMERS_DEF = {"columns": {"cust_id": {"type": "INT4", "nullable": False}, "name": {"type": "WSTRING"}},
                 "primary-key": ["cust_id"]}
FIRST = [_control("customers", "create-table", CUSTOMERS_DEF)]  # alone in its run: its table comes later
SECOND = [CREATE_SBTEST, INSERT_SBTEST, INSERT_BY_DEFAULT,
          _data("sbtest_x", {"id": 1, "fname": "a", "lname": "b", "REGION": "eu"}, 1),
          {**_data("orders", {"id": 1, "amount": 9.5}, 2),  # a commit time that is not one: the message time
           "metadata": {**_data("orders", {}, 2)["metadata"], "commit-timestamp": "not a time"}},
          _data("customers", {"cust_id": 7, "name": "c"}, 3),
          _control("sbtest_x", "add-column"),  # IncludeTableAlterOperations, no table-def
          _control("sbtest_x", "change-columns"),
          _control("orders", "rename-table"),
          _control("awsdms_apply_exceptions", "create-table", schema="")]  # the task's own control table


@dataclass(frozen=True)
class Landed:
    cfg: PipelineConfig
    db: str  # the topic, which names the database part of the lake tables
    reports: list[BatchReport]


def _produce(cfg: PipelineConfig, topic: str, records: list[dict]) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka.client_conf(cfg.kafka))
    for record in records:
        producer.produce(topic, value=json.dumps(record).encode(), key=b"task-id")
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def landed(cfg: PipelineConfig, stack, spark, tmp_path_factory) -> Landed:
    topic = f"dmsk{uuid.uuid4().hex[:6]}"  # one topic for the whole task, as DMS's default
    changelog = cfg.changelog.model_copy(update={"topics": [topic],
                                                 "checkpoint": str(tmp_path_factory.mktemp("dmsk") / "cp")})
    cfg = cfg.model_copy(update={"changelog": changelog})
    reports = []
    for records in (FIRST, SECOND):
        _produce(cfg, topic, records)
        stage = ChangelogStage(cfg, spark)
        stage.run(until_caught_up=True)
        reports += stage.reports
    return Landed(cfg, topic, reports)


def _rows(spark, landed: Landed, table: str) -> list[dict]:
    found = lake_table(landed.cfg, spark, "changelog", f"{landed.db}_{table}")
    assert found.exists(), f"no changelog table {landed.db}_{table}"
    return [row.asDict() for row in found.read().collect()]


def test_each_table_of_one_topic_lands_in_its_own_changelog_table(landed: Landed, spark) -> None:
    sbtest, orders = _rows(spark, landed, "sbtest_x"), _rows(spark, landed, "orders")
    assert sorted(row["id"] for row in sbtest) == [1, 100000161, 100000162]
    assert [(row["id"], row["amount"], row["_source_ts"]) for row in orders] == [(1, 9.5, datetime(2019, 11, 22, 0, 0, 2))]
    assert "amount" not in sbtest[0] and "fname" not in orders[0]  # no columns merged across tables
    documented = next(row for row in sbtest if row["id"] == 100000161)
    assert (documented["fname"], documented["REGION"], documented["_op"]) == ("val61s", "val61s", "c")
    assert documented["_source"]["schema"] == "sbtest" and documented["_source"]["table"] == "sbtest_x"
    assert documented["_source"]["tx_id"] == "9324410911751"
    # the commit time, not when DMS built the message (22:53:59.721201)
    assert documented["_source_ts"] == datetime(2019, 10, 31, 22, 53, 55)
    assert documented["_seq"]["source_minor"] == 1
    by_default = next(row for row in sbtest if row["id"] == 100000162)  # no transaction details: the message time
    assert by_default["_source_ts"] == datetime(2019, 10, 31, 22, 53, 59, 721201)
    assert by_default["_source"]["tx_id"] is None and by_default["_seq"]["source_minor"] == 0
    names = table_names(landed.cfg, spark, "changelog")
    assert f"{landed.db}_{landed.db}" not in names  # nothing routed by the topic
    assert f"{landed.db}_awsdms_apply_exceptions" not in names  # a control record lands no row


def test_control_records_are_counted_and_never_dead_lettered(landed: Landed, spark) -> None:
    counted: dict[str, int] = {}
    for report in landed.reports:
        for operation, n in report.control.items():
            counted[operation] = counted.get(operation, 0) + n
    assert counted == {"create-table": 3, "add-column": 1, "change-columns": 1, "rename-table": 1}
    letters = lake_table(landed.cfg, spark, "changelog", landed.cfg.changelog.dead_letter_table)
    if letters.exists():
        assert letters.read().where(f"topic LIKE '{landed.db}%'").count() == 0


def test_a_table_def_is_kept_with_its_table_as_the_key(landed: Landed, spark) -> None:
    table = lake_table(landed.cfg, spark, "changelog", f"{landed.db}_sbtest_x")
    properties = table.properties()
    assert json.loads(properties[KEYS_PROPERTY]) == ["id"]
    assert json.loads(properties[DMS_TABLE_DEF_PROPERTY])["columns"]["REGION"]["length"] == 1000
    assert KEYS_PROPERTY not in lake_table(landed.cfg, spark, "changelog", f"{landed.db}_orders").properties()


def test_a_table_def_that_came_before_its_table_is_kept_until_the_table_is_made(landed: Landed, spark) -> None:
    """The `create-table` of `customers` landed in a run of its own, before any of its rows: the checkpoint kept
    its definition, and the run that created the table recorded it."""
    assert [row["cust_id"] for row in _rows(spark, landed, "customers")] == [7]
    properties = lake_table(landed.cfg, spark, "changelog", f"{landed.db}_customers").properties()
    assert json.loads(properties[KEYS_PROPERTY]) == ["cust_id"]
    assert json.loads(properties[DMS_TABLE_DEF_PROPERTY]) == CUSTOMERS_DEF


def test_the_mirror_takes_dms_keys_and_names_the_keyless_table_while_the_others_mirror(landed: Landed,
                                                                                      spark) -> None:
    """No `mirror.keys` setting: sbtest_x and customers are keyed by their table-def's primary key; orders came
    without a control record, so it has no key, and the run says so in one message after mirroring the rest."""
    from pipeline.stages.mirror import MirrorStage, MissingKeys

    assert not landed.cfg.mirror.keys
    names = [f"{landed.db}_{table}" for table in ("customers", "orders", "sbtest_x")]
    with pytest.raises(MissingKeys) as raised:
        MirrorStage(landed.cfg, spark).run_once(names)
    assert raised.value.tables == [f"{landed.db}_orders"]
    assert f"mirror.keys.{landed.db}_orders" in str(raised.value)
    assert sorted(report.table for report in raised.value.reports) == [names[0], names[2]]
    mirrored = lake_table(landed.cfg, spark, "mirror", f"{landed.db}_sbtest_x").read()
    assert sorted(row["id"] for row in mirrored.collect()) == [1, 100000161, 100000162]
    assert not lake_table(landed.cfg, spark, "mirror", f"{landed.db}_orders").exists()
