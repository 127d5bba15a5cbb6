"""HTTP plumbing shared by the registry REST clients (Confluent-compatible and Apicurio native).

One pooled session with timeouts, retries with backoff on 5xx and connection errors (never on 4xx: a refusal
does not change by asking again), basic or bearer auth and TLS options; and one way to turn a refusal into a
RegistryError that names what was asked and the registry's address (without its credentials).
"""

from __future__ import annotations

from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from pipeline.config.redaction import redact_text
from pipeline.config.settings import RegistrySettings
from registry.backend import RegistryError

RETRIED_STATUSES = (500, 502, 503, 504)


def registry_session(settings: RegistrySettings) -> requests.Session:
    session = requests.Session()
    retry = Retry(total=5, connect=5, read=3, backoff_factor=0.3, status_forcelist=RETRIED_STATUSES,
                  allowed_methods=None,  # registering a schema is idempotent, so POST may be retried too
                  raise_on_status=False)  # the last 5xx comes back as a response and is reported as such
    adapter = HTTPAdapter(max_retries=retry, pool_connections=4, pool_maxsize=16)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.verify = settings.verify_tls
    session.cert = settings.client_certificate
    if settings.token:
        session.headers["Authorization"] = f"Bearer {settings.token.get_secret_value()}"
    elif settings.username and settings.password:
        session.auth = (settings.username, settings.password.get_secret_value())
    return session


class RestClient:
    """Requests against one base URL; every failure is a RegistryError naming `what` and the address."""

    def __init__(self, base_url: str, session: requests.Session, timeout_s: float, content_type: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.address = redact_text(self.base_url)  # what messages show: `user:pass@` masked
        self._session = session
        self._timeout = timeout_s
        self._headers = {"Content-Type": content_type}

    def call(self, method: str, path: str, what: str, **kwargs: Any) -> requests.Response:
        try:
            response = self._session.request(method, self.base_url + path, timeout=self._timeout,
                                             headers=self._headers, **kwargs)
        except requests.RequestException as exc:
            message = f"schema registry at {self.address} is unreachable ({what}): {exc}"
            raise RegistryError(redact_text(message)) from None
        if not response.ok:
            raise RegistryError(redact_text(self._refusal(response, what)), response.status_code)
        return response

    def _refusal(self, response: requests.Response, what: str) -> str:
        try:
            problem = response.json()
        except ValueError:
            problem = {}
        problem = problem if isinstance(problem, dict) else {}
        name = str(problem.get("name", ""))
        detail = problem.get("message") or problem.get("detail") or response.text[:300]
        # ccompat says 409; Apicurio's native API says 400 RuleViolationException (409 there is "already exists")
        if name == "RuleViolationException" or (response.status_code == 409 and "AlreadyExists" not in name):
            return f"schema registry at {self.address} rejected the schema for {what} as incompatible: {detail}"
        if response.status_code == 422:
            return f"schema registry at {self.address} rejected the schema for {what} as invalid: {detail}"
        return f"schema registry at {self.address} refused {what}: HTTP {response.status_code} {detail}"
