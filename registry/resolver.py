"""Writer and reader schemas for a consumer that decodes elsewhere (Spark's `from_avro`): the writer schema a
message's id names, and the reader schema (the latest version of the subject the writer belongs to).

One interface over the three backends; the id is the text the framing produces (`registry/ids.py`). Against an
Apicurio (the `apicurio` backend, or `ccompat` through Apicurio's ccompat API) ids are resolved through its
native API, which knows both kinds of id (`registry/payload_ids.py`). An id the registry does not know is asked
again `registry.unknown_id_retry_s` later (a producer may have registered it a moment ago) before it is given up.
Writers are kept per topic and id (ids never change); the latest reader is asked for on every call, since a new
version may be registered at any time.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from pipeline.config.settings import AwsSettings, RegistrySettings
from registry.apicurio import ApicurioClient, ArtifactVersion
from registry.avro import avro_schema
from registry.backend import RegistryError, SchemaRegistry, not_found, unless_not_found
from registry.ccompat import ConfluentCompatClient
from registry.factory import schema_registry
from registry.glue import GlueRegistry
from registry.ids import AMBIGUOUS, UNKNOWN, UnresolvedSchemaId, WireId
from registry.payload_ids import ApicurioIds, Reading
from registry.subjects import SubjectStrategy, subject_name

class SubjectNotFound(RegistryError):
    """The subject a topic's writer schemas belong to has no version in the registry."""


# Topics from which one search of the group lists their subjects: below it, a subject each costs less than the
# search's first page of 500 versions did (35-75 ms a subject, in threads, against 0.1-0.2 s a page).
GROUP_SEARCH_TOPICS = 20


@dataclass
class SchemaResolver:
    registry: SchemaRegistry
    strategy: SubjectStrategy
    latest_text: Callable[[str], str]  # the subject's latest schema text; raises RegistryError
    apicurio: ApicurioIds | None = None  # ids by kind, when the registry is an Apicurio
    retry_s: float = 0.5
    _writers: dict[tuple[str, str], Reading] = field(default_factory=dict, repr=False)

    @property
    def address(self) -> str:
        return self.registry.address

    def check(self) -> None:
        """Raise RegistryError naming the registry when it does not answer (an id it does not know is fine)."""
        nothing = uuid.UUID(int=0) if isinstance(self.registry, GlueRegistry) else 0
        unless_not_found(lambda: self.registry.schema(nothing))

    def writer(self, schema_id: str, topic: str = "", observed: bool = True) -> str:
        """The writer schema's text for an id of `topic`'s values. Raises UnresolvedSchemaId when the registry
        does not know the id (after asking twice) or it names two schemas, RegistryError when it does not answer.
        `observed`: the id was read off a record, so it may show which kind of Apicurio id the producer writes."""
        reading = self._writers.get((topic, schema_id))
        if reading is None:
            wire_id = WireId.parse(schema_id)
            reading = self._find(wire_id, topic)
            if reading is None:
                time.sleep(self.retry_s)
                reading = self._find(wire_id, topic)
            if reading is None:
                raise UnresolvedSchemaId(UNKNOWN, self._unknown(wire_id))
            self._writers[(topic, schema_id)] = reading
        if observed and reading.shows is not None and self.apicurio is not None:
            self.apicurio.saw(topic, reading.shows, schema_id)
        return reading.text

    def writers(self, topic: str, schema_ids: Iterable[str],
                observed: bool = True) -> dict[str, str | UnresolvedSchemaId]:
        """`writer` for each of a batch's ids of one topic: the schema text, or why there is none. Ids found
        ambiguous are asked again after the others, which may have shown the kind the topic's producer writes."""
        found = {schema_id: self._writer_or_why(schema_id, topic, observed) for schema_id in sorted(schema_ids)}
        for schema_id, result in found.items():
            if isinstance(result, UnresolvedSchemaId) and result.error_class == AMBIGUOUS:
                found[schema_id] = self._writer_or_why(schema_id, topic, observed)
        return found

    def carried(self, topic: str, schema_ids: Iterable[str]) -> None:
        """Records of `topic` carried these ids (landed by their listed writers): those that show which kind of
        Apicurio id the producer writes say so, for the ids only that kind decides (`registry/payload_ids.py`)."""
        self.writers(topic, schema_ids)

    def subject_writers(self, topic: str, header_ids: bool,
                        listing: Mapping[str, Sequence[ArtifactVersion]] | None = None) -> dict[str, str]:
        """Every id a frame of `topic` can carry for a version of the topic's value subject, with the writer
        text `writer` gives it, from the registry's list of the subject's versions (or `listing`'s, from
        `group_listing`), so a batch is decoded without first scanning it for its ids. `header_ids`: the framing
        reads Apicurio's header ids too.

        Empty where the subject cannot be told from the topic alone (a record naming strategy) or the registry
        cannot list a subject's ids (not an Apicurio): the stage then finds a batch's ids by reading it. An id
        whose kind only the producer's other ids can tell (`registry/payload_ids.py`) is left out until a record
        has shown that kind: the stage lands the records that carry it the planned way, after it has told
        `carried` the ids the other records carried."""
        if self.apicurio is None or self.strategy is not SubjectStrategy.TOPIC:
            return {}
        subject = subject_name(self.strategy, topic, None)
        versions = self.apicurio.client.versions(subject) if listing is None else listing.get(subject, [])
        return self._listed_writers(topic, versions, header_ids)

    def group_listing(self, topics: Sequence[str]) -> dict[str, list[ArtifactVersion]] | None:
        """The versions of `topics`' subjects (and of the rest of their group), by subject, listed by one search of
        the registry's group (a call a page of 500 versions) rather than a call a subject, for `subject_writers`;
        None when there are fewer than `GROUP_SEARCH_TOPICS` topics, the registry cannot list them, or the
        group's pages would outnumber half the topics (a group shared with other databases): then each subject
        is listed by itself. The writers' texts are not asked here: each topic's landing asks its own, in its
        thread (a call a version the process has not seen, `ApicurioIds.listed`)."""
        if self.apicurio is None or self.strategy is not SubjectStrategy.TOPIC or len(topics) < GROUP_SEARCH_TOPICS:
            return None
        return self.apicurio.client.group_versions(max_pages=len(topics) // 2)

    def _listed_writers(self, topic: str, versions: Sequence[ArtifactVersion], header_ids: bool) -> dict[str, str]:
        """What `writer` gives each id a frame can carry for one of `versions`, read from the versions
        (`ApicurioIds.listed`: a call a version) and kept as `writer` keeps it; an ambiguous id is left out."""
        assert self.apicurio is not None
        listed = self.apicurio.listed(topic, versions, header_ids)
        for schema_id, reading in listed.items():
            if isinstance(reading, Reading):
                self._writers.setdefault((topic, schema_id), reading)
        return {schema_id: self._writers[(topic, schema_id)].text for schema_id in listed
                if (topic, schema_id) in self._writers}

    def _writer_or_why(self, schema_id: str, topic: str, observed: bool) -> str | UnresolvedSchemaId:
        try:
            return self.writer(schema_id, topic, observed)
        except UnresolvedSchemaId as exc:
            return exc

    def _find(self, wire_id: WireId, topic: str) -> Reading | None:
        if isinstance(wire_id.value, uuid.UUID) != isinstance(self.registry, GlueRegistry):
            raise UnresolvedSchemaId(UNKNOWN, f"{wire_id.describe()} cannot name a schema in this "
                                     f"registry ({self.address}): set registry.backend to the producer's")
        if self.apicurio is not None:
            return self.apicurio.writer(wire_id, topic)
        if wire_id.kind is not None:
            raise UnresolvedSchemaId(UNKNOWN, f"{wire_id.describe()} is an Apicurio id, and the "
                                     f"registry at {self.address} is not an Apicurio: point registry.url at it")
        text = unless_not_found(lambda: self.registry.schema(wire_id.value))
        return None if text is None else Reading(text)

    def _unknown(self, wire_id: WireId) -> str:
        where = f"the registry at {self.address}"
        if self.apicurio is not None:
            read_as = "" if wire_id.kind else f" (read {self.apicurio.read_as()})"
            where = f"the Apicurio at {self.apicurio.address}{read_as}"
        return (f"{wire_id.describe()} is not in {where}, asked again after {self.retry_s:g} s: the producer "
                "registered its schema in another registry, or it was deleted")

    def readers(self, topic: str, writers: Iterable[str]) -> dict[str, str]:
        """`reader` for each writer text, asking the registry once a subject (a topic's writers of one record
        name share it: eight ids of two versions asked for the latest eight times)."""
        latest: dict[str, str] = {}
        found = {}
        for writer in writers:
            subject = subject_name(self.strategy, topic, avro_schema(writer).full_name)
            if subject not in latest:
                latest[subject] = self._latest(topic, subject)
            found[writer] = latest[subject]
        return found

    def reader(self, topic: str, writer: str) -> str:
        """The latest version of the value subject `writer` belongs to (by the configured naming strategy)."""
        return self._latest(topic, subject_name(self.strategy, topic, avro_schema(writer).full_name))

    def key_columns(self, topic: str) -> list[str]:
        """The fields of `topic`'s record key, from the latest version of its key subject (Debezium's key is the
        table's primary key, a record named `<topic>.Key`); none when the registry has no key schema for the
        topic (a table without a primary key, or keys that are not registry-backed)."""
        try:
            schema = json.loads(self.latest_text(subject_name(self.strategy, topic, f"{topic}.Key", is_key=True)))
        except RegistryError as exc:
            if not_found(exc):
                return []
            raise
        if not isinstance(schema, dict) or schema.get("type") != "record":
            return []
        return [str(field["name"]) for field in schema.get("fields", [])]

    def _latest(self, topic: str, subject: str) -> str:
        try:
            return self.latest_text(subject)
        except RegistryError as exc:
            if not not_found(exc):
                raise
            raise SubjectNotFound(
                f"topic {topic} carries registry-framed messages, but the subject {subject} has no schema at "
                f"{self.address}: register it, or leave the topic out of changelog.topics / "
                "changelog.topic_pattern", exc.status) from None


def resolver_from_settings(settings: RegistrySettings, aws: AwsSettings) -> SchemaResolver:
    registry = schema_registry(settings, aws)
    strategy = SubjectStrategy(settings.subject_strategy)
    apicurio = None
    if settings.apicurio_root is not None:
        client = registry if isinstance(registry, ApicurioClient) else ApicurioClient.from_settings(settings)
        apicurio = ApicurioIds(client, strategy, settings.payload_id)
    return SchemaResolver(registry, strategy, _latest(registry), apicurio, settings.unknown_id_retry_s)


def _latest(registry: SchemaRegistry) -> Callable[[str], str]:
    if isinstance(registry, ConfluentCompatClient):
        return lambda subject: registry.latest(subject).schema
    if isinstance(registry, ApicurioClient):
        return lambda subject: registry.by_global_id(registry.latest(subject).global_id)
    assert isinstance(registry, GlueRegistry)
    return registry.latest_definition
