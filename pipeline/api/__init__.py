"""The public Python API: the mirror's step as one call in any Spark job (`apply_changes`, docs/api.md)."""

from pipeline.api.apply import Applied, apply_changes

__all__ = ["Applied", "apply_changes"]
