"""Debezium's semantic types as the simulator writes them: Avro types carrying Kafka Connect's annotations,
as Debezium's Avro converters register them, and what a value of each means in the lake (for verification)."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any, Callable

PLACEHOLDER = "__debezium_unavailable_value"  # what Postgres sends for an unchanged TOASTed value
DECIMAL_12_2 = {"type": "bytes", "scale": 2, "precision": 12, "logicalType": "decimal", "connect.version": 1,
                "connect.parameters": {"scale": "2", "connect.decimal.precision": "12"},
                "connect.name": "org.apache.kafka.connect.data.Decimal"}
EPOCH = datetime(1970, 1, 1)


def semantic(avro: str, name: str, **parameters: str) -> dict[str, Any]:
    """An Avro primitive annotated with a Kafka Connect schema name (and parameters), as the converter writes it."""
    annotated: dict[str, Any] = {"type": avro, "connect.version": 1, "connect.name": name}
    if parameters:
        annotated["connect.parameters"] = parameters
    return annotated


def _time_of_day(micros: int) -> str:
    return (EPOCH + timedelta(microseconds=micros)).strftime("%H:%M:%S.%f")


def _zoned(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(timezone.utc)


# connect.name -> (the lake type it lands as, the lake value of a row value)
LAKE_VALUES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "io.debezium.time.MicroTimestamp": ("timestamp_ntz", lambda v: EPOCH + timedelta(microseconds=v)),
    "io.debezium.time.ZonedTimestamp": ("timestamp", _zoned),
    "io.debezium.time.Date": ("date", lambda v: date(1970, 1, 1) + timedelta(days=v)),
    "io.debezium.time.MicroTime": ("string", _time_of_day),
}


def lake_value(avro_type: Any, lake_type: str) -> Callable[[Any], Any] | None:
    """How a row value of a column of `avro_type` reads in a lake column of `lake_type`; None when as it is
    (a format that carries no semantic types lands the raw value)."""
    name = avro_type.get("connect.name") if isinstance(avro_type, dict) else None
    found = LAKE_VALUES.get(name or "")
    return found[1] if found and found[0] == lake_type else None
