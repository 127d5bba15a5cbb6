"""The changelog stage's schema resolver over a fake registry: unknown ids, subject naming, a missing subject."""

from __future__ import annotations

import json

import pytest

from registry.backend import RegistryError
from registry.ids import UnresolvedSchemaId
from registry.resolver import SchemaResolver, SubjectNotFound
from registry.subjects import SubjectStrategy

WRITER = json.dumps({"type": "record", "name": "Envelope", "namespace": "hr.public.employee",
                     "fields": [{"name": "op", "type": "string"}]})


class FakeRegistry:
    address = "fake registry"

    def __init__(self, down: bool = False) -> None:
        self.down = down

    def register(self, subject: str, schema: object) -> int:
        raise NotImplementedError

    def schema(self, schema_id: int) -> str:
        if self.down:
            raise RegistryError("fake registry is unreachable")
        if schema_id != 7:
            raise RegistryError(f"no schema {schema_id}", status=404)
        return WRITER


def _resolver(strategy: SubjectStrategy = SubjectStrategy.TOPIC, down: bool = False,
              subjects: dict[str, str] | None = None) -> SchemaResolver:
    known = subjects if subjects is not None else {"hr.public.employee-value": WRITER}

    def latest(subject: str) -> str:
        if subject not in known:
            raise RegistryError(f"no subject {subject}", status=404)
        return known[subject]

    return SchemaResolver(FakeRegistry(down), strategy, latest, retry_s=0)  # type: ignore[arg-type]


def test_an_id_the_registry_does_not_know_is_named_and_an_outage_raises() -> None:
    assert _resolver().writer("7") == WRITER
    with pytest.raises(UnresolvedSchemaId, match="payload schema id 8 is not in the registry at fake registry"):
        _resolver().writer("8")
    with pytest.raises(RegistryError, match="unreachable"):
        _resolver(down=True).writer("7")
    with pytest.raises(RegistryError, match="unreachable"):
        _resolver(down=True).check()


@pytest.mark.parametrize(("strategy", "subject"), [
    (SubjectStrategy.TOPIC, "hr.public.employee-value"),
    (SubjectStrategy.RECORD, "hr.public.employee.Envelope"),
    (SubjectStrategy.TOPIC_RECORD, "hr.public.employee-hr.public.employee.Envelope"),
])
def test_the_reader_is_the_latest_of_the_subject_the_strategy_names(strategy: SubjectStrategy, subject: str) -> None:
    assert _resolver(strategy, subjects={subject: "latest"}).reader("hr.public.employee", WRITER) == "latest"


def test_a_topic_without_its_subject_says_what_to_do() -> None:
    with pytest.raises(SubjectNotFound, match="subject hr.public.employee-value has no schema at fake registry: "
                                              "register it"):
        _resolver(subjects={}).reader("hr.public.employee", WRITER)


def test_the_readers_of_a_topics_writers_ask_once_a_subject() -> None:
    asked: list[str] = []
    other = json.dumps({**json.loads(WRITER), "fields": [{"name": "op", "type": "string"},
                                                         {"name": "ts_ms", "type": ["null", "long"]}]})

    def latest(subject: str) -> str:
        asked.append(subject)
        return "latest"

    resolver = SchemaResolver(FakeRegistry(), SubjectStrategy.TOPIC, latest, retry_s=0)  # type: ignore[arg-type]
    assert resolver.readers("hr.public.employee", [WRITER, other]) == {WRITER: "latest", other: "latest"}
    assert asked == ["hr.public.employee-value"]
