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
import re
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



# -- learned row types: DMS JSON decoded with a type known before the batch is read ------------------------------
#
# A stream's tables keep their row types from batch to batch, so a batch can be decoded with the type earlier
# batches had (`dms_json(rows, learned)`) as it is read. A row may only land that way when that decode is exact:
# `try_variant_get` casts what it can (1.5 into a BIGINT is 1, "12" is 12, true is 1), so a row's own `data`
# type (`row_shape`, `schema_of_variant`) must be one that `schema_of_variant_agg` would merge into the learned
# type unchanged (`shape_pattern`); any other row (a new key, a wider or other type) is landed the planned way.

_ANY_DECIMAL = r"DECIMAL\(\d+,\d+\)"
_BIGINT_DIGITS = 20  # `schema_of_variant_agg` merges a BIGINT with decimals as DECIMAL(20,0)


def row_shape(parsed: Column) -> Column:
    """Each record's own `data` type, as `schema_of_variant` prints it (fields sorted by name); null when the
    record has no `data`."""
    return F.schema_of_variant(F.try_variant_get(parsed, "$.data", "variant"))


def fits(shape: Column, row_type: str) -> Column:
    """Whether the record of this `row_shape` decodes exactly with `row_type` (one `learnable`)."""
    return F.coalesce(shape.rlike(shape_pattern(row_type)), F.lit(False))


def learnable(row_type: str | None) -> bool:
    """Whether rows can be decoded with this row type as they are read: an object of scalar fields."""
    return row_type is not None and _fields(row_type) is not None


def shape_pattern(row_type: str) -> str:
    """A regular expression (Java's) for the row shapes whose every field is one of the learned type's fields
    with a type that merges into it unchanged (null, or absent, always does)."""
    fields = _fields(row_type)
    if fields is None:
        raise ValueError(f"not a learnable DMS row type: {row_type}")
    groups = "".join(f"(?:{_quoted(name)}: (?:{_merging_into(kind)}|VOID)(?:, |(?=>$)))?" for name, kind in fields)
    return f"^OBJECT<{groups}>$"


def merged_row_type(a: str, b: str) -> str | None:
    """The type `schema_of_variant_agg` gives rows of row types `a` and `b`, when both are learnable and their
    fields' types merge into a scalar (a BIGINT and a STRING merge into VARIANT: None)."""
    left, right = _fields(a), _fields(b)
    if left is None or right is None:
        return None
    kinds = dict(left)
    for name, kind in right:
        merged = _merged(kinds[name], kind) if name in kinds else kind
        if merged is None:
            return None
        kinds[name] = merged
    return "OBJECT<" + ", ".join(f"{name}: {kinds[name]}" for name in sorted(kinds, key=_unquoted)) + ">"


def _merging_into(kind: str) -> str:
    """The field types that merge into `kind` unchanged, as a regular expression."""
    decimal = _decimal(kind)
    if decimal is not None:
        precision, scale = decimal
        digits = precision - scale
        scales = [f"DECIMAL\\((?:{'|'.join(str(p) for p in range(max(s, 1), min(38, s + digits) + 1))}),{s}\\)"
                  for s in range(scale + 1)]
        return "|".join(scales + (["BIGINT"] if digits >= _BIGINT_DIGITS else []))
    if kind == "DOUBLE":
        return f"DOUBLE|BIGINT|{_ANY_DECIMAL}"
    return _quoted(kind)


def _merged(a: str, b: str) -> str | None:
    if a == b or b == "VOID":
        return a
    if a == "VOID":
        return b
    numbers = {a, b}
    if "DOUBLE" in numbers and numbers <= {"DOUBLE", "BIGINT"} | {k for k in numbers if _decimal(k)}:
        return "DOUBLE"
    left, right = (_decimal(k) if k != "BIGINT" else (_BIGINT_DIGITS, 0) for k in (a, b))
    if left is None or right is None:
        return None
    scale = max(left[1], right[1])
    precision = max(left[0] - left[1], right[0] - right[1]) + scale
    return f"DECIMAL({precision},{scale})" if precision <= 38 else None


def _decimal(kind: str) -> tuple[int, int] | None:
    if not (kind.startswith("DECIMAL(") and kind.endswith(")")):
        return None
    precision, scale = kind[len("DECIMAL("):-1].split(",")
    return int(precision), int(scale)


def _fields(row_type: str) -> list[tuple[str, str]] | None:
    """The (name as printed, type) of an `OBJECT<...>` row type of scalar fields, else None."""
    if not (row_type.startswith("OBJECT<") and row_type.endswith(">")):
        return None
    body, fields, at = row_type[len("OBJECT<"):-1], [], 0
    while at < len(body):
        if body[at] == "`":  # a quoted name; `` is a backtick in it
            end = at + 1
            while not (body[end] == "`" and body[end + 1:end + 2] != "`"):
                end += 2 if body[end] == "`" else 1
            name, at = body[at:end + 1], end + 1
        else:
            end = body.index(":", at)
            name, at = body[at:end], end
        if not body.startswith(": ", at):
            return None
        end = body.find(", ", at + 2)
        kind, at = body[at + 2:len(body) if end < 0 else end], len(body) if end < 0 else end + 2
        if "<" in kind or kind == "VARIANT":
            return None
        fields.append((name, kind))
    return fields


def _unquoted(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _quoted(text: str) -> str:
    """`text` as a literal in a regular expression, for Java's and Python's alike (a backslash before a
    non-letter is the character itself in both)."""
    return re.escape(text)
