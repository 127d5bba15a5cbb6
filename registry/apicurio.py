"""A client for Apicurio Registry 3.x's native API (`/apis/registry/v3`).

Artifacts live in groups (the ccompat API uses the group `default`, so a ccompat subject is the artifact of
the same id there). Every version has a global id (unique across the registry, what Apicurio's legacy 8-byte
framing carries) and a content id (shared by identical content, what Apicurio 3.x's Confluent framing
carries). Both resolve to schema text through one cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import requests

from pipeline.config.settings import RegistrySettings
from registry.backend import DEFAULT_COMPATIBILITY, RegistryError, SchemaCache, schema_text
from registry.http import RestClient, registry_session

APICURIO_NATIVE_PATH = "/apis/registry/v3"
DEFAULT_GROUP = "default"
IdKind = Literal["globalId", "contentId"]
_ID_PATHS: dict[IdKind, str] = {"globalId": "/ids/globalIds", "contentId": "/ids/contentIds"}


@dataclass(frozen=True)
class ArtifactVersion:
    group: str
    artifact_id: str
    version: str
    global_id: int
    content_id: int

    @classmethod
    def parse(cls, meta: dict[str, Any]) -> ArtifactVersion:
        return cls(meta.get("groupId") or DEFAULT_GROUP, meta["artifactId"], meta["version"], int(meta["globalId"]),
                   int(meta["contentId"]))


class ApicurioClient:
    """`ids` chooses which id `register` returns and `schema` resolves (the id the wire format carries);
    `compatibility` is the COMPATIBILITY rule set on artifacts this client creates (None sets no rule)."""

    def __init__(self, base_url: str, session: requests.Session, timeout_s: float = 10.0,
                 group: str = DEFAULT_GROUP, ids: IdKind = "globalId",
                 compatibility: str | None = DEFAULT_COMPATIBILITY) -> None:
        self._rest = RestClient(base_url, session, timeout_s, "application/json")
        self.address = self._rest.address
        self.group = group
        self.ids = ids
        self._compatibility = compatibility
        self._by_id = SchemaCache()
        self._known_artifacts: set[tuple[str, str]] = set()

    @classmethod
    def from_settings(cls, settings: RegistrySettings, ids: IdKind | None = None) -> ApicurioClient:
        """The native API of the Apicurio that `registry.url` names (a bare root or any of its /apis/ paths).

        The id on the wire follows the wire format: global ids in the legacy 8-byte frame, content ids in the
        Confluent frame (Apicurio 3.x's default); `ids` overrides.
        """
        root = (settings.url or "").rstrip("/").split("/apis/")[0]
        ids = ids or ("globalId" if settings.written_wire_format == "apicurio-legacy" else "contentId")
        return cls(root + APICURIO_NATIVE_PATH, registry_session(settings), settings.timeout_s,
                   settings.group, ids, settings.compatibility)

    def create_version(self, artifact_id: str, schema: dict[str, Any] | str,
                       group: str | None = None) -> ArtifactVersion:
        """Create the AVRO artifact, or add `schema` as its next version, or find the version that has it
        (compared canonically, so the same schema in another layout is found, not added again).

        An artifact this call creates gets the client's COMPATIBILITY rule; an existing one keeps its rules.
        """
        group = group or self.group
        text = schema_text(schema)
        body = {"artifactId": artifact_id, "artifactType": "AVRO",
                "firstVersion": {"content": {"content": text, "contentType": "application/json"}}}
        what = f"artifact {group}/{artifact_id}"
        created = None
        if self._compatibility and (group, artifact_id) not in self._known_artifacts:
            try:  # ifExists=FAIL (the default) tells whether this call created the artifact
                created = self._rest.call("POST", f"/groups/{group}/artifacts", what, json=body).json()
            except RegistryError as exc:
                if exc.status != 409:
                    raise
            else:
                self.set_compatibility(artifact_id, self._compatibility, group)
        if created is None:
            created = self._rest.call("POST", f"/groups/{group}/artifacts", what, json=body,
                                      params={"ifExists": "FIND_OR_CREATE_VERSION", "canonical": "true"}).json()
        self._known_artifacts.add((group, artifact_id))
        version = ArtifactVersion.parse(created["version"])
        self._by_id.put(("globalId", version.global_id), text)
        self._by_id.put(("contentId", version.content_id), text)
        return version

    def set_compatibility(self, artifact_id: str, level: str, group: str | None = None) -> None:
        """Set the artifact's COMPATIBILITY rule, creating the rule when the artifact has none."""
        group = group or self.group
        rules, what = f"/groups/{group}/artifacts/{artifact_id}/rules", f"artifact {group}/{artifact_id}"
        rule = {"ruleType": "COMPATIBILITY", "config": level}
        try:
            self._rest.call("PUT", f"{rules}/COMPATIBILITY", what, json=rule)
        except RegistryError as exc:
            if exc.status != 404:
                raise
            self._rest.call("POST", rules, what, json=rule)

    def latest(self, artifact_id: str, group: str | None = None) -> ArtifactVersion:
        group = group or self.group
        path = f"/groups/{group}/artifacts/{artifact_id}/versions/branch=latest"
        return ArtifactVersion.parse(self._rest.call("GET", path, f"artifact {group}/{artifact_id}").json())

    def versions(self, artifact_id: str, group: str | None = None, page: int = 500) -> list[ArtifactVersion]:
        """Every version of the artifact, oldest first; none when there is no such artifact."""
        group = group or self.group
        path, what = f"/groups/{group}/artifacts/{artifact_id}/versions", f"artifact {group}/{artifact_id}"
        found: list[ArtifactVersion] = []
        while True:
            try:
                listed = self._rest.call("GET", path, what, params={"offset": len(found), "limit": page,
                                                                     "orderby": "globalId", "order": "asc"}).json()
            except RegistryError as exc:
                if exc.status == 404:
                    return []
                raise
            found += [ArtifactVersion.parse({"groupId": group, "artifactId": artifact_id, **meta})
                      for meta in listed["versions"]]
            if not listed["versions"] or len(found) >= int(listed["count"]):
                return found

    def group_versions(self, group: str | None = None, page: int = 500, max_pages: int | None = None
                       ) -> dict[str, list[ArtifactVersion]] | None:
        """Every version of every artifact of the group, by artifact, oldest first: a search a page, where
        `versions` asks once an artifact (a batch of a whole database asks for hundreds of subjects). None when
        that takes more than `max_pages` pages (known from the first)."""
        group = group or self.group
        found: list[ArtifactVersion] = []
        while True:
            listed = self._rest.call("GET", "/search/versions", f"the versions of group {group}",
                                     params={"groupId": group, "offset": len(found), "limit": page,
                                             "orderby": "globalId", "order": "asc"}).json()
            if max_pages is not None and -(-int(listed["count"]) // page) > max_pages:
                return None
            found += [ArtifactVersion.parse({"groupId": group, **meta}) for meta in listed["versions"]]
            if not listed["versions"] or len(found) >= int(listed["count"]):
                break
        by_artifact: dict[str, list[ArtifactVersion]] = {}
        for version in found:
            by_artifact.setdefault(version.artifact_id, []).append(version)
        return by_artifact

    def by_global_id(self, global_id: int) -> str:
        return self._content("globalId", global_id)

    def by_content_id(self, content_id: int) -> str:
        return self._content("contentId", content_id)

    def holds(self, artifact_id: str, kind: IdKind, schema_id: int, group: str | None = None) -> bool:
        """Whether a version of the artifact has this global or content id (a search, so no paging)."""
        group = group or self.group
        params = {"groupId": group, "artifactId": artifact_id, kind: schema_id, "limit": 1}
        found = self._rest.call("GET", "/search/versions", f"artifact {group}/{artifact_id}", params=params).json()
        return int(found["count"]) > 0

    def register(self, subject: str, schema: dict[str, Any] | str) -> int:
        """The serializer's view: the subject is the artifact id in this client's group."""
        version = self.create_version(subject, schema)
        return version.global_id if self.ids == "globalId" else version.content_id

    def schema(self, schema_id: int) -> str:
        return self._content(self.ids, schema_id)

    def _content(self, kind: IdKind, schema_id: int) -> str:
        what = f"schema {kind} {schema_id}"
        return self._by_id.get((kind, schema_id),
                               lambda: self._rest.call("GET", f"{_ID_PATHS[kind]}/{schema_id}", what).text)
