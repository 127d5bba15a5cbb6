"""PostgreSQL with logical replication (`wal_level=logical`): the real source Debezium reads.

The server binaries come from the machine (the distribution's `postgresql` package); nothing is downloaded.
PostgreSQL refuses to run as root, so a stack started by root runs initdb and the server as the unprivileged
account `stack.postgres_os_user` (dropped between fork and exec: the PID file names the server itself).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path

from pipeline.config.settings import PipelineConfig
from pipeline.runtime.jvm import SetupError
from pipeline.stack.base import Port, Service
from pipeline.stack.process import ManagedProcess, as_user

TOOLS = ("initdb", "postgres", "psql", "pg_isready")
SUPERUSER = "postgres"  # the database role initdb creates; local connections are trusted


def find_bin_dir(configured: Path | None) -> Path:
    """The folder holding initdb, postgres, psql and pg_isready: the setting, the PATH, then the distribution's
    versioned folders (newest first)."""
    if configured is not None:
        candidates = [configured]
    else:
        on_path = [Path(found).resolve().parent for found in (shutil.which("initdb"), shutil.which("postgres")) if found]
        versioned = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_major, reverse=True)
        candidates = [*on_path, *versioned, Path("/usr/pgsql/bin")]
    for folder in candidates:
        if all((folder / tool).is_file() for tool in TOOLS):
            return folder
    where = str(configured) if configured else "PATH and /usr/lib/postgresql/*/bin"
    raise SetupError(f"PostgreSQL server binaries ({', '.join(TOOLS)}) are not in {where}: install them "
                     "(e.g. apt-get install postgresql) or point stack.postgres_bin at their folder")


def _major(bin_dir: Path) -> int:
    digits = re.match(r"\d+", bin_dir.parent.name)
    return int(digits.group()) if digits else 0


class Postgres(Service):
    """One PostgreSQL cluster in the service folder; its first start creates the cluster and the database."""

    name = "postgres"

    def __init__(self, cfg: PipelineConfig) -> None:
        super().__init__(cfg)
        user = cfg.stack.postgres_os_user if os.geteuid() == 0 else None
        self.process = ManagedProcess(self.name, self.folder, user)

    @property
    def ports(self) -> list[Port]:
        return [Port("stack.postgres_port", self.cfg.stack.postgres_port)]

    @property
    def address(self) -> str:
        s = self.cfg.stack
        return f"{self.host}:{s.postgres_port}/{s.postgres_database}"

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    def command(self) -> list[str]:
        bin_dir = find_bin_dir(self.cfg.stack.postgres_bin)
        if self.process.user is not None:
            self._account()  # a missing account fails here, with the fix, not inside the start
        if not (self.data_dir / "PG_VERSION").is_file():
            self._create_cluster(bin_dir)
        return [str(bin_dir / "postgres"), "-D", str(self.data_dir), *self._settings()]

    def healthy(self) -> bool:
        """Accepting connections to the configured database (pg_isready alone would not notice a missing one)."""
        s = self.cfg.stack
        probe = [str(find_bin_dir(s.postgres_bin) / "pg_isready"), "-q", "-h", self.host, "-p", str(s.postgres_port),
                 "-U", SUPERUSER, "-d", s.postgres_database, "-t", "2"]
        return subprocess.run(probe, capture_output=True).returncode == 0

    def _settings(self) -> list[str]:
        s = self.cfg.stack
        settings = {
            "listen_addresses": self.host, "port": str(s.postgres_port),
            "unix_socket_directories": "",  # TCP only: no socket folder the service account may not write
            "wal_level": "logical", "max_wal_senders": "8", "max_replication_slots": "8",
            "timezone": "UTC", "max_connections": "40", "shared_buffers": "64MB",
        }
        return [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]

    def _create_cluster(self, bin_dir: Path) -> None:
        """initdb (trusting local connections, replication included), then the database, in single-user mode."""
        staging = self.folder / "data.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True, mode=0o700)
        self._hand_over(staging)
        run_as = as_user(self.process.user)
        subprocess.run([str(bin_dir / "initdb"), "-D", str(staging), "-U", SUPERUSER, "--auth=trust",
                        "--encoding=UTF8", "--locale=C"], check=True, capture_output=True, text=True, **run_as)
        subprocess.run([str(bin_dir / "postgres"), "--single", "-D", str(staging), "postgres"],
                       input=f"CREATE DATABASE {self.cfg.stack.postgres_database};\n",
                       check=True, capture_output=True, text=True, **run_as)
        staging.rename(self.data_dir)  # a half-made cluster is never mistaken for a ready one

    def _account(self) -> pwd.struct_passwd:
        name = self.process.user
        try:
            return pwd.getpwnam(name)
        except KeyError:
            raise SetupError(f"PostgreSQL refuses to run as root and the account {name!r} (stack.postgres_os_user) "
                             f"does not exist: create it (useradd --system {name}) or name another") from None

    def _hand_over(self, folder: Path) -> None:
        """Give the service account its data folder, and check it can reach it through every parent folder."""
        if self.process.user is None:
            return
        user = self._account()
        os.chown(folder, user.pw_uid, user.pw_gid)
        for parent in folder.parents:
            mode = parent.stat()
            if not (mode.st_mode & 0o001 or mode.st_uid == user.pw_uid):
                raise SetupError(f"the account {user.pw_name!r} that runs PostgreSQL cannot enter {parent}: "
                                 f"chmod o+x {parent}, or set home to a folder it can reach")
