"""The README and docker-compose.yml stay true to the code."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel

from pipeline.config import PipelineConfig, StackSettings
from tests.conftest import REPO


def _settings(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names += _settings(annotation, f"{prefix}{name}.")
        else:
            names.append(prefix + name)
    return names


def test_readme_documents_every_setting() -> None:
    readme = (REPO / "README.md").read_text()
    missing = [name for name in _settings(PipelineConfig) if f"`{name}`" not in readme]
    assert missing == [], f"settings missing from the README's configuration reference: {missing}"


def test_readme_names_only_real_settings() -> None:
    readme = (REPO / "README.md").read_text()
    reference = readme.split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z0-9_.]+)` \|", reference, re.MULTILINE)
    assert documented and set(documented) == set(_settings(PipelineConfig))


def test_compose_describes_the_same_stack() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"kafka", "registry", "moto", "pipeline"} <= set(services)
    defaults = StackSettings()
    published = {name: {int(p.split(":")[0]) for p in svc.get("ports", [])} for name, svc in services.items()}
    assert defaults.kafka_port in published["kafka"]
    assert defaults.registry_port in published["registry"]
    assert defaults.moto_port in published["moto"]
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    for variable in services["pipeline"]["environment"]:
        assert variable.startswith("PIPELINE_")
        keys = variable.removeprefix("PIPELINE_").lower().split("__")
        model: type[BaseModel] = PipelineConfig
        for key in keys[:-1]:
            model = model.model_fields[key].annotation  # type: ignore[assignment]
        assert keys[-1] in model.model_fields, f"{variable} is not a setting"
    assert Path(REPO / services["pipeline"].get("build", ".") / "Dockerfile").is_file()
