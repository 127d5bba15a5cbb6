"""CPU seconds by process, from `/proc`, which the machine's load does not inflate the way it does wall time.

A benchmark takes a `Snapshot` before and after what it times and prints the difference: the local service
(a process found by its command line), the Spark JVM (its JIT compiler and garbage collector threads apart),
the Python workers (the JVM's descendants) and the benchmark's own process. A process's figure includes the
children it has reaped (`cutime`), so a worker that ended inside the window still counts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: str) -> list[str] | None:
    """The fields of a `stat` file after the command's name (which may hold spaces), or None once it is gone."""
    try:
        with open(path) as file:
            text = file.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _seconds(fields: list[str], children: bool) -> float:
    # fields from the state on: utime, stime, cutime, cstime are the 12th to 15th
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / _TICK


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(f"/proc/{name}/stat")
            try:
                with open(f"/proc/{name}/cmdline", "rb") as file:
                    command = file.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if fields is not None:
                found[int(name)] = (int(fields[1]), command)
    return found


def _descendants(pid: int, processes: dict[int, tuple[int, str]]) -> list[int]:
    children = [child for child, (parent, _) in processes.items() if parent == pid]
    return children + [grandchild for child in children for grandchild in _descendants(child, processes)]


def _threads(pid: int, names: tuple[str, ...]) -> float:
    """CPU seconds of the process's threads whose name starts with one of `names`."""
    total = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as file:
                name = file.read().strip()
        except OSError:
            continue
        fields = _stat(f"/proc/{pid}/task/{task}/stat")
        if fields is not None and name.startswith(names):
            total += _seconds(fields, children=False)
    return total


@dataclass(frozen=True)
class Snapshot:
    service: float  # the local service's process
    jvm: float
    jit: float  # of the JVM: its compiler threads
    gc: float  # of the JVM: its garbage collector threads
    workers: float  # the JVM's descendants: Spark's Python workers
    own: float  # this process (a benchmark's own threads)

    @classmethod
    def take(cls, service: str, jvm_pid: int | None) -> Snapshot:
        """`service`: text in the command line of the service's process (e.g.
        `pipeline.stack.moto_server -H 127.0.0.1 -p 25001`)."""
        processes = _processes()
        served = sum(_seconds(_stat(f"/proc/{pid}/stat") or ["0"] * 15, children=True)
                     for pid, (_, command) in processes.items() if service in command)
        jvm = jit = gc = workers = 0.0
        if jvm_pid is not None:
            jvm = _seconds(_stat(f"/proc/{jvm_pid}/stat") or ["0"] * 15, children=False)
            jit = _threads(jvm_pid, ("C1 CompilerThre", "C2 CompilerThre"))
            gc = _threads(jvm_pid, ("GC Thread", "G1 ", "VM Thread"))
            workers = sum(_seconds(_stat(f"/proc/{pid}/stat") or ["0"] * 15, children=True)
                          for pid in _descendants(jvm_pid, processes))
        own = _seconds(_stat(f"/proc/{os.getpid()}/stat") or ["0"] * 15, children=False)
        return cls(served, jvm, jit, gc, workers, own)

    def __sub__(self, before: Snapshot) -> Snapshot:
        return Snapshot(*(after - earlier for after, earlier in zip(vars(self).values(), vars(before).values())))

    def describe(self, service: str) -> str:
        return (f"{service} {self.service:.1f}, JVM {self.jvm:.1f} (JIT {self.jit:.1f}, GC {self.gc:.1f}), "
                f"Python workers {self.workers:.1f}, driver {self.own:.1f} CPU-s")
