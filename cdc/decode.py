"""Kafka values into a decoded struct column `v`, on the JVM, with a `_valid` flag for what did not decode.

- Avro: one `from_avro` per writer schema, chosen per row by a CASE over the ids that name it (one pass over the rows,
  no union), each reading into the subject's latest (reader) schema, so every writer version lands in one
  evolved shape. `from_avro` runs PERMISSIVE: a body it cannot read becomes a record of nulls, which no real
  CDC record is (each has required fields: the key, Debezium's `op`, DMS's `data` and `metadata`).
- DMS JSON (no registry, no schema): parsed into a variant; `data` is read as the batch's merged row type
  (`schema_of_variant_agg`), the hyphenated metadata keys into the DMS Avro form's names, so
  `cdc/normalize.py` reads both. The variant is parsed once a batch, into the `PARSED` column of the cached
  rows (`parsed_json`), which planning and decoding read: parsing the text again cost about a second per 200k
  records each time, and Spark's optimiser copied the parse into every filter and field that used it.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from cdc.framing import Framing

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

VALID = "_valid"
PARSED = "_json"  # a value parsed into a variant (`parsed_json`), kept beside the raw bytes
BODY = "_body"  # the Avro body, while it is decoded
DMS_METADATA = {"timestamp": "string", "record_type": "string", "operation": "string",
                "partition_key_type": "string", "schema_name": "string", "table_name": "string",
                "transaction_id": "bigint", "transaction_record_id": "bigint"}
DMS_OPERATIONS = ("load", "insert", "update", "delete")


def avro(rows: DataFrame, framing: Framing, writers: dict[str, str], reader: str, inflate: bool = False) -> DataFrame:
    """`writers`: schema id text -> writer schema text, for the ids present in `rows`; `inflate` when some
    bodies are compressed (`Framing.body`)."""
    options = {"avroSchema": reader, "mode": "PERMISSIVE"}
    body = framing.body(inflate)
    ids_by_writer: dict[str, list[str]] = {}
    for schema_id, writer in sorted(writers.items()):
        ids_by_writer.setdefault(writer, []).append(schema_id)
    # one branch per writer, whatever number of ids name it: each `from_avro` is a reader of its own in the
    # generated code, and eight of them for two writers made the decode four times slower
    # the body is cut once, as a column of its own, not in every branch: repeated, its frame tests made the
    # generated method large enough for the JIT to leave it interpreted (HotSpot compiles none over 8000 bytes)
    cases = [(F.col("schema_id").isin(ids), from_avro(F.col(BODY), writer, options))
             for writer, ids in ids_by_writer.items()]
    value = functools.reduce(lambda acc, case: acc.when(*case), cases[1:], F.when(*cases[0]))
    decoded = rows.withColumn(BODY, body).withColumn("v", value).drop(BODY)
    fields = decoded.schema["v"].dataType.fieldNames()  # type: ignore[attr-defined]
    all_null = functools.reduce(operator.and_, [F.col("v")[name].isNull() for name in fields])
    return decoded.withColumn(VALID, F.col("v").isNotNull() & ~all_null)


def parsed_json(values: Column) -> Column:
    """The values as variants, null where a value is not JSON."""
    return F.try_parse_json(values.cast("string"))


def dms_json_row_type(parsed: Column) -> Column:
    """An aggregate: the merged type of the `data` objects of the DMS JSON values (`parsed_json`) that carry an
    operation (fields sorted by name; a field that is null in every row has type VOID)."""
    is_record = F.try_variant_get(parsed, "$.metadata.operation", "string").isNotNull()
    return F.schema_of_variant_agg(F.when(is_record, F.try_variant_get(parsed, "$.data", "variant")))


def dms_json(rows: DataFrame, row_type: str | None) -> DataFrame:
    """`row_type` from `dms_json_row_type`. A field null in every row of the batch is left out: its type is
    unknown, and it arrives with the first batch that has a value (the table takes new columns). The rows'
    `PARSED` column is read when they have one, else `value` is parsed."""
    from pyspark.sql.types import NullType, StructType, _parse_datatype_string

    parsed = F.col(PARSED) if PARSED in rows.columns else parsed_json(F.col("value"))
    fields = _parse_datatype_string(row_type.replace("OBJECT<", "STRUCT<")) if row_type else None
    fields = fields if isinstance(fields, StructType) else StructType()  # VOID: no DMS record in the batch
    data = F.struct(*[F.try_variant_get(parsed, f"$.data['{f.name}']", f.dataType.simpleString()).alias(f.name)
                      for f in fields if not isinstance(f.dataType, NullType)])  # type: ignore[attr-defined]
    metadata = F.struct(*[F.try_variant_get(parsed, f"$.metadata['{name.replace('_', '-')}']", kind).alias(name)
                          for name, kind in DMS_METADATA.items()])
    decoded = rows.withColumn("v", F.struct(F.when(F.try_variant_get(parsed, "$.data", "variant").isNotNull(), data)
                                            .alias("data"), metadata.alias("metadata")))
    meta = F.col("v")["metadata"]
    valid = (F.col("v")["data"].isNotNull() & meta["operation"].isin(*DMS_OPERATIONS)
             & F.try_to_timestamp(meta["timestamp"]).isNotNull() & meta["transaction_record_id"].isNotNull())
    return decoded.withColumn(VALID, F.coalesce(valid, F.lit(False)))

