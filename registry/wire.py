"""Wire framing of registry-backed messages.

- confluent: magic byte 0, the schema id as a 4-byte big-endian integer, the Avro body. Apicurio 3.x writes
  the same frame, with the content id as the schema id by default.
- apicurio-legacy: magic byte 0, the global id as an 8-byte big-endian long, the body.
- glue (AWS Glue Schema Registry): header version byte 3, compression byte (0 none, 5 zlib), the 16-byte
  schema version UUID, the body (zlib-compressed when the compression byte says so).

A serializer writes the configured format. The changelog stage tells them apart per record on the JVM, Kafka
headers included (`cdc/framing.py`, `registry.wire_format = "auto"`: an id whose first four bytes are zero is an
8-byte id). `detect` here is strict, for Python callers: byte 3 is Glue; byte 0 starts both Confluent and
Apicurio-legacy frames, and it refuses to guess.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from enum import StrEnum
from typing import Callable

from registry.backend import SchemaId

CONFLUENT_MAGIC = 0
GLUE_VERSION = 3
GLUE_UNCOMPRESSED = 0
GLUE_ZLIB = 5
_CONFLUENT_HEADER = struct.Struct(">BI")
_LEGACY_HEADER = struct.Struct(">Bq")
_GLUE_HEADER = struct.Struct(">BB16s")


class WireFormat(StrEnum):
    CONFLUENT = "confluent"
    APICURIO_LEGACY = "apicurio-legacy"
    GLUE = "glue"


class WireFormatError(ValueError):
    """The bytes do not carry the header the configured wire format expects."""


class AmbiguousWireFormatError(WireFormatError):
    """Magic byte 0 starts both Confluent and Apicurio-legacy frames: the wire format must be configured."""


def confluent_frame(schema_id: int, body: bytes) -> bytes:
    return frame(WireFormat.CONFLUENT, schema_id, body)


def confluent_unframe(message: bytes) -> tuple[int, bytes]:
    """(schema id, body) of a Confluent-framed message."""
    return _int_unframe(message, WireFormat.CONFLUENT)


def _header(fmt: WireFormat, schema_id: SchemaId, compressed: bool = False) -> bytes:
    if fmt is WireFormat.GLUE:
        if not isinstance(schema_id, uuid.UUID):
            raise WireFormatError(f"the glue wire format carries a schema version UUID, not {schema_id!r}")
        return _GLUE_HEADER.pack(GLUE_VERSION, GLUE_ZLIB if compressed else GLUE_UNCOMPRESSED, schema_id.bytes)
    if not isinstance(schema_id, int) or compressed:
        raise WireFormatError(f"the {fmt} wire format carries an uncompressed body and an integer id, "
                              f"not {schema_id!r}")
    packer = _CONFLUENT_HEADER if fmt is WireFormat.CONFLUENT else _LEGACY_HEADER
    try:
        return packer.pack(CONFLUENT_MAGIC, schema_id)
    except struct.error:
        raise WireFormatError(f"schema id {schema_id} does not fit the {fmt} wire format's "
                              f"{packer.size - 1}-byte id") from None


def frame(fmt: WireFormat, schema_id: SchemaId, body: bytes, compressed: bool = False) -> bytes:
    """`compressed` (glue only) zlib-compresses the body, as the Glue serializer's compression option does."""
    return framer(fmt, schema_id, compressed)(body)


def framer(fmt: WireFormat, schema_id: SchemaId, compressed: bool = False) -> Callable[[bytes], bytes]:
    """`frame` for one (format, id), with the header packed once: what a hot path keeps per schema."""
    head = _header(fmt, schema_id, compressed)
    if compressed:
        return lambda body: head + zlib.compress(body)
    return head.__add__


def unframe(message: bytes, fmt: WireFormat | None = None) -> tuple[SchemaId, bytes]:
    """(schema id, body) of a message in `fmt`, or in the format `detect` finds when `fmt` is None."""
    fmt = fmt or detect(message)
    return _glue_unframe(message) if fmt is WireFormat.GLUE else _int_unframe(message, fmt)


def _int_unframe(message: bytes, fmt: WireFormat) -> tuple[int, bytes]:
    unpacker = _CONFLUENT_HEADER if fmt is WireFormat.CONFLUENT else _LEGACY_HEADER
    if len(message) < unpacker.size:
        raise WireFormatError(f"message of {len(message)} bytes is shorter than the {unpacker.size}-byte {fmt} header")
    magic, schema_id = unpacker.unpack_from(message)
    if magic != CONFLUENT_MAGIC:
        raise WireFormatError(f"magic byte {magic} is not the {fmt} magic byte {CONFLUENT_MAGIC}")
    return schema_id, message[unpacker.size:]


def detect(message: bytes) -> WireFormat:
    """The wire format a message's first byte names, where it names one."""
    if not message:
        raise WireFormatError("an empty message has no wire format header")
    if message[0] == GLUE_VERSION:
        return WireFormat.GLUE
    if message[0] == CONFLUENT_MAGIC:
        raise AmbiguousWireFormatError("magic byte 0 starts both confluent (4-byte id) and apicurio-legacy "
                                       "(8-byte id) frames; configure the wire format")
    raise WireFormatError(f"first byte {message[0]} is neither magic byte 0 (confluent, apicurio-legacy) "
                          f"nor Glue header version {GLUE_VERSION}")


def _glue_unframe(message: bytes) -> tuple[uuid.UUID, bytes]:
    if len(message) < _GLUE_HEADER.size:
        raise WireFormatError(f"message of {len(message)} bytes is shorter than the {_GLUE_HEADER.size}-byte "
                              "glue header")
    version, compression, version_id = _GLUE_HEADER.unpack_from(message)
    if version != GLUE_VERSION:
        raise WireFormatError(f"header version byte {version} is not the glue header version {GLUE_VERSION}")
    body = message[_GLUE_HEADER.size:]
    if compression == GLUE_UNCOMPRESSED:
        return uuid.UUID(bytes=version_id), body
    if compression != GLUE_ZLIB:
        raise WireFormatError(f"glue compression byte {compression} is neither {GLUE_UNCOMPRESSED} (none) "
                              f"nor {GLUE_ZLIB} (zlib)")
    try:
        return uuid.UUID(bytes=version_id), zlib.decompress(body)
    except zlib.error as exc:
        raise WireFormatError(f"glue body marked zlib-compressed does not decompress: {exc}") from None
