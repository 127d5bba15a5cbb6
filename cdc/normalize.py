"""Normalisation of decoded CDC events into the canonical change record (see DESIGN.md).

Input: one row per Kafka message with the decoded value in a struct column `v` (the writer's record read into
the latest reader schema) and the Kafka columns `topic`, `partition`, `offset`, `timestamp`. Output: the source
table's columns, then `_op`, `_is_deleted`, `_source_ts`, `_seq`, `_source`, `_transport`, `_schema_id`.

`_seq` orders changes of one key totally: `(source_major, source_minor, transport_partition, transport_offset)`,
compared left to right. Snapshot reads get `source_major = 0`, so they order before every live change.
- Debezium (envelope): `source.sequence = [last commit LSN, event LSN]`, or the LSN when the sequence is absent.
- Debezium (unwrapped): `__lsn`; one key's changes are LSN-ordered since row locks serialise its writers.
- DMS (Avro or JSON): the commit time in microseconds, then the record's position in its transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

META_COLUMNS = ("_op", "_is_deleted", "_source_ts", "_seq", "_source", "_transport", "_schema_id")
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


def normalize(decoded: DataFrame, fmt: str, db: str) -> DataFrame:
    """The canonical change record for one format; `db` names the source database (from the topic)."""
    row, meta = FORMATS[fmt](decoded, db, fmt)
    seq_major, seq_minor = meta.pop("_seq_major"), meta.pop("_seq_minor")
    return decoded.select(
        *row,
        meta["_op"].alias("_op"),
        meta["_deleted"].alias("_is_deleted"),  # Iceberg reserves `_deleted` for a metadata column
        meta["_source_ts"].alias("_source_ts"),
        F.struct(seq_major.cast("long").alias("source_major"), seq_minor.cast("long").alias("source_minor"),
                 F.col("partition").alias("transport_partition"), F.col("offset").alias("transport_offset"),
                 ).alias("_seq"),
        meta["_source"].alias("_source"),
        F.struct(F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp"),
                 _file(decoded).alias("file"),
                 *[F.col(name) for name in TRANSPORT_EXTRAS if name in decoded.columns]).alias("_transport"),
        F.col("schema_id").cast("string").alias("_schema_id"),
    )


def _file(decoded: DataFrame) -> Column:
    """The file a change came in (S3 file sources carry a `file` column; message transports have none)."""
    return F.col("file") if "file" in decoded.columns else F.lit(None).cast("string")


def _source(fmt: str, connector: Column, db: Column, schema: Column, table: Column, tx_id: Column,
            snapshot: Column) -> Column:
    return F.struct(connector.alias("connector"), F.lit(fmt).alias("format"), db.alias("db"), schema.alias("schema"),
                    table.alias("table"), tx_id.cast("string").alias("tx_id"), snapshot.alias("snapshot"))


def _row_columns(decoded: DataFrame, path: str, exclude: tuple[str, ...] = ()) -> list[str]:
    struct = decoded.schema["v"].dataType
    for part in path.split(".")[1:]:
        struct = struct[part].dataType  # type: ignore[index]
    return [name for name in struct.fieldNames() if name not in exclude]  # type: ignore[attr-defined]


def _debezium(decoded: DataFrame, db: str, fmt: str) -> tuple[list[Column], dict[str, Column]]:
    v = F.col("v")
    image = F.coalesce(v["after"], v["before"])
    names = _row_columns(decoded, "v.after")
    last_commit_lsn, event_lsn = debezium_sequence(v["source"]["sequence"])
    snapshot = v["op"] == "r"
    meta = {
        "_op": v["op"],
        "_deleted": v["op"] == "d",
        "_source_ts": F.timestamp_millis(v["source"]["ts_ms"]),
        "_seq_major": F.when(snapshot, F.lit(SNAPSHOT_MAJOR)).otherwise(
            F.coalesce(last_commit_lsn, v["source"]["lsn"])),
        "_seq_minor": F.coalesce(event_lsn, v["source"]["lsn"]),
        "_source": _source(fmt, v["source"]["connector"], v["source"]["db"], v["source"]["schema"],
                           v["source"]["table"], v["source"]["txId"], snapshot),
    }
    return [image[name].alias(name) for name in names], meta


def debezium_sequence(sequence: Column) -> tuple[Column, Column]:
    """Debezium Postgres's `source.sequence`, the JSON text `["<last commit LSN>","<event LSN>"]` (either may be
    null), as two longs (null where absent). Cut at the comma and trimmed rather than parsed: `from_json` sets up
    a JSON parser per row, which took ~18% of the stage's executor CPU, more than decoding the Avro record."""
    halves = F.substring_index(sequence, ",", 1), F.substring_index(sequence, ",", -1)
    first, last = (F.btrim(half, F.lit('[]" ')).try_cast("long") for half in halves)
    return first, last


def _unwrapped(decoded: DataFrame, db: str, fmt: str) -> tuple[list[Column], dict[str, Column]]:
    v = F.col("v")
    names = _row_columns(decoded, "v", exclude=UNWRAPPED_FIELDS)
    snapshot = v["__op"] == "r"
    meta = {
        "_op": v["__op"],
        "_deleted": v["__deleted"] == "true",
        "_source_ts": F.timestamp_millis(v["__source_ts_ms"]),
        "_seq_major": F.when(snapshot, F.lit(SNAPSHOT_MAJOR)).otherwise(v["__lsn"]),
        "_seq_minor": v["__lsn"],
        "_source": _source(fmt, F.lit("debezium"), v["__db"], v["__schema"], v["__table"],
                           F.lit(None), snapshot),
    }
    return [v[name].alias(name) for name in names], meta


def _dms(decoded: DataFrame, db: str, fmt: str) -> tuple[list[Column], dict[str, Column]]:
    v, meta_in = F.col("v"), F.col("v")["metadata"]
    names = _row_columns(decoded, "v.data")
    op = F.coalesce(*[F.when(meta_in["operation"] == dms, F.lit(canonical)) for dms, canonical in DMS_OPS.items()])
    source_ts = F.to_timestamp(meta_in["timestamp"])
    snapshot = op == "r"
    meta = {
        "_op": op,
        "_deleted": op == "d",
        "_source_ts": source_ts,
        "_seq_major": F.when(snapshot, F.lit(SNAPSHOT_MAJOR)).otherwise(F.unix_micros(source_ts)),
        "_seq_minor": meta_in["transaction_record_id"],
        "_source": _source(fmt, F.lit("dms"), F.lit(db), meta_in["schema_name"], meta_in["table_name"],
                           meta_in["transaction_id"], snapshot),
    }
    return [v["data"][name].alias(name) for name in names], meta


FORMATS = {"debezium": _debezium, "debezium-unwrapped": _unwrapped, "dms": _dms, "dms-json": _dms, "dms-csv": _dms,
           "dms-parquet": _dms}
