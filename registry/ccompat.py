"""A client for the Confluent-compatible schema registry REST API.

Speaks to Confluent Schema Registry, Apicurio (`/apis/ccompat/v7`), Karapace and Redpanda alike: pooled
connections, timeouts, retries with backoff on 5xx and connection errors (never on 4xx), basic or bearer
auth, and an id -> schema cache so a hot path asks the registry once per id.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from pipeline.config import RegistrySettings

APICURIO_CCOMPAT_PATH = "/apis/ccompat/v7"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(RuntimeError):
    """The registry refused a request or could not be reached; names the subject or id and the address."""


class ConfluentCompatClient:
    def __init__(self, base_url: str, session: requests.Session, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._session = session
        self._timeout = timeout_s
        self._by_id: dict[int, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: RegistrySettings) -> ConfluentCompatClient:
        """The embedded Apicurio's ccompat API when the URL is a bare Apicurio root."""
        url = (settings.url or "").rstrip("/")
        if "/apis/" not in url:
            url += APICURIO_CCOMPAT_PATH
        return cls(url, registry_session(settings), settings.timeout_s)

    def register(self, subject: str, schema: dict[str, Any] | str, schema_type: str = "AVRO") -> int:
        """Register (or find) `schema` under `subject`; returns its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        body: dict[str, Any] = {"schema": text}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        schema_id = int(self._call("POST", f"/subjects/{subject}/versions", f"subject {subject!r}", json=body)["id"])
        with self._lock:
            self._by_id[schema_id] = text
        return schema_id

    def schema(self, schema_id: int) -> str:
        """The schema text for an id, from the cache after the first call."""
        with self._lock:
            cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        text = self._call("GET", f"/schemas/ids/{schema_id}", f"schema id {schema_id}")["schema"]
        with self._lock:
            self._by_id[schema_id] = text
        return text

    def subjects(self) -> list[str]:
        return list(self._call("GET", "/subjects", "subjects"))

    def _call(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        url = self.base_url + path
        try:
            response = self._session.request(method, url, timeout=self._timeout,
                                             headers={"Content-Type": _CONTENT_TYPE}, **kwargs)
        except requests.RequestException as exc:
            raise RegistryError(f"schema registry at {self.base_url} is unreachable ({what}): {exc}") from None
        if not response.ok:
            raise RegistryError(f"schema registry at {self.base_url} refused {what}: "
                                f"HTTP {response.status_code} {response.text[:300]}")
        return response.json()


def registry_session(settings: RegistrySettings) -> requests.Session:
    session = requests.Session()
    retry = Retry(total=5, connect=5, read=3, backoff_factor=0.3, status_forcelist=(500, 502, 503, 504),
                  allowed_methods=None)  # registering a schema is idempotent, so POST may be retried too
    adapter = HTTPAdapter(max_retries=retry, pool_connections=4, pool_maxsize=16)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.verify = settings.verify_tls
    if settings.token:
        session.headers["Authorization"] = f"Bearer {settings.token.get_secret_value()}"
    elif settings.username and settings.password:
        session.auth = (settings.username, settings.password.get_secret_value())
    return session
