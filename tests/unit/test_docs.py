"""The README, docs/ and docker-compose.yml stay true to the code."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml
from pydantic import BaseModel

from pipeline.cli.parser import build_parser
from pipeline.config.settings import PipelineConfig, StackSettings
from tests.conftest import REPO

DOCS = REPO / "docs"
REFERENCE = DOCS / "configuration.md"


def _settings(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names += _settings(annotation, f"{prefix}{name}.")
        else:
            names.append(prefix + name)
    return names


def _docs_text() -> str:
    return "\n".join(page.read_text() for page in sorted(DOCS.glob("*.md")))


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    """Every command of the CLI, nested ones as `stack up` or `dead-letters list`."""
    names = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = _subcommands(sub, f"{prefix}{name} ")
                names += nested or [prefix + name]
    return names


def test_reference_documents_every_setting() -> None:
    reference = REFERENCE.read_text()
    missing = [name for name in _settings(PipelineConfig) if f"`{name}`" not in reference]
    assert missing == [], f"settings missing from docs/configuration.md: {missing}"


def test_reference_names_only_real_settings() -> None:
    documented = re.findall(r"^\| `([a-z0-9_.]+)` \|", REFERENCE.read_text(), re.MULTILINE)
    assert documented and set(documented) == set(_settings(PipelineConfig))


def test_docs_name_every_setting() -> None:
    docs = _docs_text()
    missing = [name for name in _settings(PipelineConfig) if f"`{name}`" not in docs]
    assert missing == [], f"settings docs/ does not name: {missing}"


def test_docs_or_readme_show_every_command() -> None:
    text = (REPO / "README.md").read_text() + _docs_text()
    commands = _subcommands(build_parser())
    assert {"setup", "stack up", "stack logs", "dead-letters list", "dead-letters replay", "mirror"} <= set(commands)
    missing = [name for name in commands if f"python -m pipeline {name}" not in text
               and not re.search(rf"`{re.escape(name)}[` ]", text)]
    assert missing == [], f"commands neither the README nor docs/ show: {missing}"


def test_readme_is_a_front_page() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\((docs/[^)#]+\.md)(?:#[^)]*)?\)", readme)
    assert links, "the README links no docs/ page"
    assert [link for link in links if not (REPO / link).is_file()] == []
    pages = {f"docs/{page.name}" for page in DOCS.glob("*.md")}
    assert pages - set(links) == set(), "every docs/ page is linked from the README"


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


def test_compose_profiles_add_trino_with_the_stacks_catalogs_and_a_spark_cluster() -> None:
    from pipeline.config.settings import load_config
    from pipeline.stack.trino import CATALOG, DELTA_CATALOG, Trino

    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services, configs = compose["services"], compose["configs"]
    moto = ["aws.endpoint_url=http://moto:5000", "aws.access_key_id=test", "aws.secret_access_key=test"]
    trino = Trino(load_config(overrides=moto, environ={}))
    mounted = {Path(c["target"]).stem: c["source"] for c in services["trino"]["configs"]}
    for catalog, expected in ((CATALOG, trino._catalog()), (DELTA_CATALOG, trino._delta_catalog())):
        written = dict(line.split("=", 1) for line in configs[mounted[catalog]]["content"].splitlines())
        assert written == expected, catalog
    defaults = StackSettings()
    master = services["spark-master"]
    assert master["entrypoint"][-1] == "org.apache.spark.deploy.master.Master"
    assert {f"{defaults.spark_master_port}:{defaults.spark_master_port}",
            f"{defaults.spark_master_ui_port}:{defaults.spark_master_ui_port}"} <= set(master["ports"])
    workers = [svc for name, svc in services.items() if name.startswith("spark-worker-")]
    assert len(workers) == defaults.spark_workers
    assert all(w["command"][-1] == f"spark://spark-master:{defaults.spark_master_port}" for w in workers)
    assert all(svc["profiles"] for name, svc in services.items() if name == "trino" or name.startswith("spark-"))


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading).strip().lower().replace(" ", "-") for heading in headings}


def test_docs_links_resolve() -> None:
    broken = []
    for page in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)#:\s]*\.md)?(?:#([^)\s]+))?\)", page.read_text()):
            linked = (page.parent / target) if target else page
            if not linked.is_file() or (anchor and anchor not in _anchors(linked.read_text())):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert broken == []


def test_every_make_target_the_docs_name_exists() -> None:
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text(), re.MULTILINE))
    text = "\n".join([(REPO / "README.md").read_text(), _docs_text()])
    named = set(re.findall(r"(?:`|^|TEST_WORKERS=\d )make ([a-z][\w-]*)", text, re.MULTILINE))  # code, not prose
    assert named - targets == set()
    assert {"test", "unit", "test-stack-up", "test-stack-down"} <= named  # the test loop docs/testing.md gives
