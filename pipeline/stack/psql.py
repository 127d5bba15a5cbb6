"""SQL against the stack's PostgreSQL through `psql`, the client that ships with the server binaries.

No Python driver is needed: statements go in on stdin (stopping at the first error), and query results come
back as one JSON document built by PostgreSQL itself, so every value keeps its type's text form.
"""

from __future__ import annotations

import json
import subprocess
from decimal import Decimal
from typing import Any

from pipeline.config.settings import StackSettings
from pipeline.stack.postgres import SUPERUSER, find_bin_dir


class SqlError(RuntimeError):
    """A statement failed; the message carries PostgreSQL's own error."""


class Psql:
    def __init__(self, stack: StackSettings, database: str | None = None) -> None:
        self.stack = stack
        self.database = database or stack.postgres_database
        self.binary = find_bin_dir(stack.postgres_bin) / "psql"

    def execute(self, sql: str) -> str:
        """Run statements (autocommit each, unless the script says BEGIN/COMMIT); return psql's output."""
        cmd = [str(self.binary), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.stack.host,
               "-p", str(self.stack.postgres_port), "-U", SUPERUSER, "-d", self.database]
        done = subprocess.run(cmd, input=sql, capture_output=True, text=True, env={"PGTZ": "UTC", "PATH": ""})
        if done.returncode != 0:
            raise SqlError(f"psql on {self.stack.host}:{self.stack.postgres_port}/{self.database} failed: "
                           f"{done.stderr.strip()}")
        return done.stdout

    def rows(self, query: str) -> list[dict[str, Any]]:
        """The query's rows as dicts; numbers are Decimals, so numeric values compare exactly."""
        text = self.execute(f"SELECT coalesce(json_agg(q), '[]'::json) FROM ({query}) AS q;")
        return json.loads(text, parse_float=Decimal)
