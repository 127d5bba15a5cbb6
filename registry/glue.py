"""An AWS Glue Schema Registry backend over boto3.

Subjects are schema names in one registry (created when missing); a message names its writer schema by the
schema version UUID. Glue checks compatibility itself (moto does not) and may answer PENDING while it does,
so a new version is awaited until AVAILABLE; FAILURE means the schema was rejected.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from pipeline.config.settings import AwsSettings
from registry.backend import DEFAULT_COMPATIBILITY, RegistryError, SchemaCache, schema_text

DEFAULT_REGISTRY = "pipeline"
PENDING_TIMEOUT_S = 30.0
PENDING_POLL_S = 0.5


class GlueRegistry:
    def __init__(self, client: Any, registry_name: str = DEFAULT_REGISTRY,
                 compatibility: str = DEFAULT_COMPATIBILITY) -> None:
        """`compatibility` is set on schemas this registry creates (NONE, BACKWARD, FULL_ALL …)."""
        self._client = client
        self.registry_name = registry_name
        self._compatibility = compatibility
        self.address = f"glue schema registry {registry_name!r} at {client.meta.endpoint_url}"
        self._by_id = SchemaCache()
        self._registry_ready = False

    @classmethod
    def from_settings(cls, aws: AwsSettings, registry_name: str = DEFAULT_REGISTRY,
                      compatibility: str = DEFAULT_COMPATIBILITY) -> GlueRegistry:
        return cls(boto3.client("glue", **aws.boto3_kwargs()), registry_name, compatibility)

    def register(self, subject: str, schema: dict[str, Any] | str) -> uuid.UUID:
        """Register (or find) `schema` as a version of the schema named `subject`; returns the version UUID."""
        text = schema_text(schema)
        what = f"schema {subject!r}"
        schema_ref = {"RegistryName": self.registry_name, "SchemaName": subject}
        with self._errors(what):
            self._ensure_registry()
            try:
                found = self._client.register_schema_version(SchemaId=schema_ref, SchemaDefinition=text)
                version_id, status = found["SchemaVersionId"], found["Status"]
            except self._client.exceptions.EntityNotFoundException:
                created = self._client.create_schema(
                    RegistryId={"RegistryName": self.registry_name}, SchemaName=subject, DataFormat="AVRO",
                    Compatibility=self._compatibility, SchemaDefinition=text)
                version_id, status = created["SchemaVersionId"], created["SchemaVersionStatus"]
            status = self._settled(version_id, status)
        if status != "AVAILABLE":
            raise RegistryError(f"{self.address} rejected the schema for {what} as incompatible with its "
                                f"{self._compatibility} compatibility (schema version {version_id} is {status})")
        self._by_id.put(uuid.UUID(version_id), text)
        return uuid.UUID(version_id)

    def schema(self, schema_id: uuid.UUID) -> str:
        """A version's definition by its UUID, from the cache after the first call."""
        return self._by_id.get(schema_id, lambda: self._definition(schema_id))

    def latest_definition(self, subject: str) -> str:
        """The newest version of the schema named `subject` (never cached: a version may be added any time)."""
        with self._errors(f"schema {subject!r}"):
            found = self._client.get_schema_version(
                SchemaId={"RegistryName": self.registry_name, "SchemaName": subject},
                SchemaVersionNumber={"LatestVersion": True})
        return str(found["SchemaDefinition"])

    def _definition(self, version_id: uuid.UUID) -> str:
        with self._errors(f"schema version {version_id}"):
            return str(self._client.get_schema_version(SchemaVersionId=str(version_id))["SchemaDefinition"])

    def _ensure_registry(self) -> None:
        if self._registry_ready:
            return
        try:
            self._client.create_registry(RegistryName=self.registry_name)
        except self._client.exceptions.AlreadyExistsException:
            pass
        self._registry_ready = True

    def _settled(self, version_id: str, status: str) -> str:
        deadline = time.monotonic() + PENDING_TIMEOUT_S
        while status == "PENDING" and time.monotonic() < deadline:
            time.sleep(PENDING_POLL_S)
            status = self._client.get_schema_version(SchemaVersionId=version_id)["Status"]
        return status

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise RegistryError(f"{self.address} refused {what}: {error.get('Code')} {error.get('Message')}",
                                exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")) from None
        except BotoCoreError as exc:
            raise RegistryError(f"{self.address} is unreachable ({what}): {exc}") from None
