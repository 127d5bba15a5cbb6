"""Trino in the stack without starting it: when it runs, its catalog file, the Java it needs, its port."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from pipeline.cli.commands import _stack
from pipeline.cli.main import main
from pipeline.cli.parser import build_parser
from pipeline.config.settings import ConfigError, load_config
from pipeline.sql.trino_query import TrinoError, fetch
from pipeline.stack.java import JavaNotFound
from pipeline.stack.services import all_services
from pipeline.stack.trino import Trino
from tests.conftest import free_port
from tests.unit.test_java_and_maven import _fake_java


def _cfg(tmp_path: Path, *overrides: str):
    return load_config(overrides=[f"home={tmp_path}", *overrides], environ={})


def test_trino_runs_only_when_asked_and_after_moto(tmp_path: Path) -> None:
    assert "trino" not in {s.name for s in all_services(_cfg(tmp_path))}
    args = build_parser().parse_args(["stack", "up", "--with", "trino"])
    services = [s.name for s in _stack(_cfg(tmp_path), args).services]
    assert services.index("moto") < services.index("trino")


def test_its_port_must_be_distinct(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="distinct"):
        _cfg(tmp_path, "stack.trino_port=5000")


def _catalog(cfg) -> dict[str, str]:
    return Trino(cfg)._catalog()


def test_the_catalog_is_iceberg_on_the_glue_and_s3_the_pipeline_writes(tmp_path: Path) -> None:
    catalog = _catalog(_cfg(tmp_path, "stack.moto_port=5999"))
    assert catalog["connector.name"] == "iceberg" and catalog["iceberg.catalog.type"] == "glue"
    assert catalog["hive.metastore.glue.endpoint-url"] == catalog["s3.endpoint"] == "http://127.0.0.1:5999"
    assert catalog["s3.path-style-access"] == "true"  # moto serves buckets by path, not by host name
    assert catalog["hive.metastore.glue.aws-access-key"] == catalog["s3.aws-access-key"] == "test"


def test_the_delta_catalog_reads_the_same_glue_and_s3_and_only_delta_tables(tmp_path: Path) -> None:
    trino = Trino(_cfg(tmp_path, "stack.moto_port=5999"))
    delta, iceberg = trino._delta_catalog(), trino._catalog()
    assert delta["connector.name"] == "delta-lake" and delta["hive.metastore"] == "glue"
    assert delta["delta.hide-non-delta-lake-tables"] == "true"
    assert {k: v for k, v in delta.items() if k.startswith(("hive.metastore.glue.", "s3."))} == \
        {k: v for k, v in iceberg.items() if k.startswith(("hive.metastore.glue.", "s3."))}


def test_on_real_aws_the_catalog_names_no_endpoint_and_no_keys(tmp_path: Path) -> None:
    catalog = _catalog(_cfg(tmp_path, "aws.endpoint_url=", "aws.region=eu-west-1"))
    assert catalog["hive.metastore.glue.region"] == catalog["s3.region"] == "eu-west-1"
    assert not [key for key in catalog if "endpoint" in key or "aws-" in key]


def test_without_a_new_enough_java_it_says_which_it_needs_and_where_it_looked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipeline.stack.java.candidates", lambda: [_fake_java(tmp_path, "17.0.9")])
    with pytest.raises(JavaNotFound, match=r"Trino 476 needs Java 24\+; looked at JAVA_HOME, the java on PATH and the "
                                           r"JDKs in /usr/lib/jvm.*found .*java17.0.9 \(Java 17\).*stack.trino_java"):
        Trino(_cfg(tmp_path)).command()
    old = _fake_java(tmp_path, "21.0.1")
    with pytest.raises(JavaNotFound, match=r"needs Java 24\+, but .*java21.0.1 \(stack.trino_java\) is Java 21"):
        Trino(_cfg(tmp_path, f"stack.trino_java={old}")).command()


def test_its_jvm_runs_with_the_heap_setting_and_the_deployment_guides_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1 GiB heap with the JVM's defaults spent as much CPU in G1 as in a query over a 10M-row mirror."""
    monkeypatch.setattr("pipeline.stack.java.candidates", lambda: [_fake_java(tmp_path, "25.0.1")])
    monkeypatch.setattr("pipeline.runtime.jvm.Bundle.resolve", lambda self, jars_dir, offline=False: tmp_path / "server")
    command = Trino(_cfg(tmp_path)).command()
    assert "-Xmx4g" in command and "-XX:ReservedCodeCacheSize=512M" in command and "-XX:+UseG1GC" in command
    assert "-Xmx6g" in Trino(_cfg(tmp_path, "stack.trino_heap=6g")).command()
    # the options asked for come after the guide's, so they win
    tuned = Trino(_cfg(tmp_path, "stack.java_options=-XX:TieredStopAtLevel=1  -XX:+UseSerialGC")).command()
    assert tuned[tuned.index("-XX:+UseG1GC"):].index("-XX:+UseSerialGC") > 0 and "-XX:TieredStopAtLevel=1" in tuned


def test_trino_down_is_said_with_its_address(tmp_path: Path, capsys) -> None:
    port = free_port()  # nothing listens there
    said = rf"Trino at http://127.0.0.1:{port} does not answer .*stack up --with trino"
    with pytest.raises(TrinoError, match=said):
        fetch(_cfg(tmp_path, f"stack.trino_port={port}"), "SELECT 1", "x")
    argv = ["--set", f"home={tmp_path}", "--set", f"stack.trino_port={port}", "query", "--engine", "trino", "SELECT 1"]
    assert main(argv) == 1
    assert re.search(f"^error: {said}", capsys.readouterr().err)


def test_stack_down_stops_an_optional_service_without_being_told_it_runs(tmp_path: Path, capsys) -> None:
    """`stack up --with trino` started it; a plain `stack down` stops it too (nothing else of the home runs)."""
    trino = Trino(_cfg(tmp_path, "stack.trino=true"))
    pid = trino.process.start(["sleep", "60"])  # the service's own PID file, as `up` writes it
    assert main(["--set", f"home={tmp_path}", "stack", "down"]) == 0
    assert capsys.readouterr().out.strip().endswith("stopped: trino")
    assert trino.process.pid() is None
    _, status = os.waitpid(pid, os.WNOHANG)  # this test's child: ended, by the stop's signal
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
