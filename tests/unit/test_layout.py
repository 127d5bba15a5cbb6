"""The folder names inside `pipeline/` are the architecture: every module lives in a package named for its role."""

from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"


def test_no_module_sits_directly_under_pipeline() -> None:
    loose = sorted(p.name for p in PIPELINE.glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
    assert loose == [], f"move {loose} into the package for its role (cli, config, stages, sources, sql, ops, runtime, stack)"


def test_every_package_says_what_it_owns() -> None:
    packages = [p for p in PIPELINE.rglob("__init__.py") if "__pycache__" not in p.parts]
    undocumented = [str(p.parent.relative_to(PIPELINE)) for p in packages if not p.read_text().lstrip().startswith('"""')]
    assert undocumented == []
