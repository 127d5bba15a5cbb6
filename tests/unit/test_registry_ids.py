"""Which schema an id names: its text form, the payload id kind rule, Apicurio lookups by kind, retries."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import structlog

from registry.apicurio import ArtifactVersion
from registry.backend import RegistryError
from registry.ids import UnresolvedSchemaId, WireId
from registry.payload_ids import ApicurioIds, choose
from registry.resolver import GROUP_SEARCH_TOPICS, SchemaResolver
from registry.subjects import SubjectStrategy

TOPIC = "shop.public.orders"
SUBJECT = f"{TOPIC}-value"


def _schema(name: str, namespace: str = TOPIC) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": namespace,
                       "fields": [{"name": "id", "type": "int"}]})


V1, V2, OTHER = _schema("V1"), _schema("V2"), _schema("Other", "shop.public.customers")


class FakeApicurio:
    """Versions as (artifact, global id, content id, text); `late` ids appear only from the second ask on."""

    address = "http://registry:8080/apis/registry/v3"

    def __init__(self, versions: list[tuple[str, int, int, str]], late: set[tuple[str, int]] = frozenset(),
                 down: bool = False) -> None:
        self.registered, self.late, self.down = versions, set(late), down
        self.asked: list[tuple[str, int]] = []
        self.listed: list[str] = []  # the artifacts whose versions were listed ("*": the group's)

    def _find(self, kind: str, schema_id: int) -> str:
        if self.down:
            raise RegistryError("schema registry at http://registry:8080 is unreachable")
        self.asked.append((kind, schema_id))
        if (kind, schema_id) in self.late and self.asked.count((kind, schema_id)) == 1:
            raise RegistryError("not yet", status=404)
        for _, global_id, content_id, text in self.registered:
            if (global_id if kind == "global" else content_id) == schema_id:
                return text
        raise RegistryError("no such id", status=404)

    def by_global_id(self, schema_id: int) -> str:
        return self._find("global", schema_id)

    def by_content_id(self, schema_id: int) -> str:
        return self._find("content", schema_id)

    def holds(self, artifact_id: str, kind: str, schema_id: int) -> bool:
        index = 1 if kind == "globalId" else 2
        return any(v[0] == artifact_id and v[index] == schema_id for v in self.registered)

    def versions(self, artifact_id: str) -> list[ArtifactVersion]:
        self.listed.append(artifact_id)
        return [ArtifactVersion("default", artifact_id, str(n), global_id, content_id)
                for n, (_, global_id, content_id, _) in enumerate(
                    [v for v in self.registered if v[0] == artifact_id], start=1)]

    def group_versions(self, max_pages: int | None = None) -> dict[str, list[ArtifactVersion]] | None:
        """One page a version, as if the page held one."""
        self.listed.append("*")
        if max_pages is not None and len(self.registered) > max_pages:
            return None
        artifacts = {artifact for artifact, *_ in self.registered}
        return {artifact: self.versions(artifact) for artifact in sorted(artifacts)}


@pytest.fixture(autouse=True)
def _logs_to_a_live_stream() -> None:
    """The resolver logs each payload id's kind; an earlier test may have left structlog on a closed stream."""
    structlog.reset_defaults()


def _resolver(fake: FakeApicurio, payload_id: str = "auto", retry_s: float = 0.0) -> SchemaResolver:
    ids = ApicurioIds(fake, SubjectStrategy.TOPIC, payload_id)  # type: ignore[arg-type]
    return SchemaResolver(fake, SubjectStrategy.TOPIC, lambda subject: V2, ids, retry_s)  # type: ignore[arg-type]


def test_the_id_text_says_where_the_id_came_from() -> None:
    version = uuid.uuid4()
    assert WireId.parse("global:42") == WireId(42, "global") and str(WireId(42, "global")) == "global:42"
    assert WireId.parse("content:7") == WireId(7, "content")
    assert WireId.parse("42") == WireId(42) and str(WireId(42)) == "42"
    assert WireId.parse(str(version)) == WireId(version) and str(WireId(version)) == str(version)
    assert WireId(42, "global").describe() == "global id 42 (Kafka header apicurio.value.globalId)"
    assert WireId(42).describe() == "payload schema id 42"
    with pytest.raises(ValueError, match="'version' is not an id kind"):
        WireId.parse("version:3")


@pytest.mark.parametrize(("readings", "in_subject", "topic_kind", "chosen"), [
    ({"content": V1, "global": OTHER}, {"content"}, None, ("content", True)),  # Apicurio 3.x's default
    ({"content": OTHER, "global": V2}, {"global"}, None, ("global", True)),  # global ids after a schema change
    ({"global": V2}, {"global"}, None, ("global", True)),  # no content has that id yet
    ({"content": V1, "global": V1}, {"content", "global"}, None, ("content", False)),  # the same schema both ways
    ({"content": V1}, set(), None, ("content", False)),  # registered under another subject: the one reading
    ({}, set(), None, (None, False)),  # unknown
    ({"content": V2, "global": V1}, {"content", "global"}, "global", ("global", False)),  # the topic's kind decides
])
def test_the_payload_id_rule(readings, in_subject, topic_kind, chosen) -> None:
    assert choose(9, readings, in_subject, topic_kind) == chosen


@pytest.mark.parametrize(("in_subject", "where"), [({"content", "global"}, "in the topic's subject"),
                                                   (set(), "in the registry")])
def test_two_schemas_under_the_two_readings_are_never_guessed(in_subject: set, where: str) -> None:
    with pytest.raises(UnresolvedSchemaId, match=f"payload schema id 9 is both a content id and a global id {where}.*"
                                                 "set registry.payload_id") as raised:
        choose(9, {"content": V2, "global": V1}, in_subject)
    assert raised.value.error_class == "AmbiguousSchemaId"


def test_a_global_id_that_is_also_an_unrelated_content_id_reads_as_the_subjects_version() -> None:
    # orders v1 (global 3, content 3), customers (global 4, content 4), orders v2 (global 5, content 5) ... and
    # a converter writing global ids into the 4-byte frame, after more schemas were registered elsewhere:
    fake = FakeApicurio([(SUBJECT, 3, 2, V1), ("shop.public.customers-value", 4, 3, OTHER), (SUBJECT, 6, 4, V2)])
    resolver = _resolver(fake)
    assert resolver.writer("6", TOPIC) == V2  # content 6 does not exist: global
    assert resolver.writer("3", TOPIC) == V1  # content 3 is the customers' schema, global 3 is orders v1
    assert resolver.writer("2", TOPIC) == V1  # a content id of orders v1 (global 2 does not exist)


def test_an_ambiguous_id_takes_the_kind_another_id_of_the_topic_showed() -> None:
    # orders v1 is global 4 / content 2, v2 global 6 / content 4: 4 reads as v1 (global) or as v2 (content)
    fake = FakeApicurio([(SUBJECT, 4, 2, V1), ("other-value", 5, 3, OTHER), (SUBJECT, 6, 4, V2)])
    alone = _resolver(fake).writers(TOPIC, ["4"])["4"]
    assert isinstance(alone, UnresolvedSchemaId) and alone.error_class == "AmbiguousSchemaId"
    assert _resolver(fake).writers(TOPIC, ["4", "6"]) == {"4": V1, "6": V2}  # 6 is only a global id: 4 is too
    assert _resolver(fake, payload_id="content").writer("4", TOPIC) == V2  # or pinned


def test_the_ids_listed_from_a_subject_show_nothing_about_the_producers_kind() -> None:
    # CI's case: orders v1 is global 78 / content 79, v2 global 79 / content 80; content 78 and global 80 are
    # other tables'. Listed from the subject, 78 is in it only as a global id, which says nothing of the producer
    # (content ids here): 79 must stay undecided until a record shows the kind, then read as v1.
    fake = FakeApicurio([("other-key", 77, 78, OTHER), (SUBJECT, 78, 79, V1), (SUBJECT, 79, 80, V2),
                         ("employee-value", 80, 81, OTHER)])
    resolver = _resolver(fake)
    listed = resolver.subject_writers(TOPIC, header_ids=False)
    assert "79" not in listed and listed["80"] == V2 and listed["78"] == V1
    # the stage's one pass lands the records of 80 and reports the ids it saw; then the rest, planned, reads 79
    resolver.carried(TOPIC, ["80"])
    assert resolver.writers(TOPIC, ["79"]) == {"79": V1}
    assert resolver.subject_writers(TOPIC, header_ids=False)["79"] == V1  # the next batch lists it


@pytest.mark.parametrize("payload_id", ["auto", "content", "global"])
def test_a_subjects_listed_writers_are_what_writer_gives_each_id_at_a_call_a_version(payload_id: str) -> None:
    # 79 is v2's global id and v1's content id: ambiguous until a record shows the kind (left out), in auto
    registered = [("other-key", 77, 78, OTHER), (SUBJECT, 78, 79, V1), (SUBJECT, 79, 80, V2),
                  ("employee-value", 80, 81, OTHER)]
    fake = FakeApicurio(registered)
    resolver = _resolver(fake, payload_id)
    listed = resolver.subject_writers(TOPIC, header_ids=True)
    assert sorted(fake.asked) == [("global", 78), ("global", 79)]  # a text a version
    kinds = ("global", "content") if payload_id == "auto" else (payload_id,)
    ids = {"global": [78, 79], "content": [79, 80]}
    candidates = {str(n) for kind in kinds for n in ids[kind]} | {f"{k}:{n}" for k, ns in ids.items() for n in ns}
    each = _resolver(FakeApicurio(registered), payload_id).writers(TOPIC, candidates, observed=False)
    assert listed == {schema_id: text for schema_id, text in each.items() if isinstance(text, str)}
    assert ("79" in listed) == (payload_id != "auto") and listed["global:79"] == V2 == listed["content:80"]
    assert resolver.subject_writers(TOPIC, header_ids=True) == listed and len(fake.asked) == 2  # kept: no call


def test_many_topics_subjects_are_listed_by_one_search_as_each_is_by_itself() -> None:
    fake = FakeApicurio([("other-key", 77, 78, OTHER), (SUBJECT, 78, 79, V1), (SUBJECT, 79, 80, V2),
                         ("shop.public.customers-value", 80, 81, OTHER)])
    named = [TOPIC, "shop.public.customers", "shop.public.none"]
    topics = named + [f"shop.public.t{i}" for i in range(GROUP_SEARCH_TOPICS - len(named))]
    each = {topic: _resolver(fake).subject_writers(topic, header_ids=True) for topic in topics}
    fake.listed.clear()
    resolver = _resolver(fake)
    listing = resolver.group_listing(topics)
    assert listing is not None
    assert {topic: resolver.subject_writers(topic, True, listing) for topic in topics} == each
    assert (fake.listed.count("*"), len(fake.listed)) == (1, 4)  # one search of the group, its three artifacts
    assert each[TOPIC] and each["shop.public.customers"] and not each["shop.public.none"]
    fake.listed.clear()
    assert _resolver(fake).group_listing(named) is None and not fake.listed  # a few: each by itself
    fake.registered += [("more-value", 100 + i, 200 + i, OTHER) for i in range(GROUP_SEARCH_TOPICS)]
    assert _resolver(fake).group_listing(topics) is None  # more pages than half the topics


def test_a_listed_id_alone_leaves_an_ambiguous_id_undecided() -> None:
    fake = FakeApicurio([(SUBJECT, 78, 79, V1), (SUBJECT, 79, 80, V2)])
    resolver = _resolver(fake)
    resolver.subject_writers(TOPIC, header_ids=False)  # 78 is listed, in the subject only as a global id
    alone = resolver.writers(TOPIC, ["79"])["79"]
    assert isinstance(alone, UnresolvedSchemaId) and alone.error_class == "AmbiguousSchemaId"


def test_header_ids_name_their_kind() -> None:
    fake = FakeApicurio([(SUBJECT, 4, 2, V1), ("other-value", 5, 3, OTHER), (SUBJECT, 6, 4, V2)])
    assert _resolver(fake).writer("global:4", TOPIC) == V1
    assert _resolver(fake).writer("content:4", TOPIC) == V2
    assert fake.asked == [("global", 4), ("content", 4)]  # no second reading, no subject search


def test_an_unknown_id_is_asked_again_after_the_backoff_then_named_with_its_kind_and_the_registry() -> None:
    fake = FakeApicurio([(SUBJECT, 4, 2, V1)], late={("global", 9)})
    fake.registered.append((SUBJECT, 9, 7, V2))
    started = time.monotonic()
    assert _resolver(fake, retry_s=0.05).writer("global:9", TOPIC) == V2  # registered a moment after the first ask
    assert time.monotonic() - started >= 0.05 and fake.asked == [("global", 9), ("global", 9)]
    with pytest.raises(UnresolvedSchemaId, match=r"^content id 12 \(Kafka header apicurio.value.contentId\) is not in "
                                                 r"the Apicurio at http://registry:8080/apis/registry/v3, asked again "
                                                 r"after 0.05 s") as raised:
        _resolver(fake, retry_s=0.05).writer("content:12", TOPIC)
    assert raised.value.error_class == "UnknownSchemaId"
    with pytest.raises(UnresolvedSchemaId, match=r"payload schema id 12 is not in the Apicurio at \S+ \(read as a "
                                                 r"content id and as a global id\)"):
        _resolver(fake).writer("12", TOPIC)


def test_a_registry_that_does_not_answer_is_an_outage_not_a_dead_letter() -> None:
    with pytest.raises(RegistryError, match="unreachable"):
        _resolver(FakeApicurio([], down=True)).writer("global:4", TOPIC)


def test_ids_the_registry_cannot_hold_are_named() -> None:
    class Confluent:  # a Confluent Schema Registry: one kind of id
        address = "http://schema-registry:8081"

        def schema(self, schema_id: int) -> str:
            return V1

    resolver = SchemaResolver(Confluent(), SubjectStrategy.TOPIC, lambda subject: V1)  # type: ignore[arg-type]
    assert resolver.writer("4", TOPIC) == V1
    with pytest.raises(UnresolvedSchemaId, match="global id 4 .* is an Apicurio id, and the registry at "
                                                 "http://schema-registry:8081 is not an Apicurio"):
        resolver.writer("global:4", TOPIC)
    with pytest.raises(UnresolvedSchemaId, match="Glue schema version .* cannot name a schema in this registry"):
        resolver.writer(str(uuid.uuid4()), TOPIC)
