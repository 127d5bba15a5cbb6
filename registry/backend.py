"""What every schema-registry backend shares: the error it raises, the id -> schema cache, and the
two calls a serializer needs (register a schema under a subject, fetch a schema by the id a message carries).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Callable, Hashable, Protocol

DEFAULT_COMPATIBILITY = "BACKWARD"  # what every backend sets on a subject it creates
SchemaId = int | uuid.UUID  # Confluent/Apicurio ids are integers; Glue names a schema version by a UUID


class RegistryError(RuntimeError):
    """The registry refused a request or could not be reached; names the subject or id and the address.

    `status` is the HTTP status of a refusal (None when the registry was unreachable or is not HTTP).
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def not_found(exc: RegistryError) -> bool:
    """Whether the registry said it has no such id or subject: Glue says EntityNotFoundException with HTTP 400,
    the REST registries say 404."""
    return exc.status == 404 or "EntityNotFound" in str(exc)


def unless_not_found(lookup: Callable[[], str]) -> str | None:
    """The lookup's answer, or None when the registry has no such thing; other failures raise."""
    try:
        return lookup()
    except RegistryError as exc:
        if not_found(exc):
            return None
        raise


class SchemaRegistry(Protocol):
    """A backend a serializer can use: ccompat, Apicurio native or Glue."""

    address: str

    def register(self, subject: str, schema: dict[str, Any] | str) -> SchemaId: ...

    def schema(self, schema_id: SchemaId) -> str: ...


class SchemaCache:
    """Schema text by id. Ids are immutable in every registry, so an entry never goes stale.

    No lock: dict reads and writes are atomic, and two threads fetching the same id at once is harmless.
    """

    def __init__(self) -> None:
        self._texts: dict[Hashable, str] = {}

    def get(self, key: Hashable, load: Callable[[], str]) -> str:
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = load()
        return text

    def put(self, key: Hashable, text: str) -> None:
        self._texts[key] = text


def schema_text(schema: dict[str, Any] | str) -> str:
    return schema if isinstance(schema, str) else json.dumps(schema)
