"""A background service process: started detached, remembered in a PID file, stopped by its own PID only.

The PID file stores the exact command line, so a recycled PID that now belongs to another program is never
mistaken for ours (and never killed).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ManagedProcess:
    name: str
    folder: Path
    user: str | None = None  # run as this account (a root-started service that refuses root), groups included

    @property
    def pid_file(self) -> Path:
        return self.folder / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.folder / f"{self.name}.log"

    def pid(self) -> int | None:
        """The PID of our running process, or None (a stale PID file is removed)."""
        try:
            record = json.loads(self.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        pid, cmd = record["pid"], record["cmd"]
        if _running_with_cmdline(pid, cmd):
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def start(self, cmd: list[str], env: dict[str, str] | None = None) -> int:
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                cmd, cwd=self.folder, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **as_user(self.user),
            )
        _wait_for_exec(proc, cmd)
        self.pid_file.write_text(json.dumps({"pid": proc.pid, "cmd": cmd}))
        return proc.pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM, then SIGKILL after `timeout_s`; True when a process of ours was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        if _alive(pid):
            _signal_group(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def as_user(user: str | None) -> dict:
    """subprocess keyword arguments that run a child as `user` with its own groups (nothing for None)."""
    if user is None:
        return {}
    account = pwd.getpwnam(user)
    groups = [g.gr_gid for g in grp.getgrall() if user in g.gr_mem]
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": groups}


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return True


def _running_with_cmdline(pid: int, cmd: list[str]) -> bool:
    if not _alive(pid):
        return False
    proc_cmdline = Path(f"/proc/{pid}/cmdline")
    if not proc_cmdline.parent.exists():  # no procfs (macOS): the PID check has to do
        return True
    try:
        return proc_cmdline.read_bytes().rstrip(b"\0").split(b"\0") == [c.encode() for c in cmd]
    except FileNotFoundError:
        return False


def _wait_for_exec(proc: subprocess.Popen, cmd: list[str], timeout_s: float = 5.0) -> None:
    """Between fork and exec the child still shows the parent's command line; wait until it shows its own,
    so the PID file's identity check never mistakes a starting service for a stranger."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and not _running_with_cmdline(proc.pid, cmd) and time.monotonic() < deadline:
        time.sleep(0.01)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the service and any children it spawned
    except ProcessLookupError:
        pass
