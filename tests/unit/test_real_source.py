"""The real-source parts without services: connector configuration, binaries lookup, the stack's services,
the CLI's `--with`, the DML driver's statements and the source-to-lake value map."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from pipeline.cli.commands import _stack
from pipeline.cli.parser import build_parser
from pipeline.config.settings import ConfigError, load_config
from pipeline.runtime.jvm import SetupError
from pipeline.stack.connect_api import ConnectApi, ConnectorError
from pipeline.stack import debezium
from pipeline.stack.debezium import PostgresSource, connector_config, wait_delivered
from pipeline.stack.postgres import TOOLS, find_bin_dir
from pipeline.stack.services import all_services
from simulators.postgres import ShopDriver, SourceColumn


def _cfg(tmp_path: Path, *overrides: str):
    return load_config(overrides=[f"home={tmp_path}", *overrides], environ={})


def test_the_converter_is_configured_as_seed_002(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "stack.registry_port=18081")
    config = connector_config(cfg, PostgresSource("shop_cdc", "shop", ("public.customers",)))
    for side in ("key", "value"):
        assert config[f"{side}.converter"] == "io.apicurio.registry.utils.converter.AvroConverter"
        assert config[f"{side}.converter.apicurio.registry.url"] == "http://127.0.0.1:18081/apis/registry/v2"
        assert config[f"{side}.converter.apicurio.registry.auto-register"] == "true"
        assert config[f"{side}.converter.apicurio.registry.find-latest"] == "true"
    assert not any(".headers." in key or "use-id" in key for key in config)  # the rest stays default
    assert config["skipped.operations"] == "none" and config["plugin.name"] == "pgoutput"
    assert config["slot.name"] == "shop_cdc" and config["publication.name"] == "shop_cdc_pub"
    assert "transforms" not in config


def test_unwrap_adds_the_seeds_transform(tmp_path: Path) -> None:
    config = connector_config(_cfg(tmp_path), PostgresSource("flat", "shopflat", ("public.orders",), unwrap=True))
    assert config["transforms.unwrap.type"] == "io.debezium.transforms.ExtractNewRecordState"
    assert config["transforms.unwrap.delete.tombstone.handling.mode"] == "rewrite-with-tombstone"
    assert config["transforms.unwrap.add.fields"] == "op,db,table,schema,lsn,source.ts_ms"


def test_a_connector_name_must_be_a_slot_name() -> None:
    with pytest.raises(ValueError, match="replication slot"):
        PostgresSource("Shop-CDC", "shop", ("public.customers",))


class _OffsetsOf(ConnectApi):
    """Connect's committed offsets as a connector's polls would see them, one list per poll."""

    def __init__(self, *polls: list[dict]) -> None:
        super().__init__("http://127.0.0.1:1")
        self.polls = list(polls)

    def offsets(self, name: str) -> list[dict]:
        return self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]

    def status(self, name: str) -> dict:
        return {"connector": {"state": "RUNNING"}, "tasks": [{"state": "RUNNING"}]}


def test_delivered_means_connect_committed_a_change_at_or_after_the_position(tmp_path: Path, monkeypatch) -> None:
    """The last change's `lsn_commit` (what the replication slot gets confirmed) may fall short of the position
    read before it: only the change's own `lsn` says it was delivered."""
    mark = 0x28C6000  # 0/28C6000
    polls = _OffsetsOf([], [{"lsn": mark - 80, "lsn_commit": mark - 200}], [{"lsn": mark + 56, "lsn_commit": mark - 8}])
    monkeypatch.setattr(debezium, "connect_api", lambda cfg: polls)
    wait_delivered(_cfg(tmp_path), "bf_1", "0/28C6000", poll_s=0)
    assert polls.polls == [[{"lsn": mark + 56, "lsn_commit": mark - 8}]]
    high = _OffsetsOf([{"lsn": (1 << 32) + 16}])  # 1/10: past 0/FFFFFFFF
    monkeypatch.setattr(debezium, "connect_api", lambda cfg: high)
    wait_delivered(_cfg(tmp_path), "bf_1", "0/FFFFFFFF", poll_s=0)


def test_a_change_not_delivered_in_time_names_the_connector_its_state_and_offsets(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    monkeypatch.setattr(debezium, "connect_api", lambda cfg: _OffsetsOf([{"lsn": 42}]))
    with pytest.raises(ConnectorError, match=r"connector bf_1 did not deliver WAL position 1/0 within 0 s "
                                             r"\(connector, tasks: RUNNING, RUNNING; committed offsets: "
                                             r"\[\{'lsn': 42\}\]\)"):
        wait_delivered(_cfg(tmp_path), "bf_1", "1/0", timeout_s=0, poll_s=0)


def test_binaries_are_found_in_the_configured_folder_or_named_with_the_fix(tmp_path: Path) -> None:
    for tool in TOOLS:
        (tmp_path / tool).write_text("")
    assert find_bin_dir(tmp_path) == tmp_path
    (tmp_path / "psql").unlink()
    with pytest.raises(SetupError, match="apt-get install postgresql"):
        find_bin_dir(tmp_path)


def test_postgres_and_connect_run_only_when_asked(tmp_path: Path) -> None:
    assert {"postgres", "connect"}.isdisjoint(s.name for s in all_services(_cfg(tmp_path)))
    services = [s.name for s in all_services(_cfg(tmp_path, "stack.postgres=true"))]
    assert services.index("postgres") < services.index("connect")  # start order: the source before its reader


def test_with_postgres_on_the_command_line_sets_the_setting(tmp_path: Path) -> None:
    args = build_parser().parse_args(["stack", "up", "--with", "postgres"])
    assert {s.name for s in _stack(_cfg(tmp_path), args).services} >= {"postgres", "connect"}
    args = build_parser().parse_args(["stack", "status"])
    assert "postgres" not in {s.name for s in _stack(_cfg(tmp_path), args).services}


def test_the_new_ports_must_be_distinct(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="distinct"):
        _cfg(tmp_path, "stack.connect_port=9092")


class _RecordingPsql:
    """Collects the driver's SQL instead of running it."""

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def execute(self, sql: str) -> str:
        self.scripts.append(sql)
        return ""


def _statements(seed: int, operations: int = 300) -> list[str]:
    psql = _RecordingPsql()
    driver = ShopDriver(psql, seed)  # type: ignore[arg-type]
    driver.create()
    driver.run(operations)
    return "\n".join(psql.scripts).splitlines()


def test_the_driver_makes_every_kind_of_change_reproducibly() -> None:
    statements = _statements(seed=3)
    assert statements == _statements(seed=3)
    assert statements != _statements(seed=4)
    text = "\n".join(statements)
    for needle in ("ALTER TABLE orders ADD COLUMN coupon text;", "TRUNCATE orders;", "SET order_id =",
                   "DELETE FROM customers", "DELETE FROM orders", "INSERT INTO customers (id,", "O''Brien"):
        assert needle in text, needle
    updates = [s for s in statements if s.startswith("UPDATE customers")]
    assert sum("notes =" not in s for s in updates) > len(updates) / 2  # mostly TOAST-unchanged


def test_source_values_become_the_lake_types_values() -> None:
    assert SourceColumn("c", "timestamp with time zone", None, None).lake_value("2024-01-02T03:04:05.5+02:00") == \
        datetime(2024, 1, 2, 1, 4, 5, 500000, tzinfo=timezone.utc)
    assert SourceColumn("c", "timestamp without time zone", None, None).lake_value("1960-01-02T03:04:05") == \
        datetime(1960, 1, 2, 3, 4, 5)
    assert SourceColumn("c", "date", None, None).lake_value("1941-02-03") == date(1941, 2, 3)
    assert SourceColumn("c", "time without time zone", None, None).lake_value("08:01:40") == "08:01:40.000000"
    assert SourceColumn("c", "bytea", None, None).lake_value("00ff") == b"\x00\xff"
    unbounded = SourceColumn("c", "numeric", None, None)
    assert (unbounded.lake_type, unbounded.lake_value("-12")) == ("decimal(38,18)", Decimal("-12"))
    assert SourceColumn("c", "numeric", 12, 2).lake_type == "decimal(12,2)"
    assert SourceColumn("c", "USER-DEFINED", None, None).lake_type == "string"


def test_a_failed_connector_raises_with_its_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    api = ConnectApi("http://127.0.0.1:1")
    status = {"connector": {"state": "RUNNING"}, "tasks": [{"state": "FAILED", "trace": "PSQLException: no slot"}]}
    monkeypatch.setattr(api, "status", lambda name: status)
    with pytest.raises(ConnectorError, match="PSQLException: no slot"):
        api.wait_running("shop_cdc", timeout_s=5)
