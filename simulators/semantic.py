"""Debezium's semantic types as the simulator writes them: Avro types carrying Kafka Connect's annotations,
as Debezium's Avro converters register them, and what a value of each means in the lake (for verification)."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
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


def _zoned_time(text: str) -> str:
    """`HH:MM:SS.ffffffZ` (Debezium's ZonedTime, in UTC) as the lake's time-of-day text."""
    return time.fromisoformat(text.removesuffix("Z")).strftime("%H:%M:%S.%f")


def _variable_scale(value: dict[str, Any]) -> Decimal:
    """A VariableScaleDecimal `{scale, value}` (the truth keeps its bytes as hex) as its decimal."""
    digits = int.from_bytes(bytes.fromhex(value["value"]), "big", signed=True)
    return Decimal(digits).scaleb(-value["scale"])


def _after_epoch(unit_ns: int) -> Callable[[int], datetime]:
    """A count of units of `unit_ns` nanoseconds since the epoch, floored to microseconds (the lake's)."""
    return lambda v: EPOCH + timedelta(microseconds=v * unit_ns // 1000)


def _days(v: int) -> date:
    return date(1970, 1, 1) + timedelta(days=v)


# connect.name (or a plain Avro type) -> (the lake type it lands as, the lake value of a row value)
LAKE_VALUES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "io.debezium.time.Date": ("date", _days),
    "org.apache.kafka.connect.data.Date": ("date", _days),
    "io.debezium.time.Timestamp": ("timestamp_ntz", _after_epoch(1_000_000)),
    "io.debezium.time.MicroTimestamp": ("timestamp_ntz", _after_epoch(1000)),
    "io.debezium.time.NanoTimestamp": ("timestamp_ntz", _after_epoch(1)),
    "org.apache.kafka.connect.data.Timestamp": ("timestamp_ntz", _after_epoch(1_000_000)),
    "io.debezium.time.ZonedTimestamp": ("timestamp", _zoned),
    "io.debezium.time.Time": ("string", lambda v: _time_of_day(v * 1000)),
    "io.debezium.time.MicroTime": ("string", _time_of_day),
    "io.debezium.time.NanoTime": ("string", lambda v: _time_of_day(v // 1000)),
    "io.debezium.time.ZonedTime": ("string", _zoned_time),
    "io.debezium.data.VariableScaleDecimal": ("decimal(38,18)", _variable_scale),
    "bytes": ("binary", bytes.fromhex),  # the truth keeps bytes as hex
}


def lake_value(avro_type: Any, lake_type: str) -> Callable[[Any], Any] | None:
    """How a row value of a column of `avro_type` reads in a lake column of `lake_type`; None when as it is
    (a format that carries no semantic types lands the raw value)."""
    name = avro_type.get("connect.name") if isinstance(avro_type, dict) else avro_type
    found = LAKE_VALUES.get(name or "")
    return found[1] if found and found[0] == lake_type else None
