"""Debezium envelopes decoded straight into the change record by the pipeline's own Spark function.

`cdc_debezium_envelope` (jvm/cdc, registered by `cdc.spark.CdcExtensions`) reads a registry-framed envelope's
Avro binary with a program compiled once per writer schema (resolved against the subject's latest, the reader)
and returns the change record's row columns, `_op`, `_is_deleted`, `_source_ts`, the `_seq` and `_source` fields,
`_unchanged` and `_overflowed` in one struct. Row columns of plain Avro types and of every Kafka Connect semantic
type `cdc/semantic_types.py` maps come out in the lake types they mean (jvm/cdc `SemanticTypes.scala`), as do
records of plain fields (Debezium's geometry) and semantic types the map does not know (as decoded). It does what
`cdc/decode.py` and `cdc/normalize.py` do with `from_avro` and column expressions, which remain the reference and
the path for everything else: arrays, maps, enums and fixed, compressed bodies, the other formats.
`tests/integration/test_native.py` holds the two to the same rows.

Why: the column path's generated code took four stages, copying the decoded envelope between two of them, and
fused into one stage it passed the JIT's method-size limit; the function is one call per row, and its
conversions (a decimal's bytes, a time of day) are plain JVM code where the column path builds each from a
dozen expressions.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from cdc.columns import lake_column
from cdc.framing import Framing
from cdc.normalize import decimal_overflow, read_schema, toast_in_key, transport
from cdc.semantic_types import Semantic, field_semantics, named_types, warn_unmapped

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

FORMAT = "debezium-native"  # how `Landing` names envelopes this module decodes
FUNCTION = "cdc_debezium_envelope"
OUT = "_native"  # the function's struct, while the change record is taken from it
PRIMITIVES = frozenset({"boolean", "int", "long", "float", "double", "string", "bytes"})
SOURCE_STRUCT = ("connector", "format", "db", "schema", "table", "tx_id", "snapshot")
NONE: frozenset[str | None] = frozenset({None})
TIMESTAMPS: frozenset[str | None] = frozenset({None, "timestamp-millis", "timestamp-micros"})
# Per semantic type of `semantic_types.CONVERSIONS`, the Avro type the function converts it from and the Avro
# logical types it may carry (None: none); another form of it takes the column path.
FORMS: dict[str, tuple[str, frozenset[str | None]]] = {
    "io.debezium.time.Date": ("int", frozenset({None, "date"})),
    "org.apache.kafka.connect.data.Date": ("int", frozenset({None, "date"})),
    "io.debezium.time.Timestamp": ("long", TIMESTAMPS),
    "io.debezium.time.MicroTimestamp": ("long", TIMESTAMPS),
    "io.debezium.time.NanoTimestamp": ("long", TIMESTAMPS),
    "org.apache.kafka.connect.data.Timestamp": ("long", TIMESTAMPS),
    "io.debezium.time.ZonedTimestamp": ("string", NONE),
    "io.debezium.time.Time": ("int", NONE),
    "io.debezium.time.MicroTime": ("long", NONE),
    "io.debezium.time.NanoTime": ("long", NONE),
    "io.debezium.time.ZonedTime": ("string", NONE),
    "org.apache.kafka.connect.data.Decimal": ("bytes", frozenset({None, "decimal"})),
    "io.debezium.data.VariableScaleDecimal": ("record", NONE),  # {scale: int, value: bytes}
    **{f"io.debezium.data.{name}": ("string", NONE) for name in ("Json", "Xml", "Uuid", "Enum", "EnumSet")},
}
VARIABLE_SCALE = "io.debezium.data.VariableScaleDecimal"
VARIABLE_SCALE_FIELDS = {"scale": "int", "value": "bytes"}
MAX_PRECISION = 38


def available(spark: SparkSession) -> bool:
    """Whether the session has the function (its jar loaded and `cdc.spark.CdcExtensions` listed)."""
    return spark.catalog.functionExists(FUNCTION)


def reads(reader: dict[str, Any], writers: list[dict[str, Any]]) -> bool:
    """Whether the function decodes this subject: Debezium envelopes whose row columns, in the reader and in every
    writer, are of a form it reads (`_form`: optionally nullable), and keep their names in the lake
    (`cdc/columns.py`): the function's struct holds them beside `_op`, `_seq`…, where a source column `_op` would
    be a second field of that name."""
    rows = [_row_forms(schema) for schema in (reader, *writers)]
    if any(row is None for row in rows):
        return False
    if any(lake_column(name) != name for row in rows for name in row):  # type: ignore[union-attr]
        return False
    # a column a writer lacks reads as null: Avro would give the reader's default, so only a null one will do
    defaults = {f["name"]: f.get("default") for f in _row(reader)}  # type: ignore[union-attr]
    return all(defaults[name] is None for row in rows[1:]
               for name in defaults.keys() - row.keys())  # type: ignore[union-attr]


def decoded(rows: DataFrame, framing: Framing, writers: dict[str, str], reader: str) -> DataFrame:
    """`rows` (framed, of `writers`' ids) with the function's struct in `OUT` and `decode.VALID`, as
    `decode.avro` gives them; `writers`: schema id text -> writer schema text, `reader` the reader's text."""
    from cdc.decode import VALID

    out = F.call_function(FUNCTION, F.col("value"), F.col("schema_id"), framing.body_offset(),
                          F.lit(config(writers, reader)))
    return rows.withColumn(OUT, out).withColumn(VALID, F.col(OUT).isNotNull())


def config(writers: dict[str, str], reader: str) -> str:
    """What the function (and jvm/cdc `QuietTopics`) decodes envelopes of these writers by: `writers`, schema id
    text -> writer schema text, and the reader (`reader`: the subject's latest)."""
    return json.dumps({"reader": json.dumps(read_schema(json.loads(reader), "debezium")), "writers": writers},
                      sort_keys=True)


def rejections(decoded_rows: DataFrame, reader: str, keys: list[str]) -> list[tuple[Column, str, str]]:
    """`normalize.rejections` for `decoded`'s rows, from what the function found: a key column that held
    Debezium's TOAST placeholder (`_unchanged` names it; only text and bytes columns can), a VariableScaleDecimal
    too large for decimal(38, 18) (`_overflowed`). Each condition is false, never null."""
    forms = _reader_forms(reader)
    found = [(_names(OUT + "._unchanged", name), *toast_in_key(name))
             for name, form in forms.items() if name in keys and _holds_placeholder(form)]
    return found + [(_names(OUT + "._overflowed", name), *decimal_overflow(name))
                    for name, form in forms.items() if form.get("connect.name") == VARIABLE_SCALE]


def row_columns(decoded_rows: DataFrame) -> list[str]:
    names = decoded_rows.schema[OUT].dataType.fieldNames()  # type: ignore[attr-defined]
    return names[:names.index("_op")]


def normalized(decoded_rows: DataFrame, reader: str) -> DataFrame:
    """The change record (`cdc/normalize.py`'s columns, in its order) from `decoded`'s rows; a semantic type the
    map does not know is warned of, as the column path warns."""
    out = F.col(OUT)
    struct = decoded_rows.schema[OUT].dataType
    for name, semantic in _reader_semantics(reader):
        warn_unmapped(name, semantic, struct[name].dataType)  # type: ignore[index]
    return decoded_rows.select(
        *[out[name].alias(name) for name in row_columns(decoded_rows)],
        out["_op"].alias("_op"),
        out["_is_deleted"].alias("_is_deleted"),
        out["_source_ts"].alias("_source_ts"),
        F.struct(out["source_major"].alias("source_major"), out["source_minor"].alias("source_minor"),
                 F.col("partition").alias("transport_partition"), F.col("offset").alias("transport_offset"),
                 ).alias("_seq"),
        F.struct(*[(F.lit("debezium") if name == "format" else out[name]).alias(name) for name in SOURCE_STRUCT]
                 ).alias("_source"),
        transport(decoded_rows.schema).alias("_transport"),
        F.col("schema_id").cast("string").alias("_schema_id"),
        out["_unchanged"].alias("_unchanged"),
    )


def _names(array: str, name: str) -> Column:
    """Whether the function's array field `array` names column `name`: false, never null."""
    return F.coalesce(F.array_contains(F.col(array), name), F.lit(False))


@functools.lru_cache(maxsize=256)
def _reader_forms(reader: str) -> dict[str, dict[str, Any]]:
    return _row_forms(json.loads(reader)) or {}


@functools.lru_cache(maxsize=256)
def _reader_semantics(reader: str) -> tuple[tuple[str, Semantic], ...]:
    return tuple(field_semantics(json.loads(reader), "debezium").items())


def _holds_placeholder(form: dict[str, Any]) -> bool:
    """Text and bytes decode as text and bytes, where Debezium puts its TOAST placeholder; a decimal does not."""
    return form["type"] == "string" or (form["type"] == "bytes" and form.get("logicalType") is None)


def _row(envelope: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The row record's fields of a Debezium envelope, else None."""
    fields = {f["name"]: f["type"] for f in envelope.get("fields", [])}
    if not {"before", "after", "source", "op"} <= fields.keys():
        return None
    row = next((branch for branch in _branches(fields["before"]) if isinstance(branch, dict)), None)
    return row["fields"] if row is not None and row.get("type") == "record" else None


def _row_forms(envelope: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Per row column of a Debezium envelope, its form (`_form`); None when one is not a form the function reads."""
    row, named = _row(envelope), named_types(envelope)
    if row is None:
        return None
    forms = {f["name"]: _form(f["type"], named) for f in row}
    return None if any(form is None for form in forms.values()) else forms  # type: ignore[return-value]


def _form(kind: Any, named: dict[str, dict]) -> dict[str, Any] | None:
    """A column's Avro type, the null branch of a union left out, as an object (`{"type": ..., annotations}`),
    when the function reads it: a primitive or a record of primitives, with no logical type unless its semantic
    type's `FORMS` allows it; else None."""
    branches = [branch for branch in _branches(kind) if branch != "null"]
    if len(branches) != 1:
        return None
    form = branches[0]
    if isinstance(form, str):
        form = {"type": form} if form in PRIMITIVES else named.get(form)
    if not isinstance(form, dict) or not isinstance(form.get("type"), str):
        return None
    semantic, logical = form.get("connect.name"), form.get("logicalType")
    if semantic in FORMS:
        avro_type, logical_types = FORMS[semantic]
        if form["type"] != avro_type or logical not in logical_types:
            return None
        if semantic == VARIABLE_SCALE:
            return form if _fields(form) == VARIABLE_SCALE_FIELDS else None
        return form if logical != "decimal" or form.get("precision", MAX_PRECISION + 1) <= MAX_PRECISION else None
    if logical is not None:
        return None
    if form["type"] == "record":  # a semantic type the map does not know, such as Debezium's geometry
        return form if _fields(form) is not None else None
    return form if form["type"] in PRIMITIVES else None


def _fields(record: dict[str, Any]) -> dict[str, str] | None:
    """A record's fields and their primitive types (optionally nullable), None when one is of another type."""
    found = {}
    for field in record.get("fields", []):
        branches = [_primitive(branch) for branch in _branches(field["type"]) if branch != "null"]
        if len(branches) != 1 or branches[0] is None:
            return None
        found[field["name"]] = branches[0]
    return found


def _primitive(kind: Any) -> str | None:
    """A primitive type's name; it may be written as an object without a logical or semantic type (Apicurio's
    converter adds `avro.java.string` to strings)."""
    if isinstance(kind, dict) and not {"logicalType", "connect.name"} & kind.keys():
        kind = kind.get("type")
    return kind if isinstance(kind, str) and kind in PRIMITIVES else None


def _branches(kind: Any) -> list[Any]:
    return kind if isinstance(kind, list) else [kind]
