"""The CDC lakehouse pipeline: CLI, configuration, Spark session, embedded stack and stages.

`from pipeline import apply_changes` is the public API (`pipeline/api`, docs/api.md), imported on first use so
that importing the package for its CLI or settings does not load the stages.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "apply_changes":
        from pipeline.api import apply_changes

        return apply_changes
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
