"""Wire framing of registry-backed messages.

Confluent framing: magic byte 0, then the schema id as a 4-byte big-endian integer, then the Avro body.
Apicurio 3.x writes the same frame, with the content id as the schema id by default.
"""

from __future__ import annotations

import struct

CONFLUENT_MAGIC = 0
_CONFLUENT_HEADER = struct.Struct(">bI")


class WireFormatError(ValueError):
    """The bytes do not carry the header the configured wire format expects."""


def confluent_frame(schema_id: int, body: bytes) -> bytes:
    return _CONFLUENT_HEADER.pack(CONFLUENT_MAGIC, schema_id) + body


def confluent_unframe(message: bytes) -> tuple[int, bytes]:
    """(schema id, body) of a Confluent-framed message."""
    if len(message) < _CONFLUENT_HEADER.size:
        raise WireFormatError(f"message of {len(message)} bytes is shorter than the 5-byte Confluent header")
    magic, schema_id = _CONFLUENT_HEADER.unpack_from(message)
    if magic != CONFLUENT_MAGIC:
        raise WireFormatError(f"magic byte {magic} is not the Confluent magic byte 0")
    return schema_id, message[_CONFLUENT_HEADER.size:]
