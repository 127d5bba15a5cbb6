"""What a Kafka value is, read from its first bytes as Spark column expressions, so a batch is classified and
its Avro body cut out on the JVM without a row going through Python.

A value is a tombstone (null), DMS JSON (a JSON object: first byte `{`), a registry frame in the configured
wire format (`registry/wire.py`: Confluent magic 0 + 4-byte id, Apicurio legacy magic 0 + 8-byte global id,
Glue version byte 3 + compression byte + 16-byte schema version UUID), or unframed (a dead letter).
The schema id is a string column (a decimal id, or a Glue UUID in its canonical text), as `_schema_id` is.
Glue bodies may be zlib-compressed (compression byte 5); only those rows go through Python to be inflated,
since Spark has no zlib function.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import StrEnum

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from registry.wire import CONFLUENT_MAGIC, GLUE_UNCOMPRESSED, GLUE_VERSION, GLUE_ZLIB, WireFormat


class Kind(StrEnum):
    TOMBSTONE = "tombstone"
    JSON = "json"
    FRAMED = "framed"
    UNFRAMED = "unframed"


@dataclass(frozen=True)
class Framing:
    """A wire format's header: its first byte, its length, where the id sits and how long it is."""

    wire: WireFormat
    magic: int
    header_bytes: int
    id_offset: int  # 1-based position of the id's first byte
    id_bytes: int

    @classmethod
    def of(cls, wire: WireFormat | str) -> Framing:
        wire = WireFormat(wire)
        if wire is WireFormat.GLUE:
            return cls(wire, GLUE_VERSION, 18, 3, 16)
        return cls(wire, CONFLUENT_MAGIC, 5 if wire is WireFormat.CONFLUENT else 9, 2,
                   4 if wire is WireFormat.CONFLUENT else 8)

    def schema_id(self) -> Column:
        """The writer schema id as text, or null when the value does not carry this header."""
        raw = F.substring("value", self.id_offset, self.id_bytes)
        if self.wire is WireFormat.GLUE:
            text = F.lower(F.hex(raw))
            uuid = F.concat_ws("-", *[F.substring(text, start, length)
                                      for start, length in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))])
            framed = F.substring("value", 2, 1).isin(bytes([GLUE_UNCOMPRESSED]), bytes([GLUE_ZLIB]))
            return F.when(self._magic() & framed, uuid)
        return F.when(self._magic(), F.conv(F.hex(raw), 16, 10))

    def compressed(self) -> Column:
        """True for a Glue frame whose body is zlib-compressed."""
        if self.wire is not WireFormat.GLUE:
            return F.lit(False)
        return self._magic() & (F.substring("value", 2, 1) == F.lit(bytes([GLUE_ZLIB])))

    def body(self, inflate: bool = False) -> Column:
        """The Avro body. With `inflate`, compressed bodies are inflated (null when they do not inflate, so the
        row decodes as malformed); leave it off for batches without compressed rows, to keep them on the JVM."""
        body = F.expr(f"substring(value, {self.header_bytes + 1}, length(value) - {self.header_bytes})")
        return F.when(self.compressed(), _inflate(body)).otherwise(body) if inflate else body

    def _magic(self) -> Column:
        return (F.length("value") >= self.header_bytes) & (F.substring("value", 1, 1) == F.lit(bytes([self.magic])))


def kind(schema_id: Column) -> Column:
    """Classify a value, given its `Framing.schema_id()`; DMS JSON is told by its opening brace, which no
    registry frame starts with."""
    return (F.when(F.col("value").isNull(), F.lit(Kind.TOMBSTONE.value))
            .when(F.substring("value", 1, 1) == F.lit(b"{"), F.lit(Kind.JSON.value))
            .when(schema_id.isNotNull(), F.lit(Kind.FRAMED.value))
            .otherwise(F.lit(Kind.UNFRAMED.value)))


@F.udf(BinaryType(), useArrow=True)  # a type object: a DDL string would need a live session at import
def _inflate(body: bytes | None) -> bytes | None:
    try:
        return zlib.decompress(body) if body is not None else None
    except zlib.error:
        return None
