"""`pipeline stack up | status | down | logs`: the embedded Kafka, Apicurio Registry and moto server.

`up` is idempotent (running services are kept) and returns once every service is healthy; `down` stops
only the processes this stack's PID files name.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Sequence

import structlog

from pipeline.config.settings import PipelineConfig
from pipeline.runtime.jvm import SetupError
from pipeline.stack.java import JavaNotFound
from pipeline.stack.process import port_in_use
from pipeline.stack.services import Service, all_services

log = structlog.get_logger(__name__)


class StackError(RuntimeError):
    """A service could not start; the message names the service, its address and its log file."""


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    address: str
    pid: int | None
    state: str  # healthy | unhealthy | stopped
    log_file: str
    web_ui: str | None = None


class Stack:
    """All services, or the ones named in `only` (for example just moto for AWS-only work)."""

    def __init__(self, cfg: PipelineConfig, only: Sequence[str] | None = None) -> None:
        self.cfg = cfg
        everything = all_services(cfg)
        unknown = set(only or ()) - {svc.name for svc in everything}
        if unknown:
            raise StackError(f"no service named {', '.join(sorted(unknown))}; "
                             f"the stack has {', '.join(svc.name for svc in everything)}")
        self.services = [svc for svc in everything if only is None or svc.name in only]
        self._outside = [svc for svc in everything if svc not in self.services]

    def up(self) -> list[str]:
        """Start what is not running and wait until all are healthy; return the names started now.

        All or nothing: when a service fails, the ones this call started are stopped again.
        """
        started: list[Service] = []
        try:
            self._start_in_order(started)
        except BaseException:
            for svc in reversed(started):
                svc.process.stop()
            raise
        return [svc.name for svc in started]

    def _start_in_order(self, started: list[Service]) -> None:
        healthy = {svc.name for svc in self._outside if svc.healthy()}
        pending = list(self.services)
        deadline = time.monotonic() + self.cfg.stack.start_timeout_s
        while pending:
            ready = [svc for svc in pending if set(svc.depends_on) <= healthy]
            if not ready:
                blocked = pending[0]
                missing = [self._by_name(name) for name in blocked.depends_on if name not in healthy]
                raise StackError(f"{blocked.name} needs " + ", ".join(f"{m.name} at {m.address}" for m in missing)
                                 + ", which is not running: start it first (python -m pipeline stack up)")
            for svc in ready:
                if svc.process.pid() is None:
                    self._start(svc)
                    started.append(svc)
            for svc in ready:
                self._wait_healthy(svc, deadline, started_now=svc in started)
                healthy.add(svc.name)
                pending.remove(svc)

    def down(self) -> list[str]:
        """Stop our services in reverse start order; return the names stopped."""
        stopped = []
        for svc in reversed(self.services):
            if svc.process.stop():
                log.info("stack.stopped", service=svc.name)
                stopped.append(svc.name)
        return stopped

    def status(self) -> list[ServiceStatus]:
        result = []
        for svc in self.services:
            pid = svc.process.pid()
            state = "stopped" if pid is None else ("healthy" if svc.healthy() else "unhealthy")
            result.append(ServiceStatus(svc.name, svc.address, pid, state, str(svc.process.log_file), svc.web_ui))
        return result

    def _by_name(self, name: str) -> Service:
        return next(svc for svc in [*self.services, *self._outside] if svc.name == name)

    def _start(self, svc: Service) -> None:
        for port in svc.ports:
            if port_in_use(self.cfg.stack.host, port.number):
                raise StackError(
                    f"{svc.name}: port {port.number} on {self.cfg.stack.host} is already in use by another "
                    f"process; stop that process or move the service with the setting {port.setting}"
                )
        try:
            cmd = svc.command()
        except (JavaNotFound, SetupError) as exc:
            raise StackError(f"{svc.name} ({svc.address}) cannot start: {exc}") from None
        except subprocess.CalledProcessError as exc:
            raise StackError(f"{svc.name} ({svc.address}) failed to prepare its data folder: "
                             f"{(exc.stdout or '')}{(exc.stderr or '')}".strip()) from None
        pid = svc.process.start(cmd, svc.environment())
        log.info("stack.starting", service=svc.name, address=svc.address, pid=pid, log=str(svc.process.log_file))

    def _wait_healthy(self, svc: Service, deadline: float, started_now: bool) -> None:
        begun = time.monotonic()
        while not svc.healthy():
            if svc.process.pid() is None:
                raise StackError(
                    f"{svc.name} ({svc.address}) exited during start-up; see {svc.process.log_file}:\n"
                    f"{svc.process.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise StackError(
                    f"{svc.name} ({svc.address}) was not healthy within {self.cfg.stack.start_timeout_s:.0f} s "
                    f"(setting stack.start_timeout_s); see {svc.process.log_file}:\n{svc.process.log_tail()}"
                )
            time.sleep(0.5)
        log.info("stack.healthy", service=svc.name, address=svc.address,
                 seconds=round(time.monotonic() - begun, 1) if started_now else 0.0)
