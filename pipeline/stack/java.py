"""Finding a Java runtime of a given major version: Kafka 4 needs 17+, Apicurio Registry 3.3 needs 21+, Trino 476
needs 24+."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')
JDK_ROOTS = (Path("/usr/lib/jvm"), Path("/opt/java"), Path("/Library/Java/JavaVirtualMachines"))  # side by side


class JavaNotFound(RuntimeError):
    pass


@functools.cache
def java_major(java: Path) -> int | None:
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION.search(out)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def candidates() -> list[Path]:
    """JAVA_HOME, the `java` on PATH, then the JDKs installed side by side in the usual folders."""
    found: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        found.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    if shutil.which("java"):
        found.append(Path(shutil.which("java")))  # type: ignore[arg-type]
    for root in JDK_ROOTS:
        if root.is_dir():
            found += sorted(root.glob("*/bin/java")) + sorted(root.glob("*/Contents/Home/bin/java"))
    return [java for java in dict.fromkeys(found) if java.is_file()]


def find_java(min_major: int, purpose: str, configured: Path | None = None,
              setting: str | None = None) -> Path:
    """The first Java of at least `min_major`; `configured` (the value of `setting`) wins when given."""
    if configured is not None:
        major = java_major(configured)
        if major is None or major < min_major:
            named = f"{configured} ({setting})" if setting else str(configured)
            raise JavaNotFound(f"{purpose} needs Java {min_major}+, but {named} is Java {major or 'unknown'}")
        return configured
    seen = []
    for java in candidates():
        major = java_major(java)
        if major is not None and major >= min_major:
            return java
        seen.append(f"{java} (Java {major})")
    where = ", ".join(str(root) for root in JDK_ROOTS)
    raise JavaNotFound(
        f"{purpose} needs Java {min_major}+; looked at JAVA_HOME, the java on PATH and the JDKs in {where}, and "
        f"found {', '.join(seen) or 'no java at all'}. Install a JDK {min_major}+ and point JAVA_HOME or "
        f"{setting or 'the matching stack setting'} at it."
    )
