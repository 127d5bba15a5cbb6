"""What moto cannot show: Glue's asynchronous compatibility check (PENDING, then AVAILABLE or FAILURE)."""

from __future__ import annotations

import uuid
from typing import Iterator

import boto3
import pytest
from botocore.stub import Stubber

from registry.backend import RegistryError
from registry.glue import GlueRegistry

VERSION_ID = str(uuid.uuid4())
SCHEMA = '{"type": "record", "name": "E", "fields": [{"name": "id", "type": "int"}]}'


@pytest.fixture
def glue(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[GlueRegistry, Stubber]]:
    monkeypatch.setattr("registry.glue.PENDING_POLL_S", 0)
    client = boto3.client("glue", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    with Stubber(client) as stubber:
        stubber.add_response("create_registry", {"RegistryName": "r"}, {"RegistryName": "r"})
        yield GlueRegistry(client, "r"), stubber
        stubber.assert_no_pending_responses()


def answer(stubber: Stubber, status: str) -> None:
    stubber.add_response("register_schema_version", {"SchemaVersionId": VERSION_ID, "Status": "PENDING"})
    stubber.add_response("get_schema_version", {"SchemaVersionId": VERSION_ID, "Status": "PENDING"})
    stubber.add_response("get_schema_version", {"SchemaVersionId": VERSION_ID, "Status": status})


def test_a_pending_version_is_awaited(glue: tuple[GlueRegistry, Stubber]) -> None:
    registry, stubber = glue
    answer(stubber, "AVAILABLE")
    assert registry.register("s", SCHEMA) == uuid.UUID(VERSION_ID)
    assert registry.schema(uuid.UUID(VERSION_ID)) == SCHEMA  # cached by registering: no further call


def test_a_failed_version_is_a_rejection_naming_the_schema_and_registry(glue: tuple[GlueRegistry, Stubber]) -> None:
    registry, stubber = glue
    answer(stubber, "FAILURE")
    with pytest.raises(RegistryError, match=r"glue schema registry 'r' at https://glue\.us-east-1\.amazonaws\.com "
                                            r"rejected the schema for schema 's' as incompatible"):
        registry.register("s", SCHEMA)
