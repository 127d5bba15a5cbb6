"""JVM artifacts: the checked-in poms under `jvm/`, resolved (or, for the pipeline's own Spark functions, built)
by Maven into `<home>/jars`.

Maven's own configuration decides where artifacts come from; nothing here names a download host.
A bundle is resolved once: a stamp holding the pom's hash makes the next run instant and offline.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

POM_ROOT = Path(__file__).resolve().parents[2] / "jvm"
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


class SetupError(RuntimeError):
    """A JVM artifact could not be resolved; the message says which and what to do."""


@dataclass(frozen=True)
class Bundle:
    """One pom and the Maven goal that lays its artifacts into a folder; `built`: the pom's module has sources
    of its own (under `src/`), which Maven compiles, so they count in what makes a build current; `extract`: the
    goal copies a `.tar.gz` whose folders of these names are laid out instead (Maven's own unpacking writes a tar
    hard link as an empty file, and Trino's archive shares its jars between plugins that way)."""

    name: str
    goal: str
    built: bool = False
    extract: tuple[str, ...] = ()

    @property
    def pom(self) -> Path:
        return POM_ROOT / self.name / "pom.xml"

    def folder(self, jars_dir: Path) -> Path:
        return jars_dir / self.name

    def is_resolved(self, jars_dir: Path) -> bool:
        stamp = self.folder(jars_dir) / ".resolved"
        return stamp.is_file() and stamp.read_text() == self._fingerprint()

    def resolve(self, jars_dir: Path, offline: bool = False) -> Path:
        """Run Maven unless this exact pom was resolved before; return the folder."""
        folder = self.folder(jars_dir)
        if self.is_resolved(jars_dir):
            return folder
        mvn = shutil.which("mvn")
        if mvn is None:
            raise SetupError("Maven ('mvn') is not on PATH: install Maven 3.8+ (e.g. apt-get install maven)")
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [mvn, "-B", "-q", "-f", str(self.pom), self.goal, f"-DoutputDirectory={staging}"]
        if self.goal.startswith("dependency:copy-dependencies"):
            cmd.append("-DincludeScope=runtime")
        if offline:
            cmd.append("-o")
        log.info("jvm.resolve", bundle=self.name, pom=str(self.pom))
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise SetupError(f"Maven could not resolve the '{self.name}' bundle ({self.pom}):\n{tail}")
        for archive in staging.glob("*.tar.gz") if self.extract else ():
            _extract(archive, self.extract)
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)  # the folder appears whole or not at all
        (folder / ".resolved").write_text(self._fingerprint())
        return folder

    def _fingerprint(self) -> str:
        digest = hashlib.sha256(self.pom.read_bytes())
        digest.update(" ".join(self.extract).encode())  # another layout of the same archive is another bundle
        if self.built:
            for source in sorted((self.pom.parent / "src").rglob("*")):
                if source.is_file():
                    digest.update(str(source.relative_to(self.pom.parent)).encode())
                    digest.update(source.read_bytes())
        return digest.hexdigest()


def _extract(archive: Path, folders: tuple[str, ...]) -> None:
    """Lay out `folders` of the archive's one top folder beside it, then delete the archive.

    A hard link's target comes earlier in the archive, so one forward pass lays it out too; where it lies
    outside `folders` it goes with the rest of the top folder, the link keeping its content."""
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        top = members[0].name.split("/")[0]
        wanted = [m for m in members if m.name.removeprefix(f"{top}/").startswith(folders)]
        needed = {m.name for m in wanted} | {m.linkname for m in wanted if m.islnk()}
        tar.extractall(archive.parent, members=[m for m in members if m.name in needed], filter="data")
    archive.unlink()
    for folder in folders:
        (archive.parent / folder).parent.mkdir(parents=True, exist_ok=True)
        (archive.parent / top / folder).rename(archive.parent / folder)
    shutil.rmtree(archive.parent / top)


SPARK = Bundle("spark", "dependency:copy-dependencies")
KAFKA = Bundle("kafka", "dependency:copy-dependencies")
APICURIO = Bundle("apicurio", "dependency:unpack@registry")
CONNECT = Bundle("connect", "dependency:copy-dependencies")  # Kafka Connect + Debezium + Apicurio's converter
FUNCTIONS = Bundle("cdc", "package", built=True)  # the pipeline's own Spark functions (`cdc/native.py`)
LOCAL_FS = Bundle("localfs", "package", built=True)  # Hadoop's local file system without a process a file
TRINO = Bundle("trino", "dependency:copy@server",  # the engine Athena runs, with its Iceberg and Delta Lake connectors
               extract=("lib/", "plugin/iceberg/", "plugin/delta-lake/"))
BUNDLES = (SPARK, KAFKA, APICURIO, CONNECT, FUNCTIONS, LOCAL_FS, TRINO)


def resolve_all(jars_dir: Path, offline: bool = False) -> dict[str, Path]:
    return {bundle.name: bundle.resolve(jars_dir, offline) for bundle in BUNDLES}


def spark_home() -> Path:
    """The installed PySpark distribution: Spark's own jars, `bin/spark-submit`, the standalone daemons' classes."""
    import pyspark

    return Path(pyspark.__file__).parent


def spark_jars(jars_dir: Path) -> list[Path]:
    """The connector jars Spark loads locally; a clear error when `pipeline setup` has not run."""
    if not SPARK.is_resolved(jars_dir):
        raise SetupError(
            f"Spark connector jars are missing in {SPARK.folder(jars_dir)}: run `python -m pipeline setup` "
            "(or set spark.connector_jars = 'submit' when spark-submit provides them with --packages)"
        )
    if not FUNCTIONS.is_resolved(jars_dir):
        raise SetupError(f"the pipeline's Spark functions are not built in {FUNCTIONS.folder(jars_dir)}: run "
                         "`python -m pipeline setup`")
    return sorted(SPARK.folder(jars_dir).glob("*.jar")) + sorted(FUNCTIONS.folder(jars_dir).glob("*.jar"))


def local_fs_jars(jars_dir: Path) -> list[Path]:
    """jvm/localfs's jar (`cdc.hadoop.LocalFileSystem`), or none when `pipeline setup` has not built it."""
    return sorted(LOCAL_FS.folder(jars_dir).glob("*.jar")) if LOCAL_FS.is_resolved(jars_dir) else []


# S3A belongs to the cluster's Hadoop: hadoop-aws must match its Hadoop version exactly, and EMR brings its own
# (with EMRFS for s3://). So spark-submit does not get the local S3A pieces as packages.
CLUSTER_PROVIDED_GROUPS = ("org.apache.hadoop", "software.amazon.awssdk")


def spark_packages() -> list[str]:
    """The Spark bundle's direct coordinates, as `spark-submit --packages` takes them (S3A aside)."""
    root = ET.parse(SPARK.pom).getroot()
    props = {el.tag.split("}")[1]: (el.text or "") for el in root.find("m:properties", _NS) or []}
    coordinates = []
    for dep in root.iterfind("m:dependencies/m:dependency", _NS):
        group, artifact, version = (dep.findtext(f"m:{tag}", "", _NS) for tag in ("groupId", "artifactId", "version"))
        if group in CLUSTER_PROVIDED_GROUPS:
            continue
        for key, value in props.items():
            version = version.replace("${" + key + "}", value)
        coordinates.append(f"{group}:{artifact}:{version}")
    return coordinates
