"""Kafka Connect's and Debezium's semantic types, read from the reader schema, into the lake types they mean.

Spark's `from_avro` decodes the Avro type only (a `MicroTimestamp` is a long), so each row column is converted
after decoding, driven by the field's `connect.name` (and `connect.parameters`) in the reader schema text.
The map, and why each target, is in docs/types.md. TOAST placeholders are found here too, on the raw value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import structlog
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, BinaryType, DataType, DateType, DecimalType, IntegralType, StringType,
                               TimestampType)

log = structlog.get_logger(__name__)

PLACEHOLDER = "__debezium_unavailable_value"  # Debezium's `unavailable.value.placeholder` default
VARIABLE_SCALE = DecimalType(38, 18)
EPOCH_NTZ = "TIMESTAMP_NTZ'1970-01-01 00:00:00'"
MICROS_PER_DAY = 86_400_000_000
Convert = Callable[[Column, DataType, dict[str, Any]], Column]


@dataclass(frozen=True)
class Semantic:
    """A field's Kafka Connect annotations: `connect.name` and the Avro attributes beside it."""

    name: str | None
    attributes: dict[str, Any]


def field_semantics(schema: dict[str, Any], fmt: str) -> dict[str, Semantic]:
    """Per row column of a format's reader schema, its annotations (from the union's non-null branch; a named
    type used again is referred to by its full name, as Avro requires)."""
    named = named_types(schema)
    found = {}
    for field in _row_record(schema, fmt).get("fields", []):
        kind = field["type"]
        if isinstance(kind, list):
            kind = next((branch for branch in kind if branch != "null"), "null")
        attributes = named.get(kind, {}) if isinstance(kind, str) else kind
        found[field["name"]] = Semantic(attributes.get("connect.name"), attributes)
    return found


def named_types(schema: Any, namespace: str = "", found: dict[str, dict] | None = None) -> dict[str, dict]:
    """The schema's named types (records, enums, fixed) by full name: a later use of one names it only."""
    found = {} if found is None else found
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, namespace, found)
    elif isinstance(schema, dict):
        if "name" in schema and schema.get("type") in ("record", "enum", "fixed"):
            namespace = schema.get("namespace", namespace)
            full = schema["name"] if "." in schema["name"] or not namespace else f"{namespace}.{schema['name']}"
            found[full] = schema
        for child in [f["type"] for f in schema.get("fields", [])] + [schema.get("items"), schema.get("values")]:
            named_types(child, namespace, found)
    return found


def _row_record(schema: dict[str, Any], fmt: str) -> dict[str, Any]:
    """The record that describes the source row in a format's reader schema."""
    if fmt == "debezium":
        before = next(f for f in schema["fields"] if f["name"] == "before")["type"]
        return next(branch for branch in before if isinstance(branch, dict))
    if fmt == "dms":
        return next(f for f in schema["fields"] if f["name"] == "data")["type"]
    return schema


# -- conversions: (decoded column, its Spark type, the field's Avro attributes) -> the lake's column --------


def _epoch_ntz(micros: Column) -> Column:
    """Wall-clock time `micros` after 1970-01-01 00:00, without a zone (independent of the session's)."""
    return F.timestamp_add("MICROSECOND", micros, F.expr(EPOCH_NTZ))


def _micros(unit: str, value: Column) -> Column:
    """A count of `unit` (ms, us, ns) as microseconds; nanoseconds floored exactly (a double would round)."""
    if unit == "ms":
        return value.cast("long") * 1000
    if unit == "ns":
        return F.floor(value.cast("decimal(38,0)") / 1000).cast("long")
    return value.cast("long")


def _timestamp_ntz(unit: str) -> Convert:
    def convert(value: Column, kind: DataType, _: dict[str, Any]) -> Column:
        if isinstance(kind, TimestampType):  # logicalType timestamp-millis: Spark read it as an instant
            return _epoch_ntz(F.unix_micros(value))
        return _epoch_ntz(_micros(unit, value))
    return convert


def _date(value: Column, kind: DataType, _: dict[str, Any]) -> Column:
    return value if isinstance(kind, DateType) else F.date_from_unix_date(value)


def _zoned_timestamp(value: Column, kind: DataType, _: dict[str, Any]) -> Column:
    return value.cast("timestamp")  # ISO-8601 with an offset: the instant, shown in UTC by the session


def _time_of_day(micros: Column) -> Column:
    return F.date_format(_epoch_ntz(micros), "HH:mm:ss.SSSSSS")


def _time(unit: str) -> Convert:
    """Time since midnight as a count of `unit` into `HH:mm:ss.SSSSSS`."""
    def convert(value: Column, kind: DataType, _: dict[str, Any]) -> Column:
        return _time_of_day(_micros(unit, value)) if isinstance(kind, IntegralType) else value.cast("string")
    return convert


def _zoned_time(value: Column, kind: DataType, _: dict[str, Any]) -> Column:
    """`HH:mm:ss[.f]Z` (Debezium writes ZonedTime in UTC): the UTC time of day."""
    instant = F.concat(F.lit("1970-01-01T"), value).cast("timestamp")
    return _time_of_day(F.pmod(F.unix_micros(instant), F.lit(MICROS_PER_DAY)))


def _unscaled(value: Column) -> Column:
    """Big-endian two's-complement bytes (Kafka Connect's Decimal) as the integer they hold, decimal(38, 0):
    the first byte signed, each next one shifting in 8 bits. Null when it has more than 38 digits (`try_`: under
    ANSI mode a plain product that overflows fails the whole batch)."""
    def byte(i: Column) -> Column:
        return F.conv(F.hex(F.substring(value, i, 1)), 16, 10).cast("int")

    first = byte(F.lit(1))
    signed = F.when(first >= 128, first - 256).otherwise(first).cast("decimal(38,0)")
    rest = F.sequence(F.lit(2), F.octet_length(value))
    shifted = F.aggregate(F.when(F.octet_length(value) > 1, rest).otherwise(F.array().cast("array<int>")),
                          signed, lambda acc, i: F.try_add(F.try_multiply(acc, F.lit(256)), byte(i))
                          .try_cast("decimal(38,0)"))
    return F.when(F.octet_length(value) > 0, shifted)


def _scaled(digits: Column, scale: Column, kind: DecimalType) -> Column:
    """An unscaled integer and a scale as `kind`; null when it does not fit."""
    return F.concat(digits.cast("string"), F.lit("E-"), scale.cast("string")).try_cast(kind)


def _decimal(value: Column, kind: DataType, attributes: dict[str, Any]) -> Column:
    if isinstance(kind, DecimalType):  # logicalType decimal: Spark decoded it already
        return value
    parameters = attributes.get("connect.parameters") or {}
    scale = int(parameters.get("scale", attributes.get("scale", 0)))
    precision = int(parameters.get("connect.decimal.precision", attributes.get("precision", 38)))
    return _scaled(_unscaled(value), F.lit(scale), DecimalType(min(precision, 38), min(scale, 38)))


def _variable_scale(value: Column, kind: DataType, _: dict[str, Any]) -> Column:
    return _scaled(_unscaled(value["value"]), value["scale"], VARIABLE_SCALE)


def _text(value: Column, kind: DataType, _: dict[str, Any]) -> Column:
    return value.cast("string")


CONVERSIONS: dict[str, Convert] = {
    "io.debezium.time.Date": _date,
    "org.apache.kafka.connect.data.Date": _date,
    "io.debezium.time.Timestamp": _timestamp_ntz("ms"),
    "io.debezium.time.MicroTimestamp": _timestamp_ntz("us"),
    "io.debezium.time.NanoTimestamp": _timestamp_ntz("ns"),
    "org.apache.kafka.connect.data.Timestamp": _timestamp_ntz("ms"),
    "io.debezium.time.ZonedTimestamp": _zoned_timestamp,
    "io.debezium.time.Time": _time("ms"),
    "io.debezium.time.MicroTime": _time("us"),
    "io.debezium.time.NanoTime": _time("ns"),
    "io.debezium.time.ZonedTime": _zoned_time,
    "org.apache.kafka.connect.data.Decimal": _decimal,
    "io.debezium.data.VariableScaleDecimal": _variable_scale,
    **{f"io.debezium.data.{name}": _text for name in ("Json", "Xml", "Uuid", "Enum", "EnumSet")},
}
_warned: set[tuple[str, str]] = set()


def convert(column: str, value: Column, kind: DataType, semantic: Semantic) -> Column:
    """`value` (column `column`, decoded as `kind`) in the lake type its semantic type means; an unknown
    Debezium type stays as decoded, with one warning per column and type."""
    conversion = CONVERSIONS.get(semantic.name or "")
    if conversion is not None:
        return conversion(value, kind, semantic.attributes)
    warn_unmapped(column, semantic, kind)
    return value


def warn_unmapped(column: str, semantic: Semantic, kind: DataType) -> None:
    """Once per column and type: a Debezium semantic type the map does not know lands as decoded (`kind`)."""
    name = semantic.name
    if name and name.startswith("io.debezium.") and name not in CONVERSIONS and (column, name) not in _warned:
        _warned.add((column, name))
        log.warning("normalize.unknown_semantic_type", column=column, semantic_type=name,
                    landed_as=kind.simpleString(), fix="map it in cdc/semantic_types.py (docs/types.md)")


def overflows(value: Column, semantic: Semantic) -> Column | None:
    """A condition true where a VariableScaleDecimal does not fit decimal(38, 18); None for other types."""
    if semantic.name != "io.debezium.data.VariableScaleDecimal":
        return None
    return value.isNotNull() & _variable_scale(value, BinaryType(), {}).isNull()


def placeholder(value: Column, kind: DataType) -> Column | None:
    """A condition true where the raw value is Debezium's TOAST placeholder (text, bytes, or a one-element
    array of either); None for types that cannot carry it."""
    def matches(element: Column, element_kind: DataType) -> Column | None:
        if isinstance(element_kind, StringType):
            return element == F.lit(PLACEHOLDER)
        if isinstance(element_kind, BinaryType):
            return element == F.lit(PLACEHOLDER.encode())
        return None

    if isinstance(kind, ArrayType):
        first = matches(value[0], kind.elementType)
        return None if first is None else (F.size(value) == 1) & first
    return matches(value, kind)
