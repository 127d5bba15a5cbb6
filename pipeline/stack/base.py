"""What every embedded service is: a managed process with ports, an address, a command line and a health check."""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass

from pipeline.config.settings import PipelineConfig
from pipeline.stack.process import ManagedProcess


@dataclass(frozen=True)
class Port:
    setting: str  # the configuration key that moves it, for error messages
    number: int


class Service(ABC):
    name: str
    depends_on: tuple[str, ...] = ()

    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self.host = cfg.stack.host
        self.folder = cfg.services_dir / self.name
        self.process = ManagedProcess(self.name, self.folder)

    @property
    @abstractmethod
    def ports(self) -> list[Port]: ...

    @property
    @abstractmethod
    def address(self) -> str: ...

    @abstractmethod
    def command(self) -> list[str]:
        """The command line; may prepare the data folder first (it is called right before start)."""

    @property
    def java_options(self) -> list[str]:
        """`stack.java_options`, for a Java service to put after its own options (so they win)."""
        return shlex.split(self.cfg.stack.java_options)

    @property
    def web_ui(self) -> str | None:
        """A web page of the service's own, for `stack status`."""
        return None

    def environment(self) -> dict[str, str]:
        """Variables the process gets on top of ours."""
        return {}

    @abstractmethod
    def healthy(self) -> bool: ...
