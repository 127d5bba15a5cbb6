"""One class-data sharing archive (Java's CDS) for every Spark JVM the suite starts.

The suite starts dozens of Spark JVMs: a shared session per worker, the stage processes a test kills, the
cluster's drivers and executors. Each loads the same classes of Spark, Iceberg, Delta and Kafka from the same
jars, and loading them is most of a JVM's start: a local session with the connector jars took 8.7 CPU-seconds
to its first query (15 s), and 4.7 (6.5 s) mapping them from this archive. Java 17 writes such an archive at the
exit of a JVM started with `-XX:ArchiveClassesAtExit`, so one training run writes it once per checkout, Java and
set of jars: `make test` runs `python -m tests.class_data` before pytest. A JVM started without the archive in
place starts as before; one whose class path does not match it warns and starts without it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

REPO = Path(__file__).resolve().parent.parent
JARS = REPO / ".pipeline" / "jars"


def _fingerprint() -> str:
    """What the archive depends on: the JVM, Spark's own class path (its folder's path is part of it) and the
    connector jars every session loads."""
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if "JAVA_HOME" in os.environ \
        else shutil.which("java")
    parts = [os.path.realpath(java or "java"), str(Path(pyspark.__file__).parent), pyspark.__version__]
    parts += [f"{jar.name}:{jar.stat().st_size}" for folder in ("spark", "cdc")
              for jar in sorted((JARS / folder).glob("*.jar"))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


ARCHIVE = JARS / "class-data" / f"spark-{_fingerprint()}.jsa"
JAVA_OPTION = f"-XX:SharedArchiveFile={ARCHIVE}"  # given to every Spark JVM of the suite (tests/conftest.py)


def ensure_archive() -> None:
    """Write the archive unless it is there; pytest-xdist's workers take turns, so one of them writes it."""
    ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    with open(ARCHIVE.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ARCHIVE.exists():
            return
        written = ARCHIVE.with_suffix(f".{os.getpid()}.tmp")
        print(f"class data: training a Spark JVM for {ARCHIVE} (once per checkout, Java and jars)", flush=True)
        run = subprocess.run([sys.executable, "-m", "tests.class_data", "--train", str(written)], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
        if run.returncode != 0 or not written.is_file():
            written.unlink(missing_ok=True)
            raise RuntimeError(f"the training run for {ARCHIVE.name} failed:\n{run.stderr[-3000:]}")
        written.rename(ARCHIVE)


def _train(archive: Path) -> None:
    """A session as a stage starts it (code generation on), doing what the stages do with each format, so their
    classes are loaded; the archive is written when its JVM exits."""
    from delta.tables import DeltaTable
    from pyspark import SparkContext
    from pyspark.sql.avro.functions import from_avro

    from pipeline.config.settings import load_config
    from pipeline.runtime.spark import get_spark
    from tests.conftest import TEST_SETTINGS

    with tempfile.TemporaryDirectory() as home:
        cfg = load_config(overrides=[*TEST_SETTINGS, f"home={home}", "spark.conf.spark.driver.extraJavaOptions="
                                     f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={archive}"], environ={})
        spark = get_spark(cfg)
        table = f"{cfg.catalog.name}.training.rows"
        spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING) USING iceberg PARTITIONED BY (bucket(2, id))")
        spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
        spark.sql(f"MERGE INTO {table} t USING (SELECT 2L AS id, 'c' AS name) s ON t.id = s.id "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        spark.table(table).groupBy("name").count().collect()
        delta = str(Path(home, "delta"))
        spark.range(3).write.format("delta").save(delta)
        (DeltaTable.forPath(spark, delta).alias("t").merge(spark.range(1).alias("s"), "t.id = s.id")
         .whenMatchedDelete().execute())
        schema = '{"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]}'
        spark.sql("SELECT X'02' AS body").select(from_avro("body", schema)).collect()
        spark.stop()
        gateway = SparkContext._gateway
        gateway.proc.stdin.close()  # the JVM exits when its parent's pipe closes, and writes the archive then
        gateway.proc.wait(timeout=300)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--train"]:
        _train(Path(sys.argv[2]))
    else:
        ensure_archive()
