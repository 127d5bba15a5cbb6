"""One redaction rule for everything that prints or logs: a secret set anywhere appears in no output."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog

from pipeline.cli.main import main
from pipeline.config.redaction import REDACTED, redact, redact_text
from pipeline.ops.status.model import LakeStatus, SourceLag, TableStatus
from pipeline.runtime import logs
from registry.backend import RegistryError

# every place a user can write a secret, each with its own value so a leak names its place
SECRETS = {
    "kafka.properties.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                         'username="alice" password="jaas-pw-1";',
    "kafka.properties.ssl.key.password": "ssl-pw-2",
    "catalog.properties.s3.secret-access-key": "catalog-secret-3",
    "catalog.uri": "jdbc:postgresql://db:5432/lake?user=lake&password=jdbc-pw-4",
    "spark.conf.spark.hadoop.fs.s3a.secret.key": "spark-secret-5",
    "spark.conf.spark.hadoop.fs.s3a.access.key": "spark-access-6",
    "registry.url": "http://reg-user:url-pw-7@registry.example:8080",
    "registry.password": "typed-pw-8",
    "aws.secret_access_key": "typed-secret-9",
    "aws.access_key_id": "typed-key-10",
}
LEAKS = ("jaas-pw-1", "ssl-pw-2", "catalog-secret-3", "jdbc-pw-4", "spark-secret-5", "spark-access-6", "url-pw-7",
         "typed-pw-8", "typed-secret-9", "typed-key-10")
SETS = [arg for key, value in SECRETS.items() for arg in ("--set", f"{key}={value}")]


def _leaked(text: str) -> list[str]:
    return [secret for secret in LEAKS if secret in text]


@pytest.mark.parametrize(("text", "shown"), [
    ("https://user:pa55@registry:8081/apis", "https://***@registry:8081/apis"),
    ("https://token@host/x", "https://***@host/x"),
    ('PlainLoginModule required username="u" password="pw";', 'PlainLoginModule required username="u" password="***";'),
    ("jdbc:postgresql://db/x?user=me&password=pw&ssl=true", "jdbc:postgresql://db/x?user=me&password=***&ssl=true"),
    ("jdbc:mysql://me:pw@db/x", "jdbc:mysql://***@db/x"),
    ("jdbc:sqlserver://h;user=a;password=pw;db=x", "jdbc:sqlserver://h;user=a;password=***;db=x"),
    ("-Dfs.s3a.secret.key=pw -Dx=1", "-Dfs.s3a.secret.key=*** -Dx=1"),
    ("http://host:8080/apis?subject=a", "http://host:8080/apis?subject=a"),
    # the key is the whole token before `=`/`:`, wherever the word sits in it; a token not followed by one is no key
    ("conf(spark.hadoop.fs.s3a.secret.key.v2 = pw)", "conf(spark.hadoop.fs.s3a.secret.key.v2 = ***)"),
    ("[x-auth-token: pw, other: 1]", "[x-auth-token: ***, other: 1]"),
    ("passport=1 author=2 tokenizer /a/secret.txt", "passport=1 author=2 tokenizer /a/secret.txt"),
    ("TOKEN=a; Password : 'p w'", "TOKEN=***; Password : '***'"),
])
def test_credentials_in_text_are_masked(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_keys_that_name_a_credential_mask_their_values_and_no_others() -> None:
    properties = {"sasl.jaas.config": "x", "ssl.key.password": "x", "fs.s3a.access.key": "x", "token": "x",
                  "s3.secret-access-key": "x", "basic.auth.user.info": "u:p", "bootstrap.servers": "b:9092",
                  "key.serializer": "k", "security.protocol": "SASL_SSL", "authors": "author_id", "empty.password": ""}
    assert redact(properties) == {**{k: REDACTED for k in list(properties)[:6]}, "bootstrap.servers": "b:9092",
                                  "key.serializer": "k", "security.protocol": "SASL_SSL", "authors": "author_id",
                                  "empty.password": ""}


def test_config_prints_no_secret(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SETS, "config"]) == 0
    printed = capsys.readouterr().out
    assert _leaked(printed) == []
    shown = json.loads(printed)
    assert shown["registry"]["url"] == "http://***@registry.example:8080"
    assert shown["catalog"]["properties"]["s3.secret-access-key"] == REDACTED
    assert shown["kafka"]["properties"]["sasl.jaas.config"] == REDACTED
    assert shown["spark"]["app_name"] == "cdc-lakehouse"  # nothing else is touched


@pytest.mark.parametrize("error", [RegistryError, ValueError])  # a known failure, and a bug with its traceback
def test_error_messages_print_no_secret(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                        error: type[Exception]) -> None:
    def failing(*_: object) -> int:
        raise error(f"cannot reach {SECRETS['registry.url']} with {SECRETS['kafka.properties.sasl.jaas.config']} "
                    f"or {SECRETS['catalog.uri']}")

    monkeypatch.setattr("pipeline.cli.commands.cmd_config", failing)
    assert main(["config"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach http://***@registry.example:8080" in err and _leaked(err) == []


def test_a_configuration_error_prints_no_secret(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "registry.url=http://u:url-pw-7@r:1", "--set", "registry.timeout_s=-1", "config"]) == 2
    assert _leaked(capsys.readouterr().err) == []


def test_logs_print_no_secret(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(logging.root, "handlers", [])  # as in a CLI process: pytest's own handlers aside
    logs.configure("INFO", "json")
    structlog.get_logger("t").info(f"connecting to {SECRETS['registry.url']}", properties={
        "sasl.jaas.config": SECRETS["kafka.properties.sasl.jaas.config"]}, uri=SECRETS["catalog.uri"],
        token="typed-pw-8")
    logs.configure("INFO", "text")
    structlog.get_logger("t").info("connect", password="typed-secret-9", url=SECRETS["registry.url"])
    logging.getLogger("py4j").warning("options %s", SECRETS["catalog.uri"])
    err = capsys.readouterr().err
    assert "connecting to http://***@registry.example:8080" in err and "password=***" in err
    assert _leaked(err) == []


def _status_with_a_secret() -> LakeStatus:
    now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    table = TableStatus("db_orders", 10, now, 10, None, [], SourceLag("kafka", "db.public.orders", 0, 0.0), None,
                        {"MalformedAvro": 2})
    return LakeStatus(now, [table], [], None, [f"schema registry at {SECRETS['registry.url']} is unreachable"])


@pytest.mark.parametrize("output", [[], ["--json"]])
def test_status_prints_no_secret(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                 tmp_path: Path, output: list[str]) -> None:
    monkeypatch.setattr("pipeline.ops.status.collect", lambda cfg: _status_with_a_secret())
    page = tmp_path / "status.html"
    assert main(["status", *output, "--html", str(page)]) == 0
    printed = capsys.readouterr().out + page.read_text()
    assert "registry at http://***@registry.example:8080" in printed and _leaked(printed) == []


@pytest.mark.parametrize("output", [[], ["--json"]])
def test_the_dead_letter_listing_prints_no_secret(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                  output: list[str]) -> None:
    from pipeline.stages.dead_letters import Reason

    reason = Reason("db.public.orders", "db_orders", "UnknownSchemaId",
                    f"schema registry at {SECRETS['registry.url']} refused schema id 7", 3, "t0", "t1")
    monkeypatch.setattr("pipeline.runtime.spark.get_spark", lambda cfg: None)
    monkeypatch.setattr("pipeline.stages.dead_letters.reasons", lambda cfg, spark, topics: [reason])
    assert main(["dead-letters", "list", *output]) == 0
    printed = capsys.readouterr().out
    assert "http://***@registry.example:8080 refused schema id 7" in printed and _leaked(printed) == []
