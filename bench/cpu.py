"""CPU seconds by process, from `/proc`, which the machine's load does not inflate the way it does wall time.

A benchmark takes a `Snapshot` before and after what it times and prints the difference: the local service
(a process found by its command line), the Spark JVM (its JIT compiler and garbage collector threads apart),
the Python workers (the JVM's descendants) and the benchmark's own process. A process's figure includes the
children it has reaped (`cutime`), so a worker that ended inside the window still counts.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")
# a JVM's threads by their names (`comm`, cut to 15 characters)
JIT = ("C1 CompilerThre", "C2 CompilerThre")
GC = ("GC Thread", "G1 ", "VM Thread")
TASKS = ("Executor task l",)  # Spark's "Executor task launch worker for task ..."


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


def _thread_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """Thread id -> (name, CPU seconds) of each of the process's threads (none once it has ended)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:  # ended meanwhile
        return {}
    found = {}
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as file:
                name = file.read().strip()
        except OSError:
            continue
        fields = _stat(f"/proc/{pid}/task/{task}/stat")
        if fields is not None:
            found[int(task)] = (name, _seconds(fields, children=False))
    return found


def _threads(pid: int, names: tuple[str, ...]) -> float:
    """CPU seconds of the process's threads whose name starts with one of `names`."""
    return sum(seconds for name, seconds in _thread_seconds(pid).values() if name.startswith(names))


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
            jit = _threads(jvm_pid, JIT)
            gc = _threads(jvm_pid, GC)
            workers = sum(_seconds(_stat(f"/proc/{pid}/stat") or ["0"] * 15, children=True)
                          for pid in _descendants(jvm_pid, processes))
        own = _seconds(_stat(f"/proc/{os.getpid()}/stat") or ["0"] * 15, children=False)
        return cls(served, jvm, jit, gc, workers, own)

    def __sub__(self, before: Snapshot) -> Snapshot:
        return Snapshot(*(after - earlier for after, earlier in zip(vars(self).values(), vars(before).values())))

    def describe(self, service: str) -> str:
        return (f"{service} {self.service:.1f}, JVM {self.jvm:.1f} (JIT {self.jit:.1f}, GC {self.gc:.1f}), "
                f"Python workers {self.workers:.1f}, driver {self.own:.1f} CPU-s")


@dataclass(frozen=True)
class Group:
    """Processes whose CPU counts under one name: `pids` themselves (`own`) and/or their descendants."""

    name: str
    pids: tuple[int, ...]
    own: bool = True
    descendants: bool = True


class Sampler:
    """CPU seconds of groups of processes while something runs, sampled from `/proc` every `interval` s, by group
    and kind: a JVM's JIT compiler, garbage collector and Spark task threads apart from its other threads, a Python
    process whole. A process that ends (an executor at its application's end) keeps its last sample, so up to
    `interval` s of its last CPU is not counted; one that existed before `start` counts from there on.

    `sample` is called by a thread of its own (`start`/`stop`); `between(t0, t1)` gives the CPU used between two
    times of `time.time()` (the samples nearest inside), `total()` all of it."""

    def __init__(self, groups: list[Group], interval: float = 0.5) -> None:
        self.groups, self.interval = groups, interval
        self.samples: list[tuple[float, dict[tuple[str, str], float]]] = []  # time, (group, kind) -> seconds
        self._first: dict[tuple[int, str], float] = {}  # (pid, kind) -> seconds when first seen, if before start
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._existing: set[int] = set()
        self._last: dict[tuple[str, int, str], float] = {}  # (group, pid, kind) -> seconds last seen
        self._threads: dict[tuple[int, int], tuple[str, float]] = {}  # (pid, tid) -> kind, seconds last seen

    def start(self) -> Sampler:
        self._existing = set(_processes())
        self.sample()  # what the processes already running have used is left out
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        processes = _processes()
        for group in self.groups:
            members = [*(group.pids if group.own else ()),
                       *(pid for root in group.pids if group.descendants for pid in _descendants(root, processes))]
            for pid in members:
                command = processes.get(pid, (0, ""))[1]
                if not command:  # ended: an unreaped process has no command line and its threads are gone
                    continue
                for kind, seconds in self._kinds(pid, command.split(" ", 1)[0].endswith("java")).items():
                    key = (pid, kind)
                    if pid in self._existing and key not in self._first:
                        self._first[key] = seconds  # counted from the sampler's start
                    self._last[(group.name, pid, kind)] = seconds - self._first.get(key, 0.0)
        totals: dict[tuple[str, str], float] = {}
        for (group, _, kind), seconds in self._last.items():
            totals[(group, kind)] = totals.get((group, kind), 0.0) + seconds
        self.samples.append((time.time(), totals))

    def _kinds(self, pid: int, jvm: bool) -> dict[str, float]:
        """A process's CPU seconds by kind: a JVM's by thread ('JVM JIT', 'JVM GC', 'JVM tasks', a thread that
        has ended with what it was last seen with, and 'JVM other' for the rest), or 'Python' whole."""
        fields = _stat(f"/proc/{pid}/stat")
        if fields is None or fields[0] == "Z":  # gone, or ended and its threads with it: its last sample stands
            return {}
        whole = _seconds(fields, children=False)
        if not jvm:
            return {"Python": whole}
        for thread, (name, seconds) in _thread_seconds(pid).items():
            kind = ("JVM JIT" if name.startswith(JIT) else "JVM GC" if name.startswith(GC)
                    else "JVM tasks" if name.startswith(TASKS) else None)
            if kind is not None:
                self._threads[(pid, thread)] = (kind, seconds)
        kinds = {"JVM JIT": 0.0, "JVM GC": 0.0, "JVM tasks": 0.0}
        for (owner, _), (kind, seconds) in self._threads.items():
            if owner == pid:
                kinds[kind] += seconds
        return {**kinds, "JVM other": max(0.0, whole - sum(kinds.values()))}

    def total(self) -> dict[tuple[str, str], float]:
        return dict(self.samples[-1][1]) if self.samples else {}

    def between(self, start: float, end: float) -> dict[tuple[str, str], float]:
        inside = [totals for at, totals in self.samples if start <= at <= end]
        if len(inside) < 2:
            return {}
        first, last = inside[0], inside[-1]
        return {key: seconds - first.get(key, 0.0) for key, seconds in last.items()}


def describe(cpu: dict[tuple[str, str], float]) -> str:
    """`<total> CPU-s: <group> <seconds> (<kind> <seconds>, ...); ...`, the kinds largest first."""
    groups: dict[str, dict[str, float]] = {}
    for (group, kind), seconds in cpu.items():
        groups.setdefault(group, {})[kind] = seconds
    parts = []
    for group, kinds in groups.items():
        inner = ", ".join(f"{kind} {seconds:.1f}" for kind, seconds in sorted(kinds.items(), key=lambda i: -i[1])
                          if seconds >= 0.05)
        parts.append(f"{group} {sum(kinds.values()):.1f} ({inner})")
    return f"{sum(cpu.values()):.1f} CPU-s: " + "; ".join(parts)
