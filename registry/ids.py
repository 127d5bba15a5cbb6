"""The writer schema id of one Kafka value, in the text form the changelog stage carries (`_schema_id`).

Where the id travels decides what is known about it:
- `global:42`, `content:7`: from Apicurio's Kafka headers (`apicurio.value.globalId`, `apicurio.value.contentId`,
  each an 8-byte big-endian long), which name the kind; the value is the Avro body alone.
- `42`: from a payload frame (magic 0 + a 4- or 8-byte id). Which kind of Apicurio id it is, the frame does not
  say (the producer's `apicurio.registry.use-id` does): the resolver asks the registry (`registry/payload_ids.py`).
  A Confluent Schema Registry has only one kind.
- a UUID: a Glue schema version id, from the Glue header.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

IdKind = Literal["content", "global"]
ID_KINDS: tuple[IdKind, ...] = ("content", "global")
# The Kafka headers Apicurio's serdes (2.x and 3.x, `apicurio.registry.headers.enabled`) write for a value, by the
# kind of id they carry; a key's are `apicurio.key.*` (the stage reads its keys from the values).
VALUE_ID_HEADERS: dict[IdKind, str] = {"global": "apicurio.value.globalId", "content": "apicurio.value.contentId"}
VALUE_ENCODING_HEADER = "apicurio.value.encoding"  # BINARY (Avro binary) or JSON (Avro's JSON encoding)


UNKNOWN, AMBIGUOUS = "UnknownSchemaId", "AmbiguousSchemaId"  # the dead letters' error classes


class UnresolvedSchemaId(LookupError):
    """No one writer schema for an id: the registry does not know it, or it names two. The message says which
    id, of which kind, at which registry, and what to do; `error_class` is the dead letter's."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


@dataclass(frozen=True)
class WireId:
    value: int | uuid.UUID
    kind: IdKind | None = None  # None: a payload frame's id, whose kind the registry decides

    @classmethod
    def parse(cls, text: str) -> WireId:
        kind, _, number = text.rpartition(":")
        if kind:
            if kind not in ID_KINDS:
                raise ValueError(f"schema id {text!r}: {kind!r} is not an id kind ({', '.join(ID_KINDS)})")
            return cls(int(number), kind)  # type: ignore[arg-type]
        return cls(uuid.UUID(text)) if "-" in text else cls(int(text))

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}" if self.kind else str(self.value)

    def describe(self) -> str:
        """The id in words, for errors: where it came from and what kind it is."""
        if isinstance(self.value, uuid.UUID):
            return f"Glue schema version {self.value}"
        if self.kind:
            return f"{self.kind} id {self.value} (Kafka header {VALUE_ID_HEADERS[self.kind]})"
        return f"payload schema id {self.value}"
