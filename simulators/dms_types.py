"""What AWS DMS sends for a source column: DMS maps a Postgres type to one of its own (DATE, TIME, DATETIME,
NUMERIC, STRING, CLOB, BLOB, ...) and carries no Debezium annotations, so a DMS row holds plain values where a
Debezium row holds the connector's encoding (days, micro- or nanoseconds since the epoch, unscaled bytes).

`dms_row` turns a source row (as the simulator keeps it, Debezium's encoding) into DMS's values: a date, a
timestamp without a zone (a `timestamptz` in UTC), a time of day as `HH:MM:SS.ffffff` text, a decimal (an
unbounded `numeric` as DMS's NUMERIC(28,6)), bytes; JSON, XML, UUID and enums as text. DMS JSON writes them as
text (`json_default`), DMS CSV as CSV text, DMS Parquet typed (`arrow_type`).
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any, Callable

import pyarrow as pa

from simulators.semantic import LAKE_VALUES
from simulators.tables import Row, Table

UNBOUNDED_NUMERIC = pa.decimal128(28, 6)  # DMS's NUMERIC for a Postgres numeric without a precision
ARROW_TYPES = {"int": pa.int32(), "long": pa.int64(), "string": pa.string(), "double": pa.float64(),
               "float": pa.float32(), "boolean": pa.bool_(), "bytes": pa.binary()}
LAKE_TO_ARROW = {"date": pa.date32(), "timestamp_ntz": pa.timestamp("us"), "timestamp": pa.timestamp("us"),
                 "string": pa.string(), "decimal(38,18)": UNBOUNDED_NUMERIC}


def _semantic(avro_type: Any) -> str | None:
    return avro_type.get("connect.name") if isinstance(avro_type, dict) else None


def _converter(avro_type: Any) -> Callable[[Any], Any] | None:
    """How DMS writes a value of `avro_type`; None for a value it writes as it is."""
    found = LAKE_VALUES.get(_semantic(avro_type) or "")
    if found is None:
        return None
    lake_type, value = found
    if lake_type == "timestamp":  # a zoned instant: DMS writes it in UTC, without the zone
        return lambda v: value(v).replace(tzinfo=None)
    if lake_type.startswith("decimal"):  # the truth's hex form, not bytes: read from the row's bytes here
        return lambda v: value({"scale": v["scale"], "value": v["value"].hex()})
    return value


def converters(table: Table) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    """The columns of `table` (the evolution column too) whose values DMS writes differently, and how."""
    return tuple((col.name, convert) for col in (*table.columns, table.evolution)
                 if (convert := _converter(col.avro_type)) is not None)


def dms_row(row: Row, convert: tuple[tuple[str, Callable[[Any], Any]], ...]) -> Row:
    """`row` with DMS's values (`convert`: the table's `converters`)."""
    if not convert:
        return row
    out = dict(row)
    for name, value in convert:
        if out.get(name) is not None:
            out[name] = value(out[name])
    return out


def arrow_type(avro_type: Any) -> pa.DataType:
    """The Parquet (Arrow) type DMS writes a column of `avro_type` as."""
    found = LAKE_VALUES.get(_semantic(avro_type) or "")
    if found is not None:
        return LAKE_TO_ARROW[found[0]]
    if isinstance(avro_type, dict) and avro_type.get("logicalType") == "decimal":
        return pa.decimal128(avro_type["precision"], avro_type["scale"])
    return ARROW_TYPES[avro_type["type"] if isinstance(avro_type, dict) else avro_type]


def json_default(value: Any) -> Any:
    """DMS JSON's text of a value JSON has no type for."""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, (date, Decimal)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"DMS JSON cannot write {type(value).__name__}")
