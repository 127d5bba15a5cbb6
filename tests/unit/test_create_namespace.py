"""`create_namespace`: a create that fails because another session created the namespace first is no error."""

from __future__ import annotations

import pytest

from tables.lake import create_namespace


class LateCatalog:
    """A session whose create fails (a lost race, or a real fault) and whose catalog then has, or lacks, it."""

    def __init__(self, exists_after: bool) -> None:
        self.exists_after = exists_after
        self.catalog = self
        self.statements: list[str] = []

    def sql(self, statement: str) -> None:
        self.statements.append(statement)
        raise RuntimeError("UNIQUE constraint failed: iceberg_namespace_properties")

    def databaseExists(self, name: str) -> bool:  # noqa: N802 (pyspark's name)
        return self.exists_after


def test_a_create_lost_to_another_session_is_no_error() -> None:
    session = LateCatalog(exists_after=True)
    create_namespace(session, "lake", "mirror")  # type: ignore[arg-type]
    assert session.statements == ["CREATE NAMESPACE IF NOT EXISTS `lake`.`mirror`"]


def test_a_create_that_fails_for_another_reason_is_raised() -> None:
    with pytest.raises(RuntimeError, match="UNIQUE constraint"):
        create_namespace(LateCatalog(exists_after=False), "lake", "mirror")  # type: ignore[arg-type]
