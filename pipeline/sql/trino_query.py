"""Queries on the stack's Trino, the engine Athena is built on, with its failures said so a user can act on them:
Trino not answering names Trino and its address; a query Trino cannot run names what it read and Trino's own
error (the one Athena would give, docs/sql-access.md)."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import trino.exceptions

from pipeline.config.settings import PipelineConfig
from pipeline.stack.trino import connect


class TrinoError(RuntimeError):
    """Trino is down, or could not read a table or view; the message says which and why."""


def fetch(cfg: PipelineConfig, sql: str, what: str) -> tuple[list[str], list[list[Any]]]:
    """The column names and rows of `sql` on Trino; `what` names the table or view it reads, for the message."""
    address = f"http://{cfg.stack.host}:{cfg.stack.trino_port}"
    try:
        with closing(connect(cfg, max_attempts=1)) as connection:
            cursor = connection.cursor()
            cursor.execute(sql)
            rows = cursor.fetchall()
            columns = [d[0] for d in cursor.description or ()]  # a statement (CREATE VIEW) has no columns
    except trino.exceptions.TrinoQueryError as exc:
        raise TrinoError(f"Trino ({address}) could not read {what}: {exc.error_name}: {exc.message}") from None
    except (trino.exceptions.OperationalError, trino.exceptions.HttpError) as exc:
        raise TrinoError(f"Trino at {address} does not answer ({exc}); start it with `python -m pipeline stack up "
                         "--with trino`, or set stack.host / stack.trino_port to a running one") from None
    return columns, rows
