"""The retry policy and error reporting of the registry REST clients, against a scripted local HTTP server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from urllib3.util.retry import Retry

from pipeline.config.settings import RegistrySettings
from registry.apicurio import ApicurioClient
from registry.ccompat import ConfluentCompatClient, RegistryError


class Script:
    """Responses to play in order (the last one repeats) and the requests that came in."""

    def __init__(self) -> None:
        self.responses: list[tuple[int, object]] = [(200, {})]
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def play(self, *responses: tuple[int, object]) -> None:
        self.responses = list(responses)


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy (which failures are retried, how often) is under test here, not the waiting."""
    monkeypatch.setattr(Retry, "get_backoff_time", lambda self: 0)


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            script.requests.append((self.command, self.path, dict(self.headers)))
            status, body = script.responses.pop(0) if len(script.responses) > 1 else script.responses[0]
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    httpd.shutdown()
    httpd.server_close()


def client(url: str, **settings: object) -> ConfluentCompatClient:
    return ConfluentCompatClient.from_settings(RegistrySettings(url=url + "/apis/ccompat/v7", **settings))


def test_503_is_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.play((503, {"message": "warming up"}), (200, {"schema": '"string"'}))
    assert client(url).schema(7) == '"string"'
    assert [path for _, path, _ in script.requests] == ["/apis/ccompat/v7/schemas/ids/7"] * 2


def test_404_is_not_retried_and_names_the_id_and_address(server: tuple[str, Script]) -> None:
    url, script = server
    script.play((404, {"error_code": 40403, "message": "Schema 7 not found"}))
    with pytest.raises(RegistryError, match=rf"registry at {url}/apis/ccompat/v7 refused schema id 7: HTTP 404 "
                                            "Schema 7 not found") as caught:
        client(url).schema(7)
    assert caught.value.status == 404 and len(script.requests) == 1


def test_a_schema_is_fetched_once_per_id(server: tuple[str, Script]) -> None:
    url, script = server
    script.play((200, {"schema": '"long"'}))
    registry = client(url)
    assert registry.schema(3) == registry.schema(3) == '"long"'
    assert len(script.requests) == 1


def test_a_5xx_that_persists_is_reported(server: tuple[str, Script]) -> None:
    url, script = server
    script.play((500, {"message": "boom"}))
    with pytest.raises(RegistryError, match="refused subjects: HTTP 500 boom"):
        client(url).subjects()
    assert len(script.requests) == 6  # the first try and five retries


@pytest.mark.parametrize(("status", "problem", "verdict"), [
    (409, {"error_code": 409, "message": "Incompatible artifact: s [AVRO]"}, "as incompatible: Incompatible artifact"),
    (422, {"error_code": 42201, "message": "Invalid schema"}, "as invalid: Invalid schema"),
])
def test_rejected_schemas_name_the_subject_and_address(server: tuple[str, Script], status: int, problem: dict,
                                                       verdict: str) -> None:
    url, script = server
    script.play((200, {}), (status, problem))  # the subject exists; registering is refused
    with pytest.raises(RegistryError, match=rf"registry at {url}/apis/ccompat/v7 rejected the schema for "
                                            rf"subject 's' {verdict}"):
        client(url).register("s", '"string"')


def test_apicurio_rule_violation_is_an_incompatibility(server: tuple[str, Script]) -> None:
    url, script = server
    script.play((409, {"name": "ArtifactAlreadyExistsException"}),
                (400, {"name": "RuleViolationException", "detail": "Incompatible artifact: g/a"}))
    with pytest.raises(RegistryError, match=rf"registry at {url}/apis/registry/v3 rejected the schema for artifact "
                                            "default/a as incompatible: Incompatible artifact"):
        ApicurioClient.from_settings(RegistrySettings(url=url)).register("a", '"string"')


def test_a_new_subject_gets_backward_compatibility_first(server: tuple[str, Script]) -> None:
    url, script = server
    script.play((404, {"error_code": 40401}), (200, {"compatibility": "BACKWARD"}), (200, {"id": 5}))
    registry = client(url)
    assert registry.register("s", '"string"') == 5
    assert [(method, path) for method, path, _ in script.requests] == [
        ("GET", "/apis/ccompat/v7/subjects/s/versions"), ("PUT", "/apis/ccompat/v7/config/s"),
        ("POST", "/apis/ccompat/v7/subjects/s/versions")]
    assert registry.schema(5) == '"string"' and len(script.requests) == 3  # registering filled the cache


def test_subjects_are_listed_page_by_page(server: tuple[str, Script]) -> None:
    """Apicurio lists 1,000 subjects a call; Confluent ignores the paging and lists all each time."""
    url, script = server
    names = [f"t{i}-value" for i in range(1005)]
    script.play((200, names[:1000]), (200, names[1000:]))
    assert client(url).subjects() == names
    assert [path.rpartition("/")[2] for _, path, _ in script.requests] == ["subjects?offset=0&limit=1000",
                                                                            "subjects?offset=1000&limit=1000"]
    script.requests.clear()
    script.play((200, names))
    assert client(url).subjects() == names
    assert len(script.requests) == 2  # the second answer added nothing: every subject was there


@pytest.mark.parametrize(("settings", "authorization"), [
    ({"token": "t0k"}, "Bearer t0k"),
    ({"username": "u", "password": "p", "token": "t0k"}, "Bearer t0k"),
    ({"username": "u", "password": "p"}, "Basic dTpw"),
])
def test_auth_headers(server: tuple[str, Script], settings: dict, authorization: str) -> None:
    url, script = server
    script.play((200, []))
    client(url, **settings).subjects()
    assert script.requests[0][2]["Authorization"] == authorization


def test_unreachable_registry_is_named() -> None:
    with pytest.raises(RegistryError, match=r"registry at http://127\.0\.0\.1:1/apis/ccompat/v7 is unreachable "
                                            r"\(schema id 1\)"):
        ConfluentCompatClient.from_settings(RegistrySettings(url="http://127.0.0.1:1", timeout_s=1)).schema(1)


def test_errors_name_the_address_without_its_credentials(server: tuple[str, Script]) -> None:
    url, script = server
    script.play((404, {"message": "Schema 7 not found"}))
    with_credentials = url.replace("http://", "http://alice:url-pw@")
    shown = r"registry at http://\*\*\*@127\.0\.0\.1:\d+/apis/ccompat/v7"
    with pytest.raises(RegistryError, match=rf"{shown} refused") as caught:
        client(with_credentials).schema(7)
    assert "url-pw" not in str(caught.value) and script.requests[0][2]["Authorization"].startswith("Basic ")
    with pytest.raises(RegistryError, match=rf"{shown} is unreachable"):
        client("http://alice:url-pw@127.0.0.1:1").schema(1)


def test_tls_options_reach_the_session() -> None:
    settings = RegistrySettings(url="https://registry.example", verify_tls="/etc/ca.pem", client_cert="/c.pem",
                                client_key="/k.pem")
    session = ApicurioClient.from_settings(settings)._rest._session
    assert session.verify == "/etc/ca.pem" and session.cert == ("/c.pem", "/k.pem")
