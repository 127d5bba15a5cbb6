"""A client for the Confluent-compatible schema registry REST API.

Speaks to Confluent Schema Registry, Apicurio (`/apis/ccompat/v7`), Karapace and Redpanda alike, through the
shared pooled, retrying, authenticated session (`registry.http`), with an id -> schema cache so a hot path
asks the registry once per id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from pipeline.config.settings import RegistrySettings
from registry.backend import DEFAULT_COMPATIBILITY, RegistryError, SchemaCache, schema_text
from registry.http import RestClient, registry_session

__all__ = ["APICURIO_CCOMPAT_PATH", "ConfluentCompatClient", "RegisteredSchema", "RegistryError"]

APICURIO_CCOMPAT_PATH = "/apis/ccompat/v7"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
SUBJECTS_PAGE = 1000  # Apicurio's ccompat API lists at most 1,000 subjects a call by default


@dataclass(frozen=True)
class RegisteredSchema:
    id: int
    version: int
    schema: str


class ConfluentCompatClient:
    def __init__(self, base_url: str, session: requests.Session, timeout_s: float = 10.0,
                 compatibility: str | None = DEFAULT_COMPATIBILITY) -> None:
        """`compatibility` is set on subjects this client creates; None leaves the registry's default."""
        self._rest = RestClient(base_url, session, timeout_s, _CONTENT_TYPE)
        self.address = self._rest.address
        self._compatibility = compatibility
        self._by_id = SchemaCache()
        self._known_subjects: set[str] = set()

    @classmethod
    def from_settings(cls, settings: RegistrySettings, compatibility: str | None = None) -> ConfluentCompatClient:
        """`registry.url` plus `registry.ccompat_path` (Apicurio's `/apis/ccompat/v7`; empty for a Confluent
        Schema Registry root), unless the URL already names an API path; `compatibility` overrides the setting."""
        url = (settings.url or "").rstrip("/")
        if "/apis/" not in url:
            url += settings.ccompat_path
        return cls(url, registry_session(settings), settings.timeout_s, compatibility or settings.compatibility)

    def register(self, subject: str, schema: dict[str, Any] | str, schema_type: str = "AVRO") -> int:
        """Register (or find) `schema` under `subject`; returns its id.

        A subject this call creates gets the client's compatibility level first, so the registry checks every
        later version against it; an existing subject keeps the level its owner chose.
        """
        text = schema_text(schema)
        if self._compatibility and subject not in self._known_subjects and not self._exists(subject):
            self.set_compatibility(subject, self._compatibility)
        body: dict[str, Any] = {"schema": text}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        schema_id = int(self._call("POST", f"/subjects/{subject}/versions", f"subject {subject!r}", json=body)["id"])
        self._known_subjects.add(subject)
        self._by_id.put(schema_id, text)
        return schema_id

    def set_compatibility(self, subject: str, level: str) -> None:
        """BACKWARD, FORWARD, FULL (each also _TRANSITIVE) or NONE; allowed before the subject exists."""
        self._call("PUT", f"/config/{subject}", f"subject {subject!r}", json={"compatibility": level})

    def compatibility(self, subject: str) -> str:
        return str(self._call("GET", f"/config/{subject}", f"subject {subject!r}")["compatibilityLevel"])

    def latest(self, subject: str) -> RegisteredSchema:
        found = self._call("GET", f"/subjects/{subject}/versions/latest", f"subject {subject!r}")
        latest = RegisteredSchema(int(found["id"]), int(found["version"]), found["schema"])
        self._by_id.put(latest.id, latest.schema)
        return latest

    def schema(self, schema_id: int) -> str:
        """The schema text for an id, from the cache after the first call."""
        return self._by_id.get(schema_id, lambda: self._call("GET", f"/schemas/ids/{schema_id}",
                                                              f"schema id {schema_id}")["schema"])

    def subjects(self) -> list[str]:
        """Every subject. Apicurio's API answers `SUBJECTS_PAGE` at a time (`offset`, `limit`); Confluent's
        ignores both and answers all, which the second page then adds nothing to."""
        found: dict[str, None] = {}
        while True:
            page = self._call("GET", "/subjects", "subjects", params={"offset": len(found), "limit": SUBJECTS_PAGE})
            known = len(found)
            found.update(dict.fromkeys(page))
            if len(page) < SUBJECTS_PAGE or len(found) == known:
                return list(found)

    def _exists(self, subject: str) -> bool:
        try:
            self._call("GET", f"/subjects/{subject}/versions", f"subject {subject!r}")
        except RegistryError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _call(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        return self._rest.call(method, path, what, **kwargs).json()
