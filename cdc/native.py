"""Debezium envelopes decoded straight into the change record by the pipeline's own Spark function.

`cdc_debezium_envelope` (jvm/cdc, registered by `cdc.spark.CdcExtensions`) reads a registry-framed envelope's
Avro binary with a program compiled once per writer schema (resolved against the subject's latest, the reader)
and returns the change record's row columns, `_op`, `_is_deleted`, `_source_ts`, the `_seq` and `_source` fields
and `_unchanged` in one struct. It does for plain Avro row types what `cdc/decode.py` and `cdc/normalize.py` do
with `from_avro` and column expressions, which remain the reference and the path for everything else: Kafka
Connect semantic types, compressed bodies, the other formats. `tests/integration/test_native.py` holds the two to
the same rows.

Why: the column path's generated code took four stages, copying the decoded envelope between two of them, and
fused into one stage it passed the JIT's method-size limit; the function is one call per row.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from cdc.columns import lake_column
from cdc.framing import Framing
from cdc.normalize import read_schema, toast_in_key, transport
from cdc.semantic_types import field_semantics

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

FORMAT = "debezium-native"  # how `Landing` names envelopes this module decodes
FUNCTION = "cdc_debezium_envelope"
OUT = "_native"  # the function's struct, while the change record is taken from it
PLAIN = frozenset({"null", "boolean", "int", "long", "float", "double", "string"})  # the row types it reads
SOURCE_STRUCT = ("connector", "format", "db", "schema", "table", "tx_id", "snapshot")


def available(spark: SparkSession) -> bool:
    """Whether the session has the function (its jar loaded and `cdc.spark.CdcExtensions` listed)."""
    return spark.catalog.functionExists(FUNCTION)


def reads(reader: dict[str, Any], writers: list[dict[str, Any]]) -> bool:
    """Whether the function decodes this subject: Debezium envelopes whose row columns, in the reader and in every
    writer, are plain Avro types (optionally nullable) with no Kafka Connect semantic type, and keep their names
    in the lake (`cdc/columns.py`): the function's struct holds them beside `_op`, `_seq`…, where a source column
    `_op` would be a second field of that name."""
    rows = [_plain_row(schema) for schema in (reader, *writers)]
    if any(row is None for row in rows):
        return False
    if any(lake_column(f["name"]) != f["name"] for row in rows for f in row):  # type: ignore[union-attr]
        return False
    if any(semantic.name for semantic in field_semantics(reader, "debezium").values()):
        return False
    # a column a writer lacks reads as null: Avro would give the reader's default, so only a null one will do
    defaults = {f["name"]: f.get("default") for f in rows[0]}  # type: ignore[union-attr]
    return all(defaults[name] is None for row in rows[1:]
               for name in defaults.keys() - {f["name"] for f in row})  # type: ignore[union-attr]


def decoded(rows: DataFrame, framing: Framing, writers: dict[str, str], reader: str) -> DataFrame:
    """`rows` (framed, of `writers`' ids) with the function's struct in `OUT` and `decode.VALID`, as
    `decode.avro` gives them; `writers`: schema id text -> writer schema text, `reader` the reader's text."""
    from cdc.decode import VALID

    config = json.dumps({"reader": json.dumps(read_schema(json.loads(reader), "debezium")), "writers": writers},
                        sort_keys=True)
    out = F.call_function(FUNCTION, F.col("value"), F.col("schema_id"), framing.body_offset(), F.lit(config))
    return rows.withColumn(OUT, out).withColumn(VALID, F.col(OUT).isNotNull())


def rejections(decoded_rows: DataFrame, keys: list[str]) -> list[tuple[Column, str, str]]:
    """`normalize.rejections` for `decoded`'s rows: a key column that held Debezium's TOAST placeholder
    (`_unchanged` names it; only text columns can). Each condition is false, never null."""
    from pyspark.sql.types import StringType

    struct = decoded_rows.schema[OUT].dataType
    texts = [name for name in row_columns(decoded_rows)
             if isinstance(struct[name].dataType, StringType)]  # type: ignore[index]
    return [(F.coalesce(F.array_contains(F.col(OUT)["_unchanged"], name), F.lit(False)), *toast_in_key(name))
            for name in texts if name in keys]


def row_columns(decoded_rows: DataFrame) -> list[str]:
    names = decoded_rows.schema[OUT].dataType.fieldNames()  # type: ignore[attr-defined]
    return names[:names.index("_op")]


def normalized(decoded_rows: DataFrame) -> DataFrame:
    """The change record (`cdc/normalize.py`'s columns, in its order) from `decoded`'s rows."""
    out = F.col(OUT)
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


def _plain_row(envelope: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The row record's fields of a Debezium envelope whose row columns are all of plain types, else None."""
    fields = {f["name"]: f["type"] for f in envelope.get("fields", [])}
    if not {"before", "after", "source", "op"} <= fields.keys():
        return None
    row = next((branch for branch in _branches(fields["before"]) if isinstance(branch, dict)), None)
    if row is None or row.get("type") != "record" or not all(_plain(f["type"]) for f in row.get("fields", [])):
        return None
    return row["fields"]


def _plain(kind: Any) -> bool:
    """A primitive, or a union of them; a primitive may be written as an object without a logical or semantic
    type (Apicurio's converter adds `avro.java.string` to strings)."""
    for branch in _branches(kind):
        if isinstance(branch, dict):
            if "logicalType" in branch or "connect.name" in branch:
                return False
            branch = branch.get("type")
        if not (isinstance(branch, str) and branch in PLAIN):
            return False
    return True


def _branches(kind: Any) -> list[Any]:
    return kind if isinstance(kind, list) else [kind]
