"""Registry-backed Avro serializer/deserializer: a backend, a wire format and a subject strategy.

`serialize` registers a schema once per (subject, schema) and then only encodes and frames; `deserialize`
fetches a writer schema once per id, so after warm-up neither touches the registry.
"""

from __future__ import annotations

from typing import Any, Callable

from registry.avro import AvroSchema, avro_schema, decode, encode
from registry.backend import SchemaId, SchemaRegistry
from registry.subjects import SubjectStrategy, subject_name
from registry.wire import WireFormat, framer, unframe

SchemaLike = AvroSchema | dict[str, Any] | str


class AvroSerde:
    def __init__(self, registry: SchemaRegistry, wire: WireFormat = WireFormat.CONFLUENT,
                 subjects: SubjectStrategy = SubjectStrategy.TOPIC, compress: bool = False) -> None:
        """`compress` zlib-compresses bodies; only the glue wire format can say so."""
        self.registry = registry
        self.wire = wire
        self.subjects = subjects
        self.compress = compress
        self._framers: dict[tuple[str, bool, str], Callable[[bytes], bytes]] = {}
        self._ids: dict[tuple[str, str], SchemaId] = {}
        self._writers: dict[SchemaId, AvroSchema] = {}

    def serialize(self, topic: str, schema: SchemaLike, record: Any, is_key: bool = False) -> bytes:
        """Pass an `AvroSchema` or the schema text on a hot path; a dict is dumped to text on every call."""
        schema = avro_schema(schema)
        return self._frame(topic, schema, is_key)(encode(schema, record))

    def serializer(self, topic: str, schema: SchemaLike, is_key: bool = False) -> Callable[[Any], bytes]:
        """`serialize` bound to one topic and schema, registered now: a hot path that keeps it skips the schema
        and framer lookups on every record."""
        schema = avro_schema(schema)
        frame = self._frame(topic, schema, is_key)
        return lambda record: frame(encode(schema, record))

    def deserialize(self, message: bytes, reader_schema: SchemaLike | None = None) -> Any:
        """Decode into `reader_schema` (for example the latest version), or into the writer's shape."""
        schema_id, body = unframe(message, self.wire)
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._writers[schema_id] = avro_schema(self.registry.schema(schema_id))
        return decode(body, writer, None if reader_schema is None else avro_schema(reader_schema))

    def _frame(self, topic: str, schema: AvroSchema, is_key: bool) -> Callable[[bytes], bytes]:
        """The framer for a topic's key or value schema; the first call registers the schema."""
        frame = self._framers.get((topic, is_key, schema.text))
        if frame is None:
            frame = self._framers[(topic, is_key, schema.text)] = self._register(topic, schema, is_key)
        return frame

    def _register(self, topic: str, schema: AvroSchema, is_key: bool) -> Callable[[bytes], bytes]:
        """Topics that share a subject (the record strategy) share one registration."""
        subject = subject_name(self.subjects, topic, schema.full_name, is_key)
        schema_id = self._ids.get((subject, schema.text))
        if schema_id is None:
            schema_id = self._ids[(subject, schema.text)] = self.registry.register(subject, schema.text)
            self._writers[schema_id] = schema
        return framer(self.wire, schema_id, self.compress)
