"""The serializer the configuration describes: backend, wire format and subject naming from `registry.*`."""

from __future__ import annotations

from pipeline.config.settings import AwsSettings, RegistrySettings
from registry.apicurio import ApicurioClient
from registry.backend import SchemaRegistry
from registry.ccompat import ConfluentCompatClient
from registry.glue import GlueRegistry
from registry.serde import AvroSerde
from registry.subjects import SubjectStrategy
from registry.wire import WireFormat


def schema_registry(settings: RegistrySettings, aws: AwsSettings) -> SchemaRegistry:
    if settings.backend == "glue":
        return GlueRegistry.from_settings(aws, settings.glue_registry, settings.compatibility or "NONE")
    if settings.backend == "apicurio":
        return ApicurioClient.from_settings(settings)
    return ConfluentCompatClient.from_settings(settings)


def serde_from_settings(settings: RegistrySettings, aws: AwsSettings) -> AvroSerde:
    return AvroSerde(schema_registry(settings, aws), WireFormat(settings.written_wire_format),
                     SubjectStrategy(settings.subject_strategy), compress=settings.glue_compression)
