import json

import structlog

from pipeline.config.redaction import REDACTED, redact
from pipeline.runtime import logs


def test_secret_keys_and_url_credentials_are_masked() -> None:
    assert redact("hunter2", "sasl.password") == REDACTED
    assert redact("abc", "aws_secret_access_key") == REDACTED
    assert redact({"sasl.jaas.config": "x", "bootstrap.servers": "b:9092"}) == {
        "sasl.jaas.config": REDACTED, "bootstrap.servers": "b:9092"}
    assert redact("https://user:pa55@registry:8081/apis") == "https://***@registry:8081/apis"
    assert redact(5, "port") == 5


def test_json_log_lines_are_structured_and_redacted(capsys) -> None:
    logs.configure("INFO", "json")
    structlog.get_logger("t").info("registry.connect", url="http://u:secret@r:1", token="tkn", subject="s")
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["event"] == "registry.connect" and line["subject"] == "s"
    assert "secret" not in json.dumps(line) and line["token"] == REDACTED
