import uuid
from typing import Any

import pytest

from registry.backend import RegistryError, SchemaId, schema_text
from registry.serde import AvroSerde
from registry.subjects import SubjectStrategy
from registry.wire import WireFormat, WireFormatError

V1 = {"type": "record", "name": "Employee", "namespace": "hr",
      "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "dept", "type": ["null", "string"], "default": None}]}


class MemoryRegistry:
    """A registry in a dict that counts the calls a serde makes."""

    address = "memory://registry"

    def __init__(self, uuids: bool = False) -> None:
        self.uuids = uuids
        self.texts: dict[SchemaId, str] = {}
        self.subjects: dict[str, list[SchemaId]] = {}
        self.calls = 0

    def register(self, subject: str, schema: dict[str, Any] | str) -> SchemaId:
        self.calls += 1
        schema_id: SchemaId = uuid.uuid4() if self.uuids else len(self.texts) + 1
        self.texts[schema_id] = schema_text(schema)
        self.subjects.setdefault(subject, []).append(schema_id)
        return schema_id

    def schema(self, schema_id: SchemaId) -> str:
        self.calls += 1
        if schema_id not in self.texts:
            raise RegistryError(f"schema registry at {self.address} refused schema id {schema_id}: HTTP 404")
        return self.texts[schema_id]


@pytest.mark.parametrize(("wire", "uuids"), [(WireFormat.CONFLUENT, False), (WireFormat.APICURIO_LEGACY, False),
                                             (WireFormat.GLUE, True)])
def test_round_trip_registers_once_per_subject_and_schema(wire: WireFormat, uuids: bool) -> None:
    registry = MemoryRegistry(uuids)
    serde = AvroSerde(registry, wire)
    messages = [serde.serialize("hr.employee", V1, {"id": i, "name": f"e{i}"}) for i in range(3)]
    assert registry.calls == 1 and list(registry.subjects) == ["hr.employee-value"]
    reader = AvroSerde(registry, wire)
    assert [reader.deserialize(m) for m in messages] == [{"id": i, "name": f"e{i}"} for i in range(3)]
    assert registry.calls == 2  # a fresh serde fetched the writer schema once


def test_records_of_every_version_decode_into_the_latest() -> None:
    serde = AvroSerde(MemoryRegistry(), subjects=SubjectStrategy.RECORD)
    old = serde.serialize("t", V1, {"id": 1, "name": "a"})
    new = serde.serialize("t", V2, {"id": 2, "name": "b", "dept": "ops"})
    assert serde.registry.subjects == {"hr.Employee": [1, 2]}  # type: ignore[attr-defined]
    assert [serde.deserialize(m, V2) for m in (old, new)] == [{"id": 1, "name": "a", "dept": None},
                                                              {"id": 2, "name": "b", "dept": "ops"}]


def test_keys_and_values_are_separate_subjects() -> None:
    registry = MemoryRegistry()
    serde = AvroSerde(registry)
    serde.serialize("t", '"long"', 7, is_key=True)
    serde.serialize("t", V1, {"id": 7, "name": "x"})
    assert list(registry.subjects) == ["t-key", "t-value"]


def test_glue_compression_round_trip() -> None:
    serde = AvroSerde(MemoryRegistry(uuids=True), WireFormat.GLUE, compress=True)
    message = serde.serialize("t", V1, {"id": 1, "name": "x" * 200})
    assert message[1] == 5 and len(message) < 100
    assert serde.deserialize(message) == {"id": 1, "name": "x" * 200}


def test_unknown_schema_id_names_the_id_and_address() -> None:
    serde = AvroSerde(MemoryRegistry())
    with pytest.raises(RegistryError, match=r"at memory://registry refused schema id 42"):
        serde.deserialize(b"\x00\x00\x00\x00\x2a\x02")


def test_a_backend_whose_ids_the_wire_cannot_carry_is_named() -> None:
    with pytest.raises(WireFormatError, match="glue wire format carries a schema version UUID"):
        AvroSerde(MemoryRegistry(), WireFormat.GLUE).serialize("t", V1, {"id": 1, "name": "x"})
