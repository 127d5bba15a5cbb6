"""Kafka Connect's REST API: put a connector's configuration, wait for it to run, delete it."""

from __future__ import annotations

import time
from typing import Any, Callable

import requests


class ConnectorError(RuntimeError):
    """A connector failed or did not start in time; the message carries the worker's own trace."""


class ConnectApi:
    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def put(self, name: str, config: dict[str, str]) -> None:
        """Create the connector, or replace its configuration (Connect restarts it)."""
        self._call("PUT", f"/connectors/{name}/config", json=config)

    def delete(self, name: str) -> bool:
        """True when it existed."""
        return self._call("DELETE", f"/connectors/{name}", missing_ok=True) is not None

    def status(self, name: str) -> dict[str, Any] | None:
        return self._call("GET", f"/connectors/{name}/status", missing_ok=True)

    def states(self, name: str) -> str:
        """The connector's and its tasks' states, comma-separated ("not registered" when it is not)."""
        status = self.status(name)
        return _states(status) if status is not None else "not registered"

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The source offsets Connect has committed for the connector, one per source partition (`[]` before the
        first commit). Connect commits a record's offset only once it and every record before it were acked."""
        found = self._call("GET", f"/connectors/{name}/offsets", missing_ok=True)
        return [entry["offset"] for entry in (found or {}).get("offsets", []) if entry.get("offset")]

    def wait_running(self, name: str, timeout_s: float = 60.0, ready: Callable[[], bool] = lambda: True) -> None:
        """Until the connector and all its tasks are RUNNING and `ready()` holds; a FAILED one raises at once."""
        deadline = time.monotonic() + timeout_s
        state = "not registered"
        while time.monotonic() < deadline:
            status = self.status(name)
            if status is not None:
                units = [status["connector"], *status.get("tasks", [])]
                failed = [u for u in units if u["state"] == "FAILED"]
                if failed:
                    raise ConnectorError(f"connector {name} failed on {self.url}: {failed[0].get('trace', '')[:2000]}")
                state = _states(status)
                if status.get("tasks") and all(u["state"] == "RUNNING" for u in units) and ready():
                    return
            time.sleep(0.5)
        raise ConnectorError(f"connector {name} on {self.url} was not ready within {timeout_s:.0f} s "
                             f"(connector, tasks: {state}); see the Connect worker's log")

    def _call(self, method: str, path: str, missing_ok: bool = False, **kwargs: Any) -> Any:
        try:
            response = requests.request(method, self.url + path, timeout=self.timeout_s, **kwargs)
        except requests.RequestException as exc:
            raise ConnectorError(f"Kafka Connect at {self.url} is not reachable ({exc}): "
                                 "start it with `python -m pipeline stack up --with postgres`") from None
        if missing_ok and response.status_code == 404:
            return None
        if not response.ok:
            raise ConnectorError(f"{method} {self.url}{path}: HTTP {response.status_code} {response.text[:1000]}")
        return response.json() if response.content else {}


def _states(status: dict[str, Any]) -> str:
    return ", ".join(unit["state"] for unit in [status["connector"], *status.get("tasks", [])])
