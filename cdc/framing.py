"""What a Kafka value is, read from its headers and first bytes as Spark column expressions, so a batch is
classified and its Avro body cut out on the JVM without a row going through Python.

A value is a tombstone (null), registry-backed Avro, DMS JSON (a JSON object: first byte `{`), or unframed (a
dead letter). Registry-backed Avro names its writer schema in one of these ways (`registry/wire.py`):
- Apicurio's Kafka headers `apicurio.value.globalId` / `apicurio.value.contentId` (8-byte big-endian longs; the
  value is the Avro body alone, `apicurio.value.encoding` absent or BINARY);
- Confluent's frame: magic 0 + a 4-byte id (Apicurio 3.x writes content ids in it by default, or global ids);
- Apicurio's legacy frame: magic 0 + an 8-byte id (global by default);
- Glue's: version byte 3 + compression byte (0 or 5: zlib) + the 16-byte schema version UUID.

`registry.wire_format = "auto"` tells them apart per record, in that order: headers first (a plain Avro body may
well start with byte 0), then the first byte. Magic 0 starts both payload frames; the rule is that an id whose
first four bytes are zero is an 8-byte id. Real ids are small: a Confluent 4-byte id of 0 (no registry issues one)
would be misread, and so would an 8-byte id of 2^32 or more (no registry counts that far), nothing else.
A configured format reads only its own frame, from the payload, as before.

The schema id is a string column (`registry/ids.py`): `global:42` / `content:7` from headers, a bare number
from a payload frame, a Glue UUID in its canonical text; the body's offset follows from it. Glue bodies may be
zlib-compressed; only those rows go through Python to be inflated, since Spark has no zlib function.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from enum import StrEnum

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from registry.ids import VALUE_ENCODING_HEADER, VALUE_ID_HEADERS
from registry.wire import CONFLUENT_MAGIC, GLUE_UNCOMPRESSED, GLUE_VERSION, GLUE_ZLIB, WireFormat

AUTO = "auto"


class Kind(StrEnum):
    TOMBSTONE = "tombstone"
    JSON = "json"
    FRAMED = "framed"
    UNFRAMED = "unframed"
    CONTROL = "control"  # a DMS JSON control record (`cdc/dms_tables.py`), told apart once the JSON is parsed


@dataclass(frozen=True)
class PayloadFrame:
    """A wire format's header in the payload: its first byte, its length, where the id sits and how long it is."""

    wire: WireFormat
    magic: int
    header_bytes: int
    id_offset: int  # 1-based position of the id's first byte
    id_bytes: int

    @classmethod
    def of(cls, wire: WireFormat) -> PayloadFrame:
        if wire is WireFormat.GLUE:
            return cls(wire, GLUE_VERSION, 18, 3, 16)
        legacy = wire is WireFormat.APICURIO_LEGACY
        return cls(wire, CONFLUENT_MAGIC, 9 if legacy else 5, 2, 8 if legacy else 4)

    def present(self) -> Column:
        """The value starts with this header (for Glue, with a compression byte it knows)."""
        starts = (F.length("value") >= self.header_bytes) & (F.substring("value", 1, 1) == F.lit(bytes([self.magic])))
        if self.wire is WireFormat.GLUE:
            return starts & F.substring("value", 2, 1).isin(bytes([GLUE_UNCOMPRESSED]), bytes([GLUE_ZLIB]))
        return starts

    def id_text(self) -> Column:
        raw = F.substring("value", self.id_offset, self.id_bytes)
        if self.wire is not WireFormat.GLUE:
            return F.conv(F.hex(raw), 16, 10)
        return F.regexp_replace(F.lower(F.hex(raw)), F.lit("^(.{8})(.{4})(.{4})(.{4})"), F.lit("$1-$2-$3-$4-"))


_GLUE, _LEGACY, _CONFLUENT = (PayloadFrame.of(wire) for wire in
                              (WireFormat.GLUE, WireFormat.APICURIO_LEGACY, WireFormat.CONFLUENT))


@dataclass(frozen=True)
class Framing:
    """How the stage finds a value's writer schema id and Avro body: `auto`, or one configured wire format."""

    wire: str  # "auto" or a WireFormat value

    @classmethod
    def of(cls, wire: str) -> Framing:
        return cls(wire if wire == AUTO else WireFormat(wire).value)

    @property
    def reads_headers(self) -> bool:
        """Whether the Kafka source must deliver the records' headers."""
        return self.wire == AUTO

    @property
    def expected(self) -> str:
        """What a registry-backed value looks like, in words, for the dead letters of those that do not."""
        if self.wire != AUTO:
            frame = PayloadFrame.of(WireFormat(self.wire))
            return f"a {self.wire} registry frame (first byte {frame.magic}, then the schema id)"
        return ("a registry frame (first byte 0: Confluent or Apicurio legacy, 3: Glue, then the schema id) "
                f"or Avro with its schema id in a {' or '.join(VALUE_ID_HEADERS.values())} Kafka header")

    def schema_id(self, headers: bool = True) -> Column:
        """The writer schema id as text, or null when the value names none. `headers`: the rows have Kafka's
        `headers` column (ids from headers are read only then)."""
        ids = [F.when(present, frame.id_text()) for present, frame in self._frames()]
        if self.reads_headers and headers:
            ids.insert(0, _header_id())
        return F.coalesce(*ids) if len(ids) > 1 else ids[0]

    def compressed(self) -> Column:
        """True for a Glue frame whose body is zlib-compressed."""
        if self.wire not in (AUTO, WireFormat.GLUE):
            return F.lit(False)
        return _GLUE.present() & (F.substring("value", 2, 1) == F.lit(bytes([GLUE_ZLIB])))

    def body_offset(self) -> Column:
        """Where the Avro body starts in the value: the length of its frame's header (0 when the id came in a
        header)."""
        offsets = [(present, frame.header_bytes) for present, frame in self._frames()]
        if self.reads_headers:
            offsets.insert(0, (_from_headers(), 0))
        first, *rest = offsets
        return functools.reduce(lambda acc, case: acc.when(case[0], F.lit(case[1])), rest,
                                F.when(first[0], F.lit(first[1])))

    def body(self, inflate: bool = False) -> Column:
        """The Avro body (under `auto`, of rows that have their `schema_id` column). With `inflate`, compressed
        bodies are inflated (null when they do not inflate, so the row decodes as malformed); leave it off for
        batches without compressed rows, to keep them on the JVM."""
        offset = self.body_offset()
        body = F.col("value").substr(offset + 1, F.length("value") - offset)
        if not inflate:
            return body
        compressed = self.compressed() & ~_from_headers() if self.reads_headers else self.compressed()
        return F.when(compressed, _inflate(body)).otherwise(body)

    def _frames(self) -> list[tuple[Column, PayloadFrame]]:
        """The payload frames this framing reads, each with the condition that picks it, in the order tried."""
        if self.wire != AUTO:
            frame = PayloadFrame.of(WireFormat(self.wire))
            return [(frame.present(), frame)]
        eight_byte = F.substring("value", 2, 4) == F.lit(bytes(4))
        return [(_GLUE.present(), _GLUE), (_LEGACY.present() & eight_byte, _LEGACY), (_CONFLUENT.present(), _CONFLUENT)]


def _from_headers() -> Column:
    return F.col("schema_id").contains(":")


def _header(name: str) -> Column:
    """The value of the record's last header called `name` (as Kafka's `lastHeader`), or null: `get` is null
    past the array's end, where a name that is not among the keys points. Not found with `filter`: Spark
    cannot compile a lambda, so the whole classifying projection ran interpreted."""
    from_end = F.array_position(F.reverse(F.col("headers.key")), name)
    return F.get(F.col("headers.value"), F.size("headers") - from_end)


def _header_id() -> Column:
    """`global:<id>` or `content:<id>` from Apicurio's value headers, when there is a body and it is Avro binary.

    Each header is named once in the expression (an id's 8 bytes checked on its hex text, which `conv` turns to
    null when empty): repeated, their lookups made the classifying projection's generated method too large
    for the JIT (HotSpot compiles none over 8000 bytes), and it ran in the bytecode interpreter."""
    binary = F.coalesce(F.upper(_header(VALUE_ENCODING_HEADER).cast("string")), F.lit("BINARY")) == "BINARY"
    ids = [F.concat(F.lit(f"{kind}:"), F.conv(F.regexp_extract(F.hex(_header(name)), "^([0-9A-F]{16})$", 1), 16, 10))
           for kind, name in VALUE_ID_HEADERS.items()]
    return F.when(F.col("value").isNotNull() & binary, F.coalesce(*ids))


def kind(schema_id: Column) -> Column:
    """Classify a value, given its `Framing.schema_id()`. A named schema id wins over the opening brace of DMS
    JSON: no payload frame starts with `{`, and a body whose id is in the headers may."""
    return (F.when(F.col("value").isNull(), F.lit(Kind.TOMBSTONE.value))
            .when(schema_id.isNotNull(), F.lit(Kind.FRAMED.value))
            .when(F.substring("value", 1, 1) == F.lit(b"{"), F.lit(Kind.JSON.value))
            .otherwise(F.lit(Kind.UNFRAMED.value)))


@F.udf(BinaryType(), useArrow=True)  # a type object: a DDL string would need a live session at import
def _inflate(body: bytes | None) -> bytes | None:
    try:
        return zlib.decompress(body) if body is not None else None
    except zlib.error:
        return None
