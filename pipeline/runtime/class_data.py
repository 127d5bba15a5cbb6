"""A class-data sharing archive (Java's CDS) of the classes a local Spark driver loads, so each command starts sooner.

Every `python -m pipeline <command>` that runs Spark locally starts a JVM that loads the same classes of Spark,
Iceberg, Delta and Kafka from the same jars, and loading them is most of its start: a local session with the
connector jars took 8.7-10.8 CPU-seconds to its first query (15 s), and 4.7-5.4 (6.5-8 s) mapping them from
this archive. Java 17 writes such an archive when a JVM started with `-XX:ArchiveClassesAtExit` exits, so
`pipeline setup` runs one short training session (`train`) and later local sessions map what it wrote
(`java_option`). The archive is named by what it depends on (the JVM, PySpark's folder, the connector jars): a
change of any of them names a new one, and until `setup` writes it a session starts as before. Remote
executors and drivers on a cluster have no such file and get no option.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import structlog

from pipeline.config.settings import PipelineConfig, load_config

log = structlog.get_logger(__name__)

FOLDER = "class-data"
TRAINING_TIMEOUT_S = 900


def archive(cfg: PipelineConfig) -> Path:
    """Where the archive for this JVM, PySpark and set of connector jars is (or will be)."""
    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=str(Path(home) / "bin")) if home else shutil.which("java")
    parts = [os.path.realpath(java or "java"), str(Path(pyspark.__file__).parent), pyspark.__version__]
    # the JVM maps an archive only while every jar has the size and time it had when the archive was written
    jars = [jar for jar in sorted(cfg.jars_dir.glob("*/*.jar")) if jar.parent.name in ("spark", "cdc", "localfs")]
    parts += [f"{jar.name}:{jar.stat().st_size}:{jar.stat().st_mtime_ns}" for jar in jars]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return cfg.jars_dir / FOLDER / f"spark-{digest}.jsa"


def java_option(cfg: PipelineConfig, local: bool) -> str | None:
    """The driver's JVM option that maps the archive: for a local master with the archive written, else None."""
    if not (cfg.spark.class_data and local):
        return None
    path = archive(cfg)
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off" if path.is_file() else None


def train(cfg: PipelineConfig) -> Path | None:
    """Write the archive unless it is there: one short local session in a throw-away home, whose JVM writes it at
    its exit, then delete the archives of other jars. Returns it, or None (with a warning: sessions then start
    without it) when the training failed."""
    path = archive(cfg)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    written = path.with_suffix(f".{os.getpid()}.tmp")
    command = [sys.executable, "-m", "pipeline.runtime.class_data", str(cfg.jars_dir), str(written)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=TRAINING_TIMEOUT_S)
    if run.returncode != 0 or not written.is_file():
        written.unlink(missing_ok=True)
        log.warning("class_data.not_written", archive=str(path), error=run.stderr.strip().splitlines()[-1:],
                    fix="local sessions start without it; run `python -m pipeline setup` again to retry")
        return None
    written.rename(path)
    for stale in path.parent.glob("spark-*.jsa"):  # of jars no longer there: 220 MB each, mapped by no new JVM
        if stale != path:
            stale.unlink(missing_ok=True)
    return path


def _training_session(jars: Path, written: Path) -> None:
    """A session as a stage starts one, doing what the stages do with each format so that their classes load."""
    from delta.tables import DeltaTable
    from pyspark import SparkContext
    from pyspark.sql.avro.functions import from_avro

    from pipeline.runtime.spark import get_spark

    with tempfile.TemporaryDirectory() as home:
        cfg = load_config(overrides=[
            f"home={home}", f"jars={jars}", "spark.master=local[2]", "spark.class_data=false",
            f"spark.conf.spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={written} -Xlog:cds=off "
            "-Xlog:cds+dynamic=off"], environ={})
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
        gateway.proc.wait(timeout=TRAINING_TIMEOUT_S)


if __name__ == "__main__":
    _training_session(Path(sys.argv[1]), Path(sys.argv[2]))
