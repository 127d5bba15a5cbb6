"""The Confluent-compatible and native clients against the real Apicurio: one registry, two views of it."""

from __future__ import annotations

import json
import uuid

import pytest

from pipeline.config.settings import PipelineConfig
from pipeline.stack import Stack
from registry.apicurio import ApicurioClient
from registry.avro import avro_schema, decode, encode
from registry.ccompat import ConfluentCompatClient, RegistryError

pytestmark = pytest.mark.integration

V1 = {"type": "record", "name": "Artist", "namespace": "moma",
      "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "nationality", "type": ["null", "string"], "default": None}]}
INCOMPATIBLE = {**V1, "fields": [{"name": "id", "type": "string"}, {"name": "name", "type": "string"}]}


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def ccompat(stack: Stack, cfg: PipelineConfig) -> ConfluentCompatClient:
    return ConfluentCompatClient.from_settings(cfg.registry)


@pytest.fixture
def native(stack: Stack, cfg: PipelineConfig) -> ApicurioClient:
    return ApicurioClient.from_settings(cfg.registry)


def test_registered_through_ccompat_read_through_native(ccompat: ConfluentCompatClient, native: ApicurioClient) -> None:
    subject = fresh("artists-value")
    content_id = ccompat.register(subject, V1)
    latest = native.latest(subject)  # a ccompat subject is an artifact of the group `default`
    assert (latest.artifact_id, latest.version, latest.content_id) == (subject, "1", content_id)
    assert json.loads(native.by_content_id(content_id)) == json.loads(native.by_global_id(latest.global_id)) == V1


def test_registered_through_native_read_through_ccompat(ccompat: ConfluentCompatClient, native: ApicurioClient) -> None:
    artifact = fresh("artists-value")
    first = native.create_version(artifact, V1)
    assert native.create_version(artifact, json.dumps(V1, indent=2)) == first  # same schema, other layout
    second = native.create_version(artifact, V2)
    assert (first.version, second.version) == ("1", "2") and second.global_id != first.global_id
    latest = ccompat.latest(artifact)
    assert (latest.id, latest.version) == (second.content_id, 2) and json.loads(latest.schema) == V2
    assert json.loads(ccompat.schema(first.content_id)) == V1


def test_backward_compatibility_rejects_an_incompatible_schema(ccompat: ConfluentCompatClient,
                                                               cfg: PipelineConfig) -> None:
    subject = fresh("artists-value")
    ccompat.register(subject, V1)
    assert ccompat.compatibility(subject) == "BACKWARD"  # set when the subject was created
    with pytest.raises(RegistryError, match=rf"registry at {cfg.registry.url}/apis/ccompat/v7 rejected the schema "
                                            rf"for subject '{subject}' as incompatible: .*Incompatible") as caught:
        ccompat.register(subject, INCOMPATIBLE)
    assert caught.value.status == 409


def test_native_compatibility_rule_rejects_an_incompatible_schema(native: ApicurioClient, cfg: PipelineConfig) -> None:
    artifact = fresh("artists-value")
    native.create_version(artifact, V1)
    with pytest.raises(RegistryError, match=rf"registry at {cfg.registry.url}/apis/registry/v3 rejected the schema "
                                            rf"for artifact default/{artifact} as incompatible"):
        native.create_version(artifact, INCOMPATIBLE)
    native.set_compatibility(artifact, "NONE")
    assert native.create_version(artifact, INCOMPATIBLE).version == "2"


def test_an_existing_subject_keeps_its_compatibility(ccompat: ConfluentCompatClient, cfg: PipelineConfig) -> None:
    subject = fresh("artists-value")
    ConfluentCompatClient.from_settings(cfg.registry, compatibility="NONE").register(subject, V1)
    assert ccompat.register(subject, INCOMPATIBLE) > 0
    assert ccompat.compatibility(subject) == "NONE"


def test_an_invalid_schema_is_named(ccompat: ConfluentCompatClient, cfg: PipelineConfig) -> None:
    subject = fresh("broken-value")
    with pytest.raises(RegistryError, match=rf"{cfg.registry.url}/apis/ccompat/v7 rejected the schema for subject "
                                            rf"'{subject}' as invalid"):
        ccompat.register(subject, {"type": "record", "name": "B", "fields": [{"name": "x", "type": "nope"}]})


def test_records_of_two_versions_decode_into_the_latest(ccompat: ConfluentCompatClient) -> None:
    subject = fresh("artists-value")
    written = [(ccompat.register(subject, V1), {"id": 1, "name": "Anni Albers"}),
               (ccompat.register(subject, V2), {"id": 2, "name": "Nam June Paik", "nationality": "American"})]
    bodies = [(schema_id, encode(avro_schema(ccompat.schema(schema_id)), record)) for schema_id, record in written]
    latest = ccompat.latest(subject)
    assert latest.version == 2
    decoded = [decode(body, avro_schema(ccompat.schema(schema_id)), avro_schema(latest.schema))
               for schema_id, body in bodies]
    assert decoded == [{"id": 1, "name": "Anni Albers", "nationality": None},
                       {"id": 2, "name": "Nam June Paik", "nationality": "American"}]


def test_unknown_ids_name_the_id_and_address(native: ApicurioClient, cfg: PipelineConfig) -> None:
    with pytest.raises(RegistryError, match=rf"registry at {cfg.registry.url}/apis/registry/v3 refused schema "
                                            r"globalId 987654321: HTTP 404"):
        native.by_global_id(987654321)
