"""Debezium's Postgres connector on the stack's Connect worker: its configuration, registration and removal.

The converter is configured as seed 002 configures it (Apicurio's AvroConverter, the registry's v2 API,
`auto-register`, `find-latest`, everything else default): plain Avro values whose schema's global id travels in
Kafka headers. `unwrap=True` adds the seed's `ExtractNewRecordState` transform (deletes rewritten with
`__deleted`, tombstones kept, `op,db,table,schema,lsn,source.ts_ms` added), the `debezium-unwrapped` format.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from pipeline.config.settings import PipelineConfig
from pipeline.stack.connect_api import ConnectApi, ConnectorError
from pipeline.stack.postgres import SUPERUSER
from pipeline.stack.psql import Psql

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")  # it also names the replication slot and the publication


@dataclass(frozen=True)
class PostgresSource:
    """One connector: its name (also its replication slot's), its topic prefix and its tables."""

    name: str
    topic_prefix: str
    tables: tuple[str, ...]  # schema.table
    unwrap: bool = False
    database: str | None = None  # default: stack.postgres_database
    snapshot_mode: str = "initial"  # `no_data`: stream only, the rows already there left to `pipeline backfill`

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"connector name {self.name!r} also names a replication slot: use lower-case letters, "
                             "digits and underscores (at most 63)")

    @property
    def publication(self) -> str:
        return f"{self.name}_pub"


def connector_config(cfg: PipelineConfig, source: PostgresSource) -> dict[str, str]:
    s = cfg.stack
    registry = f"{cfg.registry.url or f'http://{s.host}:{s.registry_port}'}/apis/registry/v2"
    config = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": s.host,
        "database.port": str(s.postgres_port),
        "database.user": SUPERUSER,
        "database.password": SUPERUSER,  # unused: the stack's cluster trusts local connections
        "database.dbname": source.database or s.postgres_database,
        "topic.prefix": source.topic_prefix,
        "table.include.list": ",".join(source.tables),
        "plugin.name": "pgoutput",
        "slot.name": source.name,
        "publication.name": source.publication,
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": source.snapshot_mode,
        "skipped.operations": "none",  # truncates too (op = t)
    }
    for side in ("key", "value"):
        config |= {
            f"{side}.converter": "io.apicurio.registry.utils.converter.AvroConverter",
            f"{side}.converter.apicurio.registry.url": registry,
            f"{side}.converter.apicurio.registry.auto-register": "true",
            f"{side}.converter.apicurio.registry.find-latest": "true",
        }
    if source.unwrap:
        config |= {
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            # Debezium 3 spells the seed's `drop.tombstones=false` + `delete.handling.mode=rewrite` as one setting.
            # The transform drops truncate events whatever the setting (Debezium 3.3): the lake never sees them.
            "transforms.unwrap.delete.tombstone.handling.mode": "rewrite-with-tombstone",
            "transforms.unwrap.add.fields": "op,db,table,schema,lsn,source.ts_ms",
        }
    return config


def connect_api(cfg: PipelineConfig) -> ConnectApi:
    return ConnectApi(f"http://{cfg.stack.host}:{cfg.stack.connect_port}")


def register(cfg: PipelineConfig, source: PostgresSource, timeout_s: float = 120.0) -> None:
    """Put the connector and wait until it runs and its snapshot is done: its replication slot is then
    streaming (the slot is held by a WAL sender only from the end of the snapshot on)."""
    psql = Psql(cfg.stack, source.database)
    connect_api(cfg).put(source.name, connector_config(cfg, source))
    connect_api(cfg).wait_running(source.name, timeout_s, ready=lambda: slot_streaming(psql, source.name))


def unregister(cfg: PipelineConfig, source: PostgresSource, timeout_s: float = 30.0) -> None:
    """Delete the connector, then its replication slot and publication (a slot left behind pins the WAL)."""
    psql = Psql(cfg.stack, source.database)  # a publication lives in its database
    connect_api(cfg).delete(source.name)
    deadline = time.monotonic() + timeout_s
    while slot_streaming(psql, source.name):
        if time.monotonic() > deadline:
            raise ConnectorError(f"replication slot {source.name} is still in use {timeout_s:.0f} s after its "
                                 "connector was deleted")
        time.sleep(0.5)
    psql.execute(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                 f"WHERE slot_name = '{source.name}';\nDROP PUBLICATION IF EXISTS {source.publication};")


def slot_streaming(psql: Psql, slot: str) -> bool:
    return psql.execute(f"SELECT active FROM pg_replication_slots WHERE slot_name = '{slot}';").strip() == "t"


def wait_delivered(cfg: PipelineConfig, connector: str, lsn: str, timeout_s: float = 120.0,
                   poll_s: float = 0.5) -> None:
    """Until Connect has committed the offset of a change of `connector` at or after WAL position `lsn`: every
    change written before `lsn` is then in Kafka (Connect commits an offset only once the record and all before
    it were acked). The replication slot's confirmed position is no such signal: Debezium confirms the offset's
    `lsn_commit`, the end of the transaction before the last one delivered, which falls short of `lsn` whenever
    WAL was written between that commit and the reading of `lsn` (`pg_current_wal_lsn` is the write position)."""
    api, target = connect_api(cfg), _lsn_value(lsn)
    deadline = time.monotonic() + timeout_s
    while not _reaches(offsets := api.offsets(connector), target):
        if time.monotonic() > deadline:
            raise ConnectorError(f"connector {connector} did not deliver WAL position {lsn} within {timeout_s:.0f} s "
                                 f"(connector, tasks: {api.states(connector)}; committed offsets: {offsets}); "
                                 "see the Connect worker's log")
        time.sleep(poll_s)


def _reaches(offsets: list[dict[str, Any]], target: int) -> bool:
    """Whether a committed Debezium offset is of a change at or after WAL position `target`."""
    return any(int(offset.get("lsn") or 0) >= target for offset in offsets)


def _lsn_value(lsn: str) -> int:
    """PostgreSQL's `X/Y` text of a WAL position as the number Debezium's offsets hold."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline.stack.debezium register|delete NAME ...`: a connector on the stack's Connect worker."""
    import argparse

    from pipeline.config.settings import load_config

    parser = argparse.ArgumentParser(prog="python -m pipeline.stack.debezium", description=__doc__)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("action", choices=["register", "delete"])
    parser.add_argument("name", help="the connector; also its replication slot")
    parser.add_argument("--prefix", help="topic prefix (default: the name)")
    parser.add_argument("--tables", default="public.customers,public.orders", help="schema.table, comma-separated")
    parser.add_argument("--unwrap", action="store_true", help="flatten records with ExtractNewRecordState")
    args = parser.parse_args(argv)
    cfg = load_config(overrides=args.overrides)
    source = PostgresSource(args.name, args.prefix or args.name, tuple(args.tables.split(",")), args.unwrap)
    if args.action == "register":
        register(cfg, source)
        print(f"connector {source.name} is running; topics {source.topic_prefix}.<schema>.<table>")
    else:
        unregister(cfg, source)
        print(f"connector {source.name}, its replication slot and its publication are gone")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
