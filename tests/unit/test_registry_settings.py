"""The registry settings: per-record framing by default, what a serializer writes, which registries are Apicurio."""

from __future__ import annotations

import pytest

from pipeline.config.settings import ConfigError, load_config


def _registry(*overrides: str):
    return load_config(overrides=list(overrides), environ={}).registry


def test_the_framing_is_detected_per_record_by_default_and_producers_write_their_backends_frame() -> None:
    registry = _registry()
    assert (registry.wire_format, registry.payload_id, registry.unknown_id_retry_s) == ("auto", "auto", 0.5)
    assert registry.written_wire_format == "confluent"
    assert _registry("registry.backend=glue").written_wire_format == "glue"
    assert _registry("registry.backend=apicurio", "registry.wire_format=apicurio-legacy").written_wire_format == \
        "apicurio-legacy"


@pytest.mark.parametrize(("overrides", "root"), [
    ([], "http://127.0.0.1:8080"),  # ccompat through the embedded Apicurio's /apis/ccompat/v7
    (["registry.url=https://reg.example/apis/ccompat/v7"], "https://reg.example"),
    (["registry.backend=apicurio", "registry.url=https://reg.example/apis/registry/v3"], "https://reg.example"),
    (["registry.url=https://sr.example", "registry.ccompat_path="], None),  # a Confluent Schema Registry
    (["registry.backend=glue"], None),
])
def test_the_native_api_that_tells_id_kinds_apart_is_found_only_on_an_apicurio(overrides: list[str],
                                                                               root: str | None) -> None:
    assert _registry(*overrides).apicurio_root == root


@pytest.mark.parametrize(("overrides", "message"), [
    (["registry.url=https://sr.example", "registry.ccompat_path=", "registry.payload_id=global"],
     "registry.payload_id = 'global' names an Apicurio id kind, but the registry is not an Apicurio"),
    (["registry.backend=glue", "registry.payload_id=content"], "names an Apicurio id kind"),
    (["registry.backend=ccompat", "registry.wire_format=glue"], "go together"),
    (["registry.glue_compression=true"], "registry.glue_compression needs registry.wire_format = 'glue'"),
])
def test_settings_that_cannot_work_together_are_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _registry(*overrides)


def test_glue_compression_goes_with_auto_detection_on_glue() -> None:
    assert _registry("registry.backend=glue", "registry.glue_compression=true").written_wire_format == "glue"
