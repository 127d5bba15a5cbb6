"""Serialize/deserialize round trips through the real registries, one per wire format."""

from __future__ import annotations

import uuid
from typing import Callable

import pytest

from pipeline.config.settings import PipelineConfig
from pipeline.stack import Stack
from registry.apicurio import ApicurioClient
from registry.backend import RegistryError, SchemaRegistry
from registry.ccompat import ConfluentCompatClient
from registry.factory import schema_registry, serde_from_settings
from registry.serde import AvroSerde
from registry.subjects import SubjectStrategy
from registry.wire import WireFormat, detect
from tests.conftest import make_config

pytestmark = pytest.mark.integration

V1 = {"type": "record", "name": "Employee", "namespace": "hr",
      "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "dept", "type": ["null", "string"], "default": None}]}
KEY = {"type": "record", "name": "Key", "namespace": "hr", "fields": [{"name": "id", "type": "int"}]}

GLUE_REGISTRY = "pipeline-tests"  # one registry for every run (moto allows ten); topics are unique per test
GLUE = ["registry.backend=glue", "registry.wire_format=glue", f"registry.glue_registry={GLUE_REGISTRY}"]
BACKENDS: dict[str, list[str]] = {  # the settings that select each backend and wire format
    "confluent+ccompat": [],
    "confluent+native-content-ids": ["registry.backend=apicurio"],
    "apicurio-legacy+native-global-ids": ["registry.backend=apicurio", "registry.wire_format=apicurio-legacy"],
    "glue+glue": GLUE,
}


def _configured(backend: str) -> tuple[WireFormat, Callable[[], SchemaRegistry]]:
    cfg = make_config(*BACKENDS[backend])
    return WireFormat(cfg.registry.written_wire_format), lambda: schema_registry(cfg.registry, cfg.aws)


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip_with_evolution(stack: Stack, cfg: PipelineConfig, backend: str) -> None:
    wire, connect = _configured(backend)
    registry = connect()
    topic = f"hr.employee.{uuid.uuid4().hex[:8]}"
    writer = AvroSerde(registry, wire, SubjectStrategy.TOPIC_RECORD)
    records = [(V1, {"id": 1, "name": "a"}), (V2, {"id": 2, "name": "b", "dept": "ops"}), (V1, {"id": 3, "name": "c"})]
    messages = [writer.serialize(topic, schema, record) for schema, record in records]  # old and new interleaved
    key = writer.serialize(topic, KEY, {"id": 1}, is_key=True)
    reader = AvroSerde(connect(), wire)  # a fresh client: every writer schema comes from the registry
    assert [reader.deserialize(m, V2) for m in messages] == [{"id": 1, "name": "a", "dept": None},
                                                             {"id": 2, "name": "b", "dept": "ops"},
                                                             {"id": 3, "name": "c", "dept": None}]
    assert reader.deserialize(messages[1], V1) == {"id": 2, "name": "b"}
    assert reader.deserialize(key) == {"id": 1}


def test_apicurio_confluent_frames_carry_content_ids(stack: Stack, cfg: PipelineConfig) -> None:
    """What Apicurio 3.x serializers write by default reads back through the ccompat API."""
    message = AvroSerde(ApicurioClient.from_settings(cfg.registry)).serialize(
        f"t-{uuid.uuid4().hex[:8]}", V1, {"id": 7, "name": "x"})
    assert AvroSerde(ConfluentCompatClient.from_settings(cfg.registry)).deserialize(message) == {"id": 7, "name": "x"}


def test_glue_frames_are_detected_and_compressed(stack: Stack, cfg: PipelineConfig) -> None:
    glue = make_config(*GLUE, "registry.glue_compression=true")
    serde = serde_from_settings(glue.registry, glue.aws)
    message = serde.serialize(f"t-{uuid.uuid4().hex[:8]}", V1, {"id": 7, "name": "x" * 500})
    assert detect(message) is WireFormat.GLUE and message[1] == 5 and len(message) < 100
    assert serde.deserialize(message) == {"id": 7, "name": "x" * 500}


@pytest.mark.parametrize("backend", ["confluent+ccompat", "apicurio-legacy+native-global-ids"])
def test_unknown_schema_id_names_the_id_and_address(stack: Stack, cfg: PipelineConfig, backend: str) -> None:
    wire, connect = _configured(backend)
    serde = AvroSerde(connect(), wire)
    message = AvroSerde(connect(), wire).serialize(f"t-{uuid.uuid4().hex[:8]}", V1, {"id": 1, "name": "x"})
    unknown = message[:1] + b"\x7f" + message[2:]  # an id far beyond any registered one
    with pytest.raises(RegistryError, match=rf"registry at {cfg.registry.url}/apis/\S+ refused schema "
                                            r"(id|globalId) \d+"):
        serde.deserialize(unknown)
