"""Normalisation of decoded CDC events into the canonical change record (see DESIGN.md).

Input: one row per Kafka message with the decoded value in a struct column `v` (the writer's record read into
the latest reader schema) and the Kafka columns `topic`, `partition`, `offset`, `timestamp`. Output: the source
table's columns (named by `cdc/columns.py`: one `_` more in front of a name that starts with `_`), then `_op`,
`_is_deleted`, `_source_ts`, `_seq`, `_source`, `_transport`, `_schema_id`, `_unchanged`.

Row columns get the lake type their semantic type means (`cdc/semantic_types.py`, docs/types.md), from the
reader schema's Kafka Connect annotations. A Debezium TOAST placeholder (an unchanged large value) becomes null
and its column is named in `_unchanged`, so the mirror keeps the value it has. A truncate (`op = t`) is a row
with no row values, `_op = 't'` and `_is_deleted`; the mirror deletes what the table held before it.

`_seq` orders changes of one key totally: `(source_major, source_minor, transport_partition, transport_offset)`,
compared left to right. Snapshot reads get `source_major = 0`, so they order before every live change.
- Debezium (envelope): `source.sequence = [last commit LSN, event LSN]`, or the LSN when the sequence is absent.
- Debezium (unwrapped): `__lsn`; one key's changes are LSN-ordered since row locks serialise its writers.
- DMS (Avro or JSON): the commit time in microseconds, then the record's position in its transaction.
"""

from __future__ import annotations

import functools
import json
import operator
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from cdc import semantic_types
from cdc.columns import lake_column
from cdc.semantic_types import Semantic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

META_COLUMNS = ("_op", "_is_deleted", "_source_ts", "_seq", "_source", "_transport", "_schema_id", "_unchanged")
# The change record's fields by their values, for how they are written (`tables.append.RECORD_HINTS`): positions,
# nearly one a row; texts that are the same in every row of a table (or of a writer schema); and a transaction's id,
# shared by its changes. A dictionary of the first two is work per value for nothing; bounds of the last two prune
# no query.
POSITIONS = ("_seq.source_major", "_seq.source_minor", "_seq.transport_offset", "_transport.offset")
CONSTANT_TEXTS = ("_source.connector", "_source.format", "_source.db", "_source.schema", "_source.table",
                  "_transport.topic", "_schema_id")
UNBOUNDED = (*CONSTANT_TEXTS, "_source.tx_id")
TRUNCATE = "t"
TOASTING = ("debezium", "debezium-unwrapped")  # the formats whose rows may carry Debezium's TOAST placeholder
UNWRAPPED_FIELDS = ("__op", "__db", "__table", "__schema", "__lsn", "__source_ts_ms", "__deleted")
DMS_OPS = {"load": "r", "insert": "c", "update": "u", "delete": "d"}
SNAPSHOT_MAJOR = 0
TRANSPORT_EXTRAS = ("sequence",)  # Kinesis: the record's sequence number (its `offset` is a position in the shard)


def detect_format(writer_schema: dict) -> str:
    """The CDC format a writer schema belongs to, from its shape (Debezium and DMS name theirs distinctly)."""
    fields = {f["name"] for f in writer_schema.get("fields", [])}
    if {"before", "after", "source", "op"} <= fields:
        return "debezium"
    if "__op" in fields:
        return "debezium-unwrapped"
    if {"data", "metadata"} <= fields:
        return "dms"
    raise ValueError(f"schema {writer_schema.get('name')!r} is none of the CDC formats "
                     "(Debezium envelope, Debezium unwrapped, DMS)")


# What `_debezium` reads of an envelope's `source` block
ENVELOPE_SOURCE_FIELDS = frozenset({"connector", "db", "schema", "table", "txId", "ts_ms", "sequence", "lsn"})


def read_schema(reader: dict, fmt: str) -> dict:
    """The reader schema cut to the fields `normalize` reads, to decode records with.

    Avro skips a writer's field that its reader leaves out without decoding it, where a decoded string is an
    object made and copied for every row. Only Debezium's envelope brings much that the change record leaves
    out: the event's `ts_ms`, its `transaction` block and most of `source` (version, name, snapshot, xmin...)."""
    if fmt != "debezium":
        return reader
    fields = []
    for field in reader["fields"]:
        kind = field["type"]
        if field["name"] == "source" and isinstance(kind, dict) and kind.get("type") == "record":
            fields.append({**field, "type": {**kind, "fields": [f for f in kind["fields"]
                                                                if f["name"] in ENVELOPE_SOURCE_FIELDS]}})
        elif field["name"] in ("before", "after", "source", "op"):
            fields.append(field)
    return {**reader, "fields": fields}


def normalize(decoded: DataFrame, fmt: str, db: str, reader: str | None = None) -> DataFrame:
    """The canonical change record for one format; `db` names the source database (from the topic), `reader`
    is the reader schema's text (Avro formats), whose annotations type the row columns."""
    return decoded.select(*_normalized(fmt, db, reader, decoded.schema))


@functools.lru_cache(maxsize=256)
def _normalized(fmt: str, db: str, reader: str | None, schema: StructType) -> tuple[Column, ...]:
    """`normalize`'s columns, built once for each shape of input: built over py4j call by call, they took a
    quarter of a second a topic and batch."""
    image, row_type, meta = FORMATS[fmt](schema, db, fmt)
    semantics = _semantics(fmt, reader)
    placeholders = _placeholders(image, row_type, fmt)
    row = []
    for f in row_type.fields:
        value = semantic_types.convert(f.name, image[f.name], f.dataType, semantics.get(f.name, Semantic(None, {})))
        row.append((F.when(placeholders[f.name], None).otherwise(value) if f.name in placeholders else value)
                   .alias(lake_column(f.name)))
    # array_remove, not array_compact: the latter is a lambda (`filter`), which Spark cannot compile, so the
    # whole normalising projection ran interpreted (the columns' names are never empty)
    toasted = [F.when(found, F.lit(lake_column(name))).otherwise(F.lit("")) for name, found in placeholders.items()]
    unchanged = F.array_remove(F.array(*toasted), "") if toasted else F.array().cast("array<string>")
    return (*row, *record_columns(meta, schema, unchanged))


def record_columns(meta: dict[str, Column], schema: StructType, unchanged: Column) -> tuple[Column, ...]:
    """The change record's own columns, after the row's: from `meta` (`_op`, `_deleted`, `_source_ts`,
    `_seq_major`, `_seq_minor`, `_source`) and the transport's columns of an input of `schema` (`topic`,
    `partition`, `offset`, `timestamp`, `schema_id`, ...)."""
    return (
        meta["_op"].alias("_op"),
        meta["_deleted"].alias("_is_deleted"),  # Iceberg reserves `_deleted` for a metadata column
        meta["_source_ts"].alias("_source_ts"),
        F.struct(meta["_seq_major"].cast("long").alias("source_major"),
                 meta["_seq_minor"].cast("long").alias("source_minor"),
                 F.col("partition").alias("transport_partition"), F.col("offset").alias("transport_offset"),
                 ).alias("_seq"),
        meta["_source"].alias("_source"),
        transport(schema).alias("_transport"),
        F.col("schema_id").cast("string").alias("_schema_id"),
        unchanged.alias("_unchanged"),
    )


def rejections(decoded: DataFrame, fmt: str, reader: str | None, keys: list[str]) -> list[tuple[Column, str, str]]:
    """Decoded rows that must not land, as (condition, error class, message): a TOAST placeholder in a key
    column (`keys`: the table's key, in the lake's names, `cdc/columns.py`), and a VariableScaleDecimal too
    large for decimal(38, 18). Each condition is false, never null."""
    return list(_rejections(fmt, reader, tuple(keys), decoded.schema))


@functools.lru_cache(maxsize=256)
def _rejections(fmt: str, reader: str | None, keys: tuple[str, ...], schema: StructType
                ) -> tuple[tuple[Column, str, str], ...]:
    image, row_type, _ = FORMATS[fmt](schema, "", fmt)
    found = [(F.coalesce(condition, F.lit(False)), *toast_in_key(name))
             for name, condition in _placeholders(image, row_type, fmt).items() if lake_column(name) in keys]
    for name, semantic in _semantics(fmt, reader).items():
        condition = semantic_types.overflows(image[name], semantic) if name in row_type.fieldNames() else None
        if condition is not None:
            found.append((F.coalesce(condition, F.lit(False)), *decimal_overflow(name)))
    return tuple(found)


def toast_in_key(name: str) -> tuple[str, str]:
    """The error class and message of a key column that holds Debezium's TOAST placeholder."""
    return ("ToastPlaceholderInKey",
            f"key column {name} holds Debezium's unavailable-value placeholder, so the row's key is unknown: "
            f"give the table REPLICA IDENTITY FULL (or a key that is never TOASTed) and replay this record")


def decimal_overflow(name: str) -> tuple[str, str]:
    """The error class and message of a VariableScaleDecimal that does not fit decimal(38, 18)."""
    return ("DecimalOverflow",
            f"column {name} (io.debezium.data.VariableScaleDecimal) does not fit decimal(38, 18): "
            "set the connector's decimal.handling.mode=string, or give the column a precision")


def transport(schema: StructType) -> Column:
    """The `_transport` struct: where a change came from (topic or stream, partition or shard, offset, time, the
    file of S3 file sources, and the transport's extras such as Kinesis's sequence number)."""
    return F.struct(F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp"),
                    _file(schema).alias("file"),
                    *[F.col(name) for name in TRANSPORT_EXTRAS if name in schema.fieldNames()])


def any_rejection(found: list[tuple[Column, str, str]]) -> Column:
    """Whether any of `rejections`' conditions holds."""
    return functools.reduce(operator.or_, [condition for condition, _, _ in found], F.lit(False))


def _semantics(fmt: str, reader: str | None) -> dict[str, Semantic]:
    if reader is None:
        return {}
    return semantic_types.field_semantics(json.loads(reader), fmt)


def _placeholders(image: Column, row_type: StructType, fmt: str) -> dict[str, Column]:
    """Per row column that can carry Debezium's TOAST placeholder, the condition that it does."""
    if fmt not in TOASTING:
        return {}
    found = {f.name: semantic_types.placeholder(image[f.name], f.dataType) for f in row_type.fields}
    return {name: condition for name, condition in found.items() if condition is not None}


def _file(schema: StructType) -> Column:
    """The file a change came in (S3 file sources carry a `file` column; message transports have none)."""
    return F.col("file") if "file" in schema.fieldNames() else F.lit(None).cast("string")


def source_struct(fmt: str, connector: Column, db: Column, schema: Column, table: Column, tx_id: Column,
                  snapshot: Column) -> Column:
    """The `_source` struct: the connector and format, where the table lives, its transaction, whether a snapshot
    read it."""
    return F.struct(connector.alias("connector"), F.lit(fmt).alias("format"), db.alias("db"), schema.alias("schema"),
                    table.alias("table"), tx_id.cast("string").alias("tx_id"), snapshot.alias("snapshot"))


def _row_type(schema: StructType, path: str, exclude: tuple[str, ...] = ()) -> StructType:
    from pyspark.sql.types import StructType

    struct = schema["v"].dataType
    for part in path.split(".")[1:]:
        struct = struct[part].dataType  # type: ignore[index]
    return StructType([f for f in struct.fields if f.name not in exclude])  # type: ignore[attr-defined]


Parts = tuple[Column, "StructType", dict[str, Column]]  # the row image, its columns, the metadata columns


def _debezium(schema: StructType, db: str, fmt: str) -> Parts:
    v = F.col("v")
    image = F.coalesce(v["after"], v["before"])
    last_commit_lsn, event_lsn = debezium_sequence(v["source"]["sequence"])
    snapshot = v["op"] == "r"
    meta = {
        "_op": v["op"],
        "_deleted": v["op"].isin("d", TRUNCATE),
        "_source_ts": F.timestamp_millis(v["source"]["ts_ms"]),
        "_seq_major": F.when(snapshot, F.lit(SNAPSHOT_MAJOR)).otherwise(
            F.coalesce(last_commit_lsn, v["source"]["lsn"])),
        "_seq_minor": F.coalesce(event_lsn, v["source"]["lsn"]),
        "_source": source_struct(fmt, v["source"]["connector"], v["source"]["db"], v["source"]["schema"],
                                 v["source"]["table"], v["source"]["txId"], snapshot),
    }
    return image, _row_type(schema, "v.after"), meta


def debezium_sequence(sequence: Column) -> tuple[Column, Column]:
    """Debezium Postgres's `source.sequence`, the JSON text `["<last commit LSN>","<event LSN>"]` (either may be
    null), as two longs (null where absent). Cut at the comma and trimmed rather than parsed: `from_json` sets up
    a JSON parser per row, which took ~18% of the stage's executor CPU, more than decoding the Avro record."""
    halves = F.substring_index(sequence, ",", 1), F.substring_index(sequence, ",", -1)
    first, last = (F.btrim(half, F.lit('[]" ')).try_cast("long") for half in halves)
    return first, last


def _unwrapped(schema: StructType, db: str, fmt: str) -> Parts:
    v = F.col("v")
    snapshot = v["__op"] == "r"
    meta = {
        "_op": v["__op"],
        "_deleted": v["__deleted"] == "true",
        "_source_ts": F.timestamp_millis(v["__source_ts_ms"]),
        "_seq_major": F.when(snapshot, F.lit(SNAPSHOT_MAJOR)).otherwise(v["__lsn"]),
        "_seq_minor": v["__lsn"],
        "_source": source_struct(fmt, F.lit("debezium"), v["__db"], v["__schema"], v["__table"],
                                 F.lit(None), snapshot),
    }
    return v, _row_type(schema, "v", exclude=UNWRAPPED_FIELDS), meta


def _dms(schema: StructType, db: str, fmt: str) -> Parts:
    v, meta_in = F.col("v"), F.col("v")["metadata"]
    op = F.coalesce(*[F.when(meta_in["operation"] == dms, F.lit(canonical)) for dms, canonical in DMS_OPS.items()])
    built = F.to_timestamp(meta_in["timestamp"])  # when DMS built the message: in the order it sends them
    metadata_fields = schema["v"].dataType["metadata"].dataType.fieldNames()  # type: ignore[union-attr]
    committed = (F.coalesce(F.try_to_timestamp(meta_in["commit_timestamp"]), built)  # try_: not checked as valid
                 if "commit_timestamp" in metadata_fields else built)
    snapshot = op == "r"
    meta = {
        "_op": op,
        "_deleted": op == "d",
        "_source_ts": committed,
        "_seq_major": F.when(snapshot, F.lit(SNAPSHOT_MAJOR)).otherwise(F.unix_micros(built)),
        "_seq_minor": F.coalesce(meta_in["transaction_record_id"], F.lit(0)),
        "_source": source_struct(fmt, F.lit("dms"), F.lit(db), meta_in["schema_name"], meta_in["table_name"],
                                 meta_in["transaction_id"], snapshot),
    }
    return v["data"], _row_type(schema, "v.data"), meta


FORMATS = {"debezium": _debezium, "debezium-unwrapped": _unwrapped, "dms": _dms, "dms-json": _dms, "dms-csv": _dms,
           "dms-parquet": _dms}
