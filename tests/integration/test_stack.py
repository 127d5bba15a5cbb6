"""Stack lifecycle against the real processes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.stack import Stack, StackError
from tests.conftest import REPO, TEST_SETTINGS, free_port, make_config

pytestmark = pytest.mark.integration


def test_up_twice_is_harmless(stack: Stack) -> None:
    before = {s.name: s.pid for s in stack.status()}
    assert stack.up() == []
    after = stack.status()
    assert {s.name: s.pid for s in after} == before
    assert all(s.state == "healthy" for s in after)


def test_status_command_lists_every_service(stack: Stack) -> None:
    args = [arg for setting in TEST_SETTINGS for arg in ("--set", setting)]
    done = subprocess.run([sys.executable, "-m", "pipeline", *args, "stack", "status"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for svc in stack.status():
        assert f"{svc.name}" in done.stdout and str(svc.pid) in done.stdout and svc.address in done.stdout


def test_port_in_use_names_the_service_and_the_setting(tmp_path: Path, stack: Stack) -> None:
    port = free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        cfg = make_config(f"home={tmp_path}", f"stack.moto_port={port}")
        with pytest.raises(StackError, match=rf"moto: port {port} on 127.0.0.1 is already in use.*stack\.moto_port"):
            Stack(cfg, only=["moto"]).up()


def test_down_stops_only_what_its_stack_started(tmp_path: Path, stack: Stack) -> None:
    other = Stack(make_config(f"home={tmp_path}", f"stack.moto_port={free_port()}"), only=["moto"])
    assert other.up() == ["moto"]
    assert other.status()[0].state == "healthy"
    assert other.down() == ["moto"]
    assert other.down() == []
    assert other.status()[0].state == "stopped"
    assert all(s.state == "healthy" for s in stack.status())  # the session's stack is untouched


def test_a_service_that_dies_at_start_points_at_its_log(tmp_path: Path, stack: Stack) -> None:
    java = tmp_path / "java"
    java.write_text('#!/bin/sh\nif [ "$1" = "-version" ]; then echo \'openjdk version "21.0.1"\' >&2; exit 0; fi\n'
                    'echo "boom: no registry today"; exit 3\n')
    java.chmod(0o755)
    cfg = make_config(f"home={tmp_path}", f"stack.registry_port={free_port()}",
                      f"stack.registry_management_port={free_port()}", f"stack.registry_java={java}")
    with pytest.raises(StackError, match=r"(?s)registry \(http://127.0.0.1:\d+\) exited during start-up; see .*registry\.log.*boom"):
        Stack(cfg, only=["registry"]).up()


def test_a_missing_dependency_is_named(tmp_path: Path, stack: Stack) -> None:
    cfg = make_config(f"home={tmp_path}", "stack.registry_storage=kafka", f"stack.kafka_port={free_port()}",
                      f"stack.registry_port={free_port()}")
    with pytest.raises(StackError, match=r"registry needs kafka at 127\.0\.0\.1:\d+, which is not running"):
        Stack(cfg, only=["registry"]).up()


def test_a_failed_up_stops_what_it_started(tmp_path: Path, stack: Stack) -> None:
    """All or nothing: moto starts, the registry then fails, and moto is stopped again."""
    java = tmp_path / "java"
    java.write_text('#!/bin/sh\nif [ "$1" = "-version" ]; then echo \'openjdk version "21.0.1"\' >&2; exit 0; fi\nexit 3\n')
    java.chmod(0o755)
    cfg = make_config(f"home={tmp_path}", f"stack.moto_port={free_port()}", f"stack.registry_port={free_port()}",
                      f"stack.registry_management_port={free_port()}", f"stack.registry_java={java}")
    partial = Stack(cfg, only=["moto", "registry"])
    with pytest.raises(StackError, match="registry"):
        partial.up()
    assert [s.state for s in partial.status()] == ["stopped", "stopped"]
