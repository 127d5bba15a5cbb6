"""The Glue Schema Registry backend through moto (which checks no compatibility and lists no versions)."""

from __future__ import annotations

import json
import uuid

import boto3
import pytest

from pipeline.config.settings import PipelineConfig
from pipeline.stack import Stack
from registry.backend import RegistryError
from registry.glue import GlueRegistry

pytestmark = pytest.mark.integration

REGISTRY = "pipeline-tests"  # one registry for every run: moto allows only ten
V1 = {"type": "record", "name": "Employee", "namespace": "hr", "fields": [{"name": "id", "type": "int"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "dept", "type": ["null", "string"], "default": None}]}


@pytest.fixture
def glue(stack: Stack, cfg: PipelineConfig) -> GlueRegistry:
    return GlueRegistry.from_settings(cfg.aws, REGISTRY)


def test_register_and_fetch_versions(glue: GlueRegistry, cfg: PipelineConfig) -> None:
    subject = f"hr.employee-{uuid.uuid4().hex[:8]}-value"
    first = glue.register(subject, V1)  # creates the registry when missing, and the schema
    assert glue.register(subject, V1) == first
    second = glue.register(subject, V2)
    assert second != first
    client = boto3.client("glue", **cfg.aws.boto3_kwargs())
    fresh = GlueRegistry(client, REGISTRY)
    assert [json.loads(fresh.schema(v)) for v in (first, second)] == [V1, V2]
    assert json.loads(fresh.latest_definition(subject)) == V2
    schema = client.get_schema(SchemaId={"RegistryName": REGISTRY, "SchemaName": subject})
    assert (schema["Compatibility"], schema["DataFormat"], schema["LatestSchemaVersion"]) == ("BACKWARD", "AVRO", 2)


def test_unknown_version_names_the_uuid_and_address(glue: GlueRegistry, cfg: PipelineConfig) -> None:
    missing = uuid.uuid4()
    with pytest.raises(RegistryError, match=rf"glue schema registry '{REGISTRY}' at "
                                            rf"{cfg.aws.endpoint_url} refused schema version {missing}: "
                                            "EntityNotFoundException"):
        glue.schema(missing)
