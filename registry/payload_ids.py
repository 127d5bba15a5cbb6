"""Apicurio ids by kind, and which kind a payload frame's number is.

Apicurio numbers contents and versions separately, so 42 may be the content id of one schema and the global id of
another. A Kafka header names the kind; a payload frame (magic 0 + 4 or 8 bytes) does not: the producer's
`apicurio.registry.use-id` decides (content ids by default in 3.x, global ids in 2.x). Reading the id the wrong
way decodes a record with another table's schema, so the rule, per topic and id, is:

1. `registry.payload_id = "content" | "global"` pins the kind.
2. Otherwise the id is read both ways. A reading counts when the subject the topic's values are registered under
   (by `registry.subject_strategy`, for that reading's schema) has a version with that id of that kind. One
   reading counts: that one. Both, naming the same schema: the content id.
3. When no reading is in the subject (a writer registered elsewhere), the same over the readings that exist.
4. Both count and name two schemas (a subject whose one version's global id is another's content id): a producer
   writes one kind, so the kind an unambiguous id of the same topic showed decides (`SchemaResolver.writers`
   resolves a batch's ids in two passes for this); with none, the id is ambiguous: a dead letter saying to pin it.
5. None exists: the id is unknown.

Only an id read off a record shows the producer's kind. The ids listed from a topic's subject (every version's
global and content id, `SchemaResolver.subject_writers`) are each in the subject under the kind they were listed
by, whatever the producer writes: `writer` reports what an id would show, and the caller tells `saw` when the id
was read off a record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import structlog

from registry.apicurio import ApicurioClient, ArtifactVersion
from registry.avro import avro_schema
from registry.backend import unless_not_found
from registry.ids import AMBIGUOUS, ID_KINDS, IdKind, UnresolvedSchemaId, WireId
from registry.subjects import SubjectStrategy, subject_name

log = structlog.get_logger(__name__)
PayloadId = Literal["auto", "content", "global"]
_NATIVE_KIND = {"content": "contentId", "global": "globalId"}


@dataclass(frozen=True)
class Reading:
    """The writer schema an id names, and the kind of id the topic's producer writes if this id alone shows it."""

    text: str
    shows: IdKind | None = None


def choose(schema_id: int, readings: dict[IdKind, str], in_subject: set[IdKind],
           topic_kind: IdKind | None = None) -> tuple[IdKind | None, bool]:
    """The kind the rule above picks from the schema texts the id names per kind (`readings`), the kinds under
    which the topic's subject holds it and the kind the topic's ids have shown; None when there is no reading.
    The flag says whether this id alone shows the producer's kind (one reading counts, in the subject)."""
    counted = {kind: text for kind, text in readings.items() if kind in in_subject} or readings
    if len(set(counted.values())) > 1:
        if topic_kind is not None:
            return topic_kind, False
        where = "in the topic's subject" if in_subject else "in the registry (neither in the topic's subject)"
        raise UnresolvedSchemaId(
            AMBIGUOUS,
            f"payload schema id {schema_id} is both a content id and a global id {where}, of two different "
            "schemas, and no other id of the topic showed which kind its producer writes; set "
            "registry.payload_id to that kind (Apicurio serdes: apicurio.registry.use-id, contentId by default in "
            "3.x, globalId in 2.x), then replay the dead letters")
    kind = next((kind for kind in ID_KINDS if kind in counted), None)
    return kind, bool(in_subject) and len(counted) == 1


@dataclass
class ApicurioIds:
    """Writer schemas by id through Apicurio's native API."""

    client: ApicurioClient
    strategy: SubjectStrategy
    payload_id: PayloadId = "auto"
    _topic_kinds: dict[str, IdKind] = field(default_factory=dict, repr=False)  # what a topic's ids have shown
    _texts: dict[int, str] = field(default_factory=dict, repr=False)  # a listed version's, by global id

    @property
    def address(self) -> str:
        return self.client.address

    def writer(self, wire_id: WireId, topic: str) -> Reading | None:
        """The writer schema an id names, or None when the registry knows no schema by this id."""
        assert isinstance(wire_id.value, int)
        if wire_id.kind is not None or self.payload_id != "auto":
            text = self._text(wire_id.kind or self.payload_id, wire_id.value)  # type: ignore[arg-type]
            return None if text is None else Reading(text)
        readings = {kind: text for kind in ID_KINDS if (text := self._text(kind, wire_id.value)) is not None}
        in_subject = {kind for kind, text in readings.items()
                      if self._subject_holds(topic, text, kind, wire_id.value)}
        kind, shows = choose(wire_id.value, readings, in_subject, self._topic_kinds.get(topic))
        if kind is None:
            return None
        log.debug("registry.payload_id", topic=topic, schema_id=wire_id.value, kind=kind,
                  in_subject=kind in in_subject)
        return Reading(readings[kind], kind if shows else None)

    def listed(self, topic: str, versions: Sequence[ArtifactVersion], header_ids: bool
               ) -> dict[str, Reading | UnresolvedSchemaId]:
        """The reading of each id a frame can carry for one of `versions` (the topic's subject's, listed): by the
        rule above as `writer` gives it, from the versions and one text a version. Each such id is in the subject
        under the kind it was listed by, so only those readings count (rule 2), and the texts are the versions':
        `writer` asks the registry for both kinds' texts and whether the subject holds each, ten calls a version.
        `header_ids`: also the ids of Apicurio's headers, which name their kind (`global:78`)."""
        kinds = ID_KINDS if self.payload_id == "auto" else (self.payload_id,)
        for version in versions:
            if version.global_id not in self._texts:  # a version's text never changes
                self._texts[version.global_id] = self.client.by_global_id(version.global_id)
        by_kind: dict[IdKind, dict[int, str]] = {
            "global": {v.global_id: self._texts[v.global_id] for v in versions},
            "content": {v.content_id: self._texts[v.global_id] for v in versions}}
        found: dict[str, Reading | UnresolvedSchemaId] = {}
        if header_ids:
            found.update({f"{kind}:{n}": Reading(text) for kind, ids in by_kind.items() for n, text in ids.items()})
        for schema_id in sorted({n for kind in kinds for n in by_kind[kind]}):
            readings = {kind: by_kind[kind][schema_id] for kind in kinds if schema_id in by_kind[kind]}
            if self.payload_id != "auto":
                found[str(schema_id)] = Reading(readings[self.payload_id])
                continue
            try:
                kind, shows = choose(schema_id, readings, set(readings), self._topic_kinds.get(topic))
            except UnresolvedSchemaId as exc:
                found[str(schema_id)] = exc
                continue
            assert kind is not None  # a listed id has a reading
            found[str(schema_id)] = Reading(readings[kind], kind if shows else None)
        return found

    def saw(self, topic: str, kind: IdKind, schema_id: int | str) -> None:
        """A record of `topic` carried an id that shows its producer writes `kind` ids (said once a topic)."""
        if self._topic_kinds.get(topic) != kind:
            self._topic_kinds[topic] = kind
            log.info("registry.payload_kind", topic=topic, kind=kind, shown_by=schema_id)

    def read_as(self) -> str:
        """How a payload id is read, for errors."""
        return ("as a content id and as a global id" if self.payload_id == "auto"
                else f"as a {self.payload_id} id (registry.payload_id)")

    def _text(self, kind: IdKind, schema_id: int) -> str | None:
        lookup: Callable[[int], str] = self.client.by_content_id if kind == "content" else self.client.by_global_id
        return unless_not_found(lambda: lookup(schema_id))

    def _subject_holds(self, topic: str, text: str, kind: IdKind, schema_id: int) -> bool:
        subject = subject_name(self.strategy, topic, avro_schema(text).full_name)
        return self.client.holds(subject, _NATIVE_KIND[kind], schema_id)  # type: ignore[arg-type]
