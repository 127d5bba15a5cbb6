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
# The metadata the decode reads. `timestamp` (when DMS built the message) is always there; the transaction
# details (`commit_timestamp`, `transaction_id`, `transaction_record_id`) only with the task's
# IncludeTransactionDetails, which is off by default.
DMS_METADATA = {"timestamp": "string", "record_type": "string", "operation": "string",
                "partition_key_type": "string", "schema_name": "string", "table_name": "string",
                "transaction_id": "bigint", "transaction_record_id": "bigint", "commit_timestamp": "string"}
DMS_OPERATIONS = ("load", "insert", "update", "delete")


def avro(rows: DataFrame, framing: Framing, writers: dict[str, str], reader: str, inflate: bool = False) -> DataFrame:
    """`writers`: schema id text -> writer schema text, for the ids present in `rows`; `inflate` when some
    bodies are compressed (`Framing.body`)."""
    body, value = _avro_columns(framing, tuple(sorted(writers.items())), reader, inflate)
    decoded = rows.withColumn(BODY, body).withColumn("v", value).drop(BODY)
    fields = decoded.schema["v"].dataType.fieldNames()  # type: ignore[attr-defined]
    all_null = functools.reduce(operator.and_, [F.col("v")[name].isNull() for name in fields])
    return decoded.withColumn(VALID, F.col("v").isNotNull() & ~all_null)


@functools.lru_cache(maxsize=256)
def _avro_columns(framing: Framing, writers: tuple[tuple[str, str], ...], reader: str, inflate: bool
                  ) -> tuple[Column, Column]:
    """The body and the decoded value, built once for each topic's writers: built over py4j call by call, they
    took a seventh of a second a topic and batch.

    One branch per writer, whatever number of ids name it: each `from_avro` is a reader of its own in the
    generated code, and eight of them for two writers made the decode four times slower. The body is cut once,
    as a column of its own, not in every branch: repeated, its frame tests made the generated method large
    enough for the JIT to leave it interpreted (HotSpot compiles none over 8000 bytes)."""
    options = {"avroSchema": reader, "mode": "PERMISSIVE"}
    ids_by_writer: dict[str, list[str]] = {}
    for schema_id, writer in writers:
        ids_by_writer.setdefault(writer, []).append(schema_id)
    cases = [(F.col("schema_id").isin(ids), from_avro(F.col(BODY), writer, options))
             for writer, ids in ids_by_writer.items()]
    return framing.body(inflate), functools.reduce(lambda acc, case: acc.when(*case), cases[1:], F.when(*cases[0]))


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
    parsed = F.col(PARSED) if PARSED in rows.columns else parsed_json(F.col("value"))
    data = F.struct(*[F.try_variant_get(parsed, f"$.data['{f.name}']", f.dataType.simpleString()).alias(f.name)
                      for f in _data_fields(row_type)])
    metadata = F.struct(*[F.try_variant_get(parsed, f"$.metadata['{name.replace('_', '-')}']", kind).alias(name)
                          for name, kind in DMS_METADATA.items()])
    return _valid(rows.withColumn("v", F.struct(
        F.when(F.try_variant_get(parsed, "$.data", "variant").isNotNull(), data).alias("data"),
        metadata.alias("metadata"))))


def dms_json_fitting(rows: DataFrame, row_type: str) -> DataFrame:
    """`dms_json(rows, row_type)` for rows whose records `fits` `row_type`, read from their text with one
    `from_json`: `try_variant_get` builds a literal and a cast for every value it reads (`dms_json` took 2.3
    CPU-s for 200k records of 8 `data` and 8 `metadata` fields, this 1.2, parse included). For those records it
    is the same decode: each value's own type is one that `from_json` reads as `try_variant_get` casts it (a
    string, an integer into a BIGINT or into a DECIMAL with room for it, a decimal into a DECIMAL of its scale or
    wider, a boolean), except into a DOUBLE, where the two may differ (a decimal's last bit, the sign of a
    zero): DOUBLE fields are still read from the variant, so `rows` must have their `PARSED` column (as every
    batch that learned row types land has: `parsed_json`, from the transport or `Landing`)."""
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    fields = _data_fields(row_type)
    text = [f for f in fields if not isinstance(f.dataType, DoubleType)]
    metadata = StructType([StructField(name.replace("_", "-"), LongType() if kind == "bigint" else StringType())
                           for name, kind in DMS_METADATA.items()])
    record = F.from_json(F.col("value").cast("string"),
                         StructType([StructField("data", StructType(text)), StructField("metadata", metadata)]))
    # one parse a row: the fields below read the parsed column, not the expression
    read = rows.withColumn("_record", record)
    data = F.struct(*[(F.try_variant_get(F.col(PARSED), f"$.data['{f.name}']", "double")
                       if isinstance(f.dataType, DoubleType) else F.col("_record")["data"][f.name]).alias(f.name)
                      for f in fields])
    fields_of_metadata = F.struct(*[F.col("_record")["metadata"][field.name].alias(name)
                                    for name, field in zip(DMS_METADATA, metadata.fields)])
    return _valid(read.withColumn("v", F.struct(F.when(F.col("_record")["data"].isNotNull(), data).alias("data"),
                                                fields_of_metadata.alias("metadata")))
                  .drop("_record"))


def _data_fields(row_type: str | None) -> list:
    """The `StructField`s of a DMS row type; a field null in every row (VOID) is left out."""
    from pyspark.sql.types import NullType, StructType, _parse_datatype_string

    fields = _parse_datatype_string(row_type.replace("OBJECT<", "STRUCT<")) if row_type else None
    fields = fields if isinstance(fields, StructType) else StructType()  # VOID: no DMS record in the batch
    return [f for f in fields if not isinstance(f.dataType, NullType)]


def _valid(decoded: DataFrame) -> DataFrame:
    meta = F.col("v")["metadata"]
    valid = (F.col("v")["data"].isNotNull() & meta["operation"].isin(*DMS_OPERATIONS)
             & F.try_to_timestamp(meta["timestamp"]).isNotNull())
    return decoded.withColumn(VALID, F.coalesce(valid, F.lit(False)))



# -- learned row types: DMS JSON decoded with a type known before the batch is read ------------------------------
#
# A stream's tables keep their row types from batch to batch, so a batch can be decoded with the type earlier
# batches had as it is read (`dms_json_fitting`). A row may only land that way when that decode is exact:
# `try_variant_get` casts what it can (1.5 into a BIGINT is 1, "12" is 12, true is 1), so a record's own type
# (`row_shape`, `schema_of_variant`) must have a `data` of a type that `schema_of_variant_agg` would merge into
# the learned type unchanged, and `metadata` fields of the types the decode reads them as (`shape_pattern`);
# any other row (a new key, a wider or other type, another key beside `data` and `metadata`) is landed the
# planned way.

# Which record shapes `fits` lets through, as a version number, recorded with the row types a batch lands with:
# 0 checked `data` alone; 1 the whole record. Raise it with any change to which shapes fit: a batch that one
# rule half landed must not be landed again by another (transports/kinesis.py, `RowTypes`).
FIT_RULE = 2  # 2: `metadata.commit-timestamp` is read, so it must be a string

_ANY_DECIMAL = r"DECIMAL\(\d+,\d+\)"
_BIGINT_DIGITS = 20  # `schema_of_variant_agg` merges a BIGINT with decimals as DECIMAL(20,0)


def row_shape(parsed: Column) -> Column:
    """Each record's own type, as `schema_of_variant` prints it (fields sorted by name)."""
    return F.schema_of_variant(parsed)


def fits(shape: Column, row_type: str) -> Column:
    """Whether the record of this `row_shape` decodes exactly with `row_type` (one `learnable`)."""
    return F.coalesce(shape.rlike(shape_pattern(row_type)), F.lit(False))


def learnable(row_type: str | None) -> bool:
    """Whether rows can be decoded with this row type as they are read: an object of scalar fields."""
    return row_type is not None and _fields(row_type) is not None


def shape_pattern(row_type: str) -> str:
    """A regular expression (Java's) for the record shapes that decode exactly with `row_type`: an object of
    `data` and, if it has one, `metadata`; every field of `data` one of the learned type's fields with a type
    that merges into it unchanged, every metadata field the decode reads of its type (null, or absent, always
    does; other metadata fields of any scalar type)."""
    fields = _fields(row_type)
    if fields is None:
        raise ValueError(f"not a learnable DMS row type: {row_type}")
    data = "".join(_optional(_quoted(name), f"{_merging_into(kind)}|VOID") for name, kind in fields)
    return f"^OBJECT<data: OBJECT<{data}>(?:, metadata: OBJECT<{_metadata_pattern()}>)?>$"


def _optional(name: str, kinds: str) -> str:
    """A field of an object's shape, when it is there: its name and one of `kinds`, then the next or the end."""
    return f"(?:{name}: (?:{kinds})(?:, |(?=>)))?"


@functools.cache
def _metadata_pattern() -> str:
    """The `metadata` fields `dms_json` reads, each of its type, in the order Spark prints them (by name), and
    any other field of a scalar type between them."""
    read = sorted((name.replace("_", "-"), "BIGINT" if kind == "bigint" else "STRING")
                  for name, kind in DMS_METADATA.items())
    names = "|".join(_quoted(_printed(name)) for name, _ in read)
    # possessive (`*+`): a run of other fields never gives one back, since what follows it is a field it cannot
    # take (one the decode reads) or the end; backtracking into the runs made a failing match try every way of
    # sharing the other fields among them, exponential in their number (16 took seconds a row)
    other = rf"(?:(?!(?:{names}): )(?:`(?:[^`]|``)*`|[A-Za-z0-9_]+): [A-Z_]+(?:\(\d+,\d+\))?(?:, |(?=>)))*+"
    return other + "".join(_optional(_quoted(_printed(name)), f"{kind}|VOID") + other for name, kind in read)


def _printed(name: str) -> str:
    """A field name as `schema_of_variant` prints it: quoted with backticks unless it is a plain word."""
    return name if re.fullmatch(r"[A-Za-z0-9_]+", name) and not name.isdigit() else "`" + name.replace("`", "``") + "`"


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
