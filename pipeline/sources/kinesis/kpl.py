"""KPL de-aggregation: a Kinesis record the Kinesis Producer Library aggregated holds many user records.

Format: the magic bytes F3 89 9A C2, a protobuf `AggregatedRecord` (1: partition key table, 2: explicit hash
key table, 3: records, each 1: partition key index, 2: hash key index, 3: data, 4: tags), then the MD5 of the
protobuf. Like the KCL, a record whose magic or digest does not match is a plain record, passed through.
The protobuf is decoded by hand: it is four fields, not worth a dependency.
"""

from __future__ import annotations

import hashlib
from typing import Iterator, NamedTuple

MAGIC = b"\xf3\x89\x9a\xc2"
DIGEST_BYTES = 16


class UserRecord(NamedTuple):
    partition_key: str
    data: bytes


class _Malformed(ValueError):
    pass


def deaggregate(data: bytes, partition_key: str) -> list[UserRecord]:
    """The user records in one Kinesis record: itself when it is not a (valid) KPL aggregate."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + DIGEST_BYTES:
        return [UserRecord(partition_key, data)]
    body, digest = data[len(MAGIC):-DIGEST_BYTES], data[-DIGEST_BYTES:]
    if hashlib.md5(body).digest() != digest:
        return [UserRecord(partition_key, data)]
    try:
        return _records(body)
    except (_Malformed, IndexError, UnicodeDecodeError):
        return [UserRecord(partition_key, data)]


def aggregate(records: list[UserRecord]) -> bytes:
    """The KPL form of `records` (used by tests and the benchmark to produce aggregated input)."""
    keys = list(dict.fromkeys(r.partition_key for r in records))
    body = b"".join(_field(1, k.encode()) for k in keys)
    for record in records:
        inner = _key(1, 0) + _varint(keys.index(record.partition_key)) + _field(3, record.data)
        body += _field(3, inner)
    return MAGIC + body + hashlib.md5(body).digest()


def _records(body: bytes) -> list[UserRecord]:
    keys: list[str] = []
    raw_records: list[bytes] = []
    for number, value in _fields(body):
        if number == 1:
            keys.append(bytes(value).decode())
        elif number == 3:
            raw_records.append(bytes(value))
    out = []
    for raw in raw_records:
        fields = dict(_fields(raw))
        index, data = fields.get(1), fields.get(3, b"")
        if not isinstance(index, int) or not isinstance(data, (bytes, memoryview)):
            raise _Malformed("record without a partition key index")
        out.append(UserRecord(keys[index], bytes(data)))
    return out


def _fields(buffer: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs of a protobuf message: varints as int, length-delimited as bytes."""
    position = 0
    while position < len(buffer):
        tag, position = _read_varint(buffer, position)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, position = _read_varint(buffer, position)
            yield number, value
        elif wire == 2:
            length, position = _read_varint(buffer, position)
            if position + length > len(buffer):
                raise _Malformed("field runs past the end")
            yield number, buffer[position:position + length]
            position += length
        else:
            raise _Malformed(f"wire type {wire} is not in the KPL format")


def _read_varint(buffer: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _field(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload
