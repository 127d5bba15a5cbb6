"""Writer and reader schemas for a consumer that decodes elsewhere (Spark's `from_avro`): the writer schema a
message's id names, and the reader schema (the latest version of the subject the writer belongs to).

One interface over the three backends; the id is the text the wire header carries (a decimal id, or a Glue
schema version UUID). Writers are cached by the backend clients (ids never change); the latest reader is
asked for on every call, since a new version may be registered at any time.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable

from pipeline.config import AwsSettings, RegistrySettings
from registry.apicurio import ApicurioClient
from registry.avro import avro_schema
from registry.backend import RegistryError, SchemaRegistry
from registry.ccompat import ConfluentCompatClient
from registry.factory import schema_registry
from registry.glue import GlueRegistry
from registry.subjects import SubjectStrategy, subject_name

NOT_FOUND = 404


class SubjectNotFound(RegistryError):
    """The subject a topic's writer schemas belong to has no version in the registry."""


def _not_found(exc: RegistryError) -> bool:
    """Glue says EntityNotFoundException with HTTP 400; the REST registries say 404."""
    return exc.status == NOT_FOUND or "EntityNotFound" in str(exc)


@dataclass
class SchemaResolver:
    registry: SchemaRegistry
    strategy: SubjectStrategy
    latest_text: Callable[[str], str]  # the subject's latest schema text; raises RegistryError

    @property
    def address(self) -> str:
        return self.registry.address

    def check(self) -> None:
        """Raise RegistryError naming the registry when it does not answer (an id it does not know is fine)."""
        self.writer(str(uuid.UUID(int=0)) if isinstance(self.registry, GlueRegistry) else "0")

    def writer(self, schema_id: str) -> str | None:
        """The writer schema's text, or None when the registry does not know the id."""
        key: Any = uuid.UUID(schema_id) if isinstance(self.registry, GlueRegistry) else int(schema_id)
        try:
            return self.registry.schema(key)
        except RegistryError as exc:
            if _not_found(exc):
                return None
            raise

    def reader(self, topic: str, writer: str) -> str:
        """The latest version of the value subject `writer` belongs to (by the configured naming strategy)."""
        subject = subject_name(self.strategy, topic, avro_schema(writer).full_name)
        try:
            return self.latest_text(subject)
        except RegistryError as exc:
            if not _not_found(exc):
                raise
            raise SubjectNotFound(
                f"topic {topic} carries registry-framed messages, but the subject {subject} has no schema at "
                f"{self.address}: register it, or leave the topic out of changelog.topics / "
                "changelog.topic_pattern", exc.status) from None


def resolver_from_settings(settings: RegistrySettings, aws: AwsSettings) -> SchemaResolver:
    registry = schema_registry(settings, aws)
    return SchemaResolver(registry, SubjectStrategy(settings.subject_strategy), _latest(registry))


def _latest(registry: SchemaRegistry) -> Callable[[str], str]:
    if isinstance(registry, ConfluentCompatClient):
        return lambda subject: registry.latest(subject).schema
    if isinstance(registry, ApicurioClient):
        return lambda subject: registry.by_global_id(registry.latest(subject).global_id)
    assert isinstance(registry, GlueRegistry)
    return registry.latest_definition
