"""Avro encode/decode with fastavro, with writer -> reader schema resolution.

A schema is parsed once per distinct text and kept (registries hold few schemas), so the hot path does no
parsing and no json.dumps: callers hold an `AvroSchema`, or pass the text, which is a dict lookup.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from io import BytesIO
from typing import Any

import fastavro

_NAMED_TYPES = ("record", "enum", "fixed")


@dataclass(frozen=True, eq=False)
class AvroSchema:
    text: str
    parsed: Any  # fastavro's parsed form
    full_name: str | None  # `namespace.name` of a named type; None for other types


_by_text: dict[str, AvroSchema] = {}


def avro_schema(schema: AvroSchema | dict[str, Any] | str) -> AvroSchema:
    """The parsed schema for a text, a JSON-like dict (dumped first: keep dicts off the hot path) or itself."""
    if isinstance(schema, AvroSchema):
        return schema
    text = schema if isinstance(schema, str) else json.dumps(schema)
    found = _by_text.get(text)
    if found is None:
        parsed = fastavro.parse_schema(json.loads(text))
        named = isinstance(parsed, dict) and parsed.get("type") in _NAMED_TYPES
        found = _by_text[text] = AvroSchema(text, parsed, parsed["name"] if named else None)  # fastavro qualifies it
    return found


def encode(schema: AvroSchema, record: Any) -> bytes:
    """Schemaless Avro: the body alone, as registry-framed messages carry it."""
    buffer = BytesIO()
    fastavro.schemaless_writer(buffer, schema.parsed, record)
    return buffer.getvalue()


def decode(body: bytes, writer: AvroSchema, reader: AvroSchema | None = None) -> Any:
    """Read `body` written with `writer` into `reader` (the writer's own shape when None or the same).

    Resolution follows the Avro spec: a reader field the writer lacks takes its default, a writer field the
    reader lacks is skipped, and types are promoted where Avro allows (int -> long, null -> a union with null).
    """
    same = reader is None or reader is writer
    return fastavro.schemaless_reader(BytesIO(body), writer.parsed, None if same else reader.parsed)
