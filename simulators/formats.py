"""CDC message formats as the real tools write them: the records and Avro schemas, not the bytes.

- Debezium full envelope (`before`, `after`, `source`, `transaction`, `op`, `ts_ms`), schemas named as
  Debezium names them: `<server>.<schema>.<table>.Key`, `.Value`, `.Envelope`.
- Debezium unwrapped: `ExtractNewRecordState` with `delete.handling.mode=rewrite` and
  `add.fields=op,db,table,schema,lsn,source.ts_ms`, so `__op … __deleted` ("true"/"false" strings).
- Postgres through Debezium: an update that leaves a TOASTed column unchanged carries Debezium's placeholder
  for it (REPLICA IDENTITY DEFAULT); `TRUNCATE` is an envelope with `op = t` and no row (the unwrap SMT drops
  it); semantic types are the tables' annotated Avro types.
- AWS DMS: `data` + `metadata`. As DMS's own JSON the metadata keys are hyphenated (`record-type`); Avro names
  cannot hold a hyphen, so the Avro form spells them with underscores (`record_type`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from simulators import dms_types
from simulators.semantic import PLACEHOLDER
from simulators.source import Change
from simulators.tables import Row, Table

DEBEZIUM_VERSION = "2.7.3.Final"
DMS_OPERATIONS = {"r": "load", "c": "insert", "u": "update", "d": "delete"}
SNAPSHOT_FLAG = {"r": "true", "c": "false", "u": "false", "d": "false", "t": "false"}


class Format(Protocol):
    name: str
    avro: bool  # False: the value is JSON text with no registry

    def key_schema(self, table: Table) -> dict[str, Any] | None: ...

    def value_schema(self, table: Table, version: int) -> dict[str, Any] | None: ...

    def key(self, change: Change) -> Any: ...

    def value(self, change: Change) -> Any: ...


def _nullable(avro_type: str) -> list[str]:
    return ["null", avro_type]


def _row_fields(table: Table, version: int) -> list[dict[str, Any]]:
    return [{"name": col.name, "type": col.avro_type} if col.name in table.keys
            else {"name": col.name, "type": _nullable(col.avro_type), "default": None}
            for col in table.columns_at(version)]


def _key_record(table: Table) -> dict[str, Any] | None:
    """The primary key's columns, as Debezium's key schema; None for a table without one (its messages have no
    key)."""
    if not table.keys:
        return None
    return {"type": "record", "name": "Key", "namespace": table.qualified,
            "fields": [{"name": col.name, "type": col.avro_type} for col in table.columns if col.name in table.keys]}


def _key_value(change: Change) -> dict[str, Any]:
    image = change.image
    return {name: image[name] for name in change.table.keys}


def sent_image(change: Change) -> Row | None:
    """The after-image as Postgres's logical decoding sends it: an update's unchanged TOASTed values replaced
    by Debezium's placeholder."""
    after, toasted = change.after, change.table.toasted
    if change.op != "u" or not toasted or after is None or change.before is None:
        return after
    return {**after, **{name: PLACEHOLDER for name in toasted if after.get(name) == change.before.get(name)}}


def commit_timestamp(change: Change) -> str:
    """ISO-8601 with microseconds in UTC, as DMS writes `metadata.timestamp`."""
    return datetime.fromtimestamp(change.commit_us / 1e6, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sequence(change: Change) -> str:
    """Debezium Postgres `source.sequence`: `["<last commit LSN>","<event LSN>"]`, a JSON array of strings."""
    last = "null" if change.last_commit_lsn is None else f'"{change.last_commit_lsn}"'
    return f'[{last},"{change.lsn}"]'


class DebeziumEnvelope:
    name = "debezium"
    avro = True

    def __init__(self, tombstones: bool = False) -> None:
        self.tombstones = tombstones

    def key_schema(self, table: Table) -> dict[str, Any] | None:
        return _key_record(table)

    def value_schema(self, table: Table, version: int) -> dict[str, Any]:
        row = {"type": "record", "name": "Value", "namespace": table.qualified, "fields": _row_fields(table, version)}
        source = {
            "type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
            "fields": [
                {"name": "version", "type": "string"},
                {"name": "connector", "type": "string"},
                {"name": "name", "type": "string"},
                {"name": "ts_ms", "type": "long"},
                {"name": "snapshot", "type": ["string", "null"], "default": "false"},
                {"name": "db", "type": "string"},
                {"name": "sequence", "type": ["null", "string"], "default": None},
                {"name": "schema", "type": "string"},
                {"name": "table", "type": "string"},
                {"name": "txId", "type": ["null", "long"], "default": None},
                {"name": "lsn", "type": ["null", "long"], "default": None},
                {"name": "xmin", "type": ["null", "long"], "default": None},
            ],
        }
        block = {"type": "record", "name": "block", "namespace": "event", "fields": [
            {"name": "id", "type": "string"},
            {"name": "total_order", "type": "long"},
            {"name": "data_collection_order", "type": "long"},
        ]}
        return {
            "type": "record", "name": "Envelope", "namespace": table.qualified,
            "fields": [
                {"name": "before", "type": ["null", row], "default": None},
                {"name": "after", "type": ["null", "Value"], "default": None},
                {"name": "source", "type": source},
                {"name": "transaction", "type": ["null", block], "default": None},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": None},
            ],
        }

    def key(self, change: Change) -> dict[str, Any]:
        return _key_value(change)

    def value(self, change: Change) -> dict[str, Any]:
        """Non-null union values are given as (branch name, value), fastavro's tuple notation: without it the
        writer tries the branches in turn, validating the value against each, which costs more than writing it.
        (The row images stay plain dicts: they are the source's rows, shared with the ground truth.)"""
        table, op, lsn, ts_ms = change.table, change.op, change.lsn, change.ts_ms
        row_type = table.qualified + ".Value"
        return {
            "before": (row_type, change.before) if op == "u" or op == "d" else None,
            "after": None if change.after is None else (row_type, sent_image(change)),
            "source": {
                "version": DEBEZIUM_VERSION, "connector": "postgresql", "name": table.database,
                "ts_ms": ts_ms, "snapshot": ("string", SNAPSHOT_FLAG[op]), "db": table.database,
                "sequence": ("string", sequence(change)), "schema": table.schema, "table": table.name,
                "txId": ("long", change.tx_id), "lsn": ("long", lsn), "xmin": None,
            },
            "transaction": None if op == "r" else ("event.block", {
                "id": f"{change.tx_id}:{lsn}", "total_order": change.tx_position,
                "data_collection_order": change.tx_position,
            }),
            "op": op,
            "ts_ms": ("long", ts_ms),
        }


class DebeziumUnwrapped:
    name = "debezium-unwrapped"
    avro = True

    def key_schema(self, table: Table) -> dict[str, Any] | None:
        return _key_record(table)

    def value_schema(self, table: Table, version: int) -> dict[str, Any]:
        added = [("__op", "string"), ("__db", "string"), ("__table", "string"), ("__schema", "string"),
                 ("__lsn", "long"), ("__source_ts_ms", "long"), ("__deleted", "string")]
        return {"type": "record", "name": "Value", "namespace": table.qualified,
                "fields": _row_fields(table, version)
                + [{"name": name, "type": _nullable(kind), "default": None} for name, kind in added]}

    def key(self, change: Change) -> dict[str, Any]:
        return _key_value(change)

    def value(self, change: Change) -> dict[str, Any]:
        table = change.table
        return {**(sent_image(change) or change.image), "__op": change.op, "__db": table.database,
                "__table": table.name, "__schema": table.schema, "__lsn": change.lsn, "__source_ts_ms": change.ts_ms,
                "__deleted": "true" if change.op == "d" else "false"}


class DmsAvro:
    name = "dms"
    avro = True

    def key_schema(self, table: Table) -> None:
        return None  # DMS keys Kafka messages by the primary key's text

    def value_schema(self, table: Table, version: int) -> dict[str, Any]:
        metadata = [("timestamp", "string"), ("record_type", "string"), ("operation", "string"),
                    ("partition_key_type", "string"), ("schema_name", "string"), ("table_name", "string"),
                    ("transaction_id", "long"), ("transaction_record_id", "long")]
        return {
            "type": "record", "name": "DmsRecord", "namespace": f"dms.{table.schema}.{table.name}",
            "fields": [
                {"name": "data", "type": {"type": "record", "name": "Data", "fields": _row_fields(table, version)}},
                {"name": "metadata", "type": {"type": "record", "name": "Metadata", "namespace": "dms",
                                              "fields": [{"name": n, "type": t} for n, t in metadata]}},
            ],
        }

    def key(self, change: Change) -> bytes:
        return str(change.key).encode()

    def value(self, change: Change) -> dict[str, Any]:
        return {"data": change.image, "metadata": _dms_metadata(change, separator="_")}


class DmsJson:
    """DMS's own JSON: the row with DMS's values (`simulators/dms_types.py`), no registry."""

    name = "dms-json"
    avro = False

    def __init__(self) -> None:
        self._converters: dict[str, tuple] = {}  # table -> its `dms_types.converters`, built once

    def image(self, change: Change) -> Row:
        """The row as DMS sends it."""
        table = change.table
        convert = self._converters.get(table.qualified)
        if convert is None:
            convert = self._converters[table.qualified] = dms_types.converters(table)
        return dms_types.dms_row(change.image, convert)

    def key_schema(self, table: Table) -> None:
        return None

    def value_schema(self, table: Table, version: int) -> None:
        return None

    def key(self, change: Change) -> bytes:
        return str(change.key).encode()

    def value(self, change: Change) -> bytes:
        return json.dumps({"data": self.image(change), "metadata": _dms_metadata(change, separator="-")},
                          separators=(",", ":"), default=dms_types.json_default).encode()


def _dms_metadata(change: Change, separator: str) -> dict[str, Any]:
    def name(words: str) -> str:
        return words.replace(" ", separator)

    return {
        "timestamp": commit_timestamp(change),
        name("record type"): "data",
        "operation": DMS_OPERATIONS[change.op],
        name("partition key type"): "primary-key",
        name("schema name"): change.table.schema,
        name("table name"): change.table.name,
        name("transaction id"): change.tx_id,
        name("transaction record id"): change.tx_position,
    }


@dataclass(frozen=True)
class DmsRow:
    """One row of a DMS S3 target file; the S3 transport writes them into CSV or Parquet files."""

    op: str  # I, U, D (full-load rows too carry I: IncludeOpForFullLoad)
    commit_us: int
    image: dict[str, Any]  # with DMS's values
    load: bool  # a full-load row (LOAD files), not a change (CDC files)
    table: Table


class DmsFiles(DmsJson):
    """AWS DMS's S3 target: rows with `Op` and the commit time, in files; keyed and unregistered as DMS JSON."""

    def value(self, change: Change) -> DmsRow:  # type: ignore[override]
        return DmsRow(DMS_FILE_OPS[change.op], change.commit_us, self.image(change), change.op == "r", change.table)


class DmsCsv(DmsFiles):
    name = "dms-csv"


class DmsParquet(DmsFiles):
    name = "dms-parquet"


DMS_FILE_OPS = {"r": "I", "c": "I", "u": "U", "d": "D"}
FORMATS: dict[str, type] = {f.name: f for f in (DebeziumEnvelope, DebeziumUnwrapped, DmsAvro, DmsJson, DmsCsv,
                                                DmsParquet)}
FILE_FORMATS = ("dms-csv", "dms-parquet")  # written as files to S3, not sent as messages
