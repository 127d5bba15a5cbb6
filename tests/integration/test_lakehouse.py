"""Spark writes and reads Iceberg and Delta in one session; pyiceberg reads what Spark wrote."""

from __future__ import annotations

import os
import stat
import threading
import uuid
from pathlib import Path

import boto3
import pytest

from pipeline.ops import smoke
from pipeline.runtime import scratch
from pipeline.config.settings import PipelineConfig
from pipeline.runtime.sessions import SessionPool
from tables.catalog import load_pyiceberg_catalog, pyiceberg_properties, spark_catalog_conf
from tables.lake import IcebergLakeTable, create_namespace
from tests.conftest import make_config

pytestmark = pytest.mark.integration

ROWS = [(1, "Ansel Adams", "American"), (2, "Berenice Abbott", "American"), (3, "Man Ray", None)]


def test_a_local_session_keeps_its_scratch_under_the_home(spark, cfg: PipelineConfig) -> None:
    """Not in /tmp, where a killed driver's blocks stayed for good: under the home, swept by the next session."""
    folder = cfg.home.resolve() / scratch.FOLDER / str(os.getpid())
    assert spark.sparkContext.getConf().get("spark.local.dir") == str(folder)
    assert any(child.name.startswith("spark-") for child in folder.iterdir())  # Spark's own temporary folder


def test_iceberg_written_by_spark_is_read_by_pyiceberg(spark, cfg: PipelineConfig) -> None:
    table = f"artists_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.it")
    spark.createDataFrame(ROWS, "id long, name string, nationality string") \
        .writeTo(f"{cfg.catalog.name}.it.{table}").using("iceberg").create()
    assert sorted(tuple(r) for r in spark.table(f"it.{table}").collect()) == ROWS  # the default catalog
    arrow = load_pyiceberg_catalog(cfg.catalog, cfg.aws).load_table(("it", table)).scan().to_arrow()
    assert sorted(zip(*arrow.to_pydict().values())) == ROWS


def test_local_iceberg_files_go_through_the_pipelines_file_io(spark, cfg: PipelineConfig) -> None:
    """jvm/cdc's FileIO on a local warehouse: a table sent to tasks carries no Hadoop configuration, a file is
    written with one of no default resources (Iceberg's Parquet writer parses Hadoop's defaults for every file
    otherwise), no checksum file is written, locations keep their `file:` scheme, and a checksum file Hadoop wrote
    beside a file is neither listed nor left behind when the file is replaced or goes."""
    from py4j.protocol import Py4JJavaError

    from tables.append import iceberg_table

    ref = f"{cfg.catalog.name}.it.io_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.it")
    frame = spark.createDataFrame(ROWS, "id long, name string, nationality string")
    frame.writeTo(ref).using("iceberg").create()
    frame.writeTo(ref).append()
    assert spark.table(ref).count() == 2 * len(ROWS)
    table = iceberg_table(spark, ref)
    io = table.io()
    assert io.getClass().getName() == "cdc.iceberg.LocalFileIO"

    jvm = spark.sparkContext._jvm
    def serialized(value) -> int:  # type: ignore[no-untyped-def]
        data = jvm.java.io.ByteArrayOutputStream()
        objects = jvm.java.io.ObjectOutputStream(data)
        objects.writeObject(value)
        objects.close()
        return data.size()
    hadoop_io = jvm.org.apache.iceberg.hadoop.HadoopFileIO(spark.sparkContext._jsc.hadoopConfiguration())
    sent = serialized(jvm.org.apache.iceberg.spark.source.SerializableTableWithSize.copyOf(table))
    assert sent < serialized(hadoop_io) / 2  # the whole table, against Hadoop's FileIO alone

    listed = [info.location() for info in io.listPrefix(table.location())]
    assert listed and all(location.startswith("file:") for location in listed)
    tasks, recorded = table.newScan().planFiles().iterator(), []
    while tasks.hasNext():
        recorded.append(tasks.next().file().location())
    assert all(location.startswith("file:") for location in recorded)
    assert sum("/data/" in location for location in listed) == len(recorded) > 0
    assert any(location.endswith(".metadata.json") for location in listed)
    assert not list(Path(table.location().removeprefix("file:")).rglob("*.crc"))
    data = next(location for location in listed if "/data/" in location)

    written_by_hadoop = Path(data.removeprefix("file:"))
    checksum = written_by_hadoop.with_name(f".{written_by_hadoop.name}.crc")
    checksum.write_bytes(b"crc")
    assert sorted(info.location() for info in io.listPrefix(table.location())) == sorted(listed)
    output = io.newOutputFile(data)
    assert output.getClass().getName() == "org.apache.iceberg.hadoop.HadoopOutputFile"  # its configuration copied
    assert output.getConf().toString() == "Configuration: "  # no core-default.xml, hdfs-default.xml, ...
    with pytest.raises(Py4JJavaError, match="AlreadyExistsException"):
        output.create()
    replaced = written_by_hadoop.read_bytes()
    written_by_hadoop.chmod(0o600)
    stream = output.createOrOverwrite()
    stream.write(replaced)
    stream.close()
    assert written_by_hadoop.read_bytes() == replaced and not checksum.exists()
    # Hadoop's permissions for a new file and folder (umask 022), set through Java's file API, not a chmod process
    assert stat.S_IMODE(written_by_hadoop.stat().st_mode) == 0o644
    nested = written_by_hadoop.parent / "new-folder" / "new-file"
    io.newOutputFile(str(nested)).create().close()
    assert (stat.S_IMODE(nested.parent.stat().st_mode), stat.S_IMODE(nested.stat().st_mode)) == (0o755, 0o644)
    io.deleteFile(str(nested))
    nested.parent.rmdir()
    checksum.write_bytes(b"crc")
    io.deleteFile(data)
    assert not written_by_hadoop.exists() and not checksum.exists()
    assert not io.newInputFile(data).exists()


def test_py4j_remembers_names_that_are_no_class_until_the_loader_gains_a_jar(spark, cfg: PipelineConfig) -> None:
    """PySpark's `jvm.a.b.C` asks the JVM about `a` and `a.b` too: jvm/cdc's lookup strategy remembers a name that
    is no class of a class loader, and finds it once that loader gains the jar that has it."""
    from py4j.java_gateway import JavaClass
    from py4j.protocol import Py4JJavaError

    absent = "io.debezium.engine.format.Json"  # a class of Debezium's API, which Spark does not have
    client = spark.sparkContext._gateway._gateway_client
    reflection = JavaClass("py4j.reflection.ReflectionUtil", client)
    strategy = reflection.getClassLoadingStrategy()
    assert strategy.getClass().getName() == "cdc.py4j.RememberedClassMisses"
    thread = JavaClass("java.lang.Thread", client).currentThread()  # this Python thread's own JVM thread
    before = thread.getContextClassLoader()
    urls = spark.sparkContext._gateway.new_array(JavaClass("java.net.URL", client), 0)
    loader = JavaClass("org.apache.spark.util.MutableURLClassLoader", client)(urls, before)
    thread.setContextClassLoader(loader)
    try:
        for _ in range(2):
            with pytest.raises(Py4JJavaError, match="ClassNotFoundException"):
                reflection.classForName(absent)
        assert strategy.remembers(loader, absent) and not strategy.remembers(before, absent)
        jar = next((cfg.jars_dir / "connect").glob("debezium-api-*.jar"))
        loader.addURL(JavaClass("java.io.File", client)(str(jar)).toURI().toURL())
        assert not strategy.remembers(loader, absent)  # the loader reads one jar more
        assert reflection.classForName(absent).getName() == absent
    finally:
        thread.setContextClassLoader(before)


def test_sessions_create_one_namespace_at_the_same_moment(spark, cfg: PipelineConfig) -> None:
    """Tables merged at once each create the mirror's namespaces; the JDBC catalog's check-then-insert must not
    fail the sessions that lose the race."""
    pool = SessionPool(spark)
    for _ in range(3):
        namespace = f"ns_{uuid.uuid4().hex[:8]}"
        together = threading.Barrier(4, timeout=120)

        def create(_: int) -> bool:
            together.wait()
            create_namespace(pool.current, cfg.catalog.name, namespace)
            return pool.current.catalog.databaseExists(f"{cfg.catalog.name}.{namespace}")

        assert pool.map(create, range(4), workers=4, name="ns") == [True] * 4


def test_an_empty_table_is_created_with_its_first_snapshot_and_namespace_in_one_commit(spark,
                                                                                     cfg: PipelineConfig) -> None:
    """A mirror's tables are created empty with their first state, an empty append (what time travel to before the
    first build shows), by one catalog commit (a run building hundreds of mirrors made two a table), in their
    namespace, which is created when missing (a pending namespace is never made beforehand)."""
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    table = IcebergLakeTable(spark, "made_empty", namespace, cfg)
    table.create(spark.createDataFrame([], "id long, name string"), [], "merge-on-read")

    assert spark.catalog.databaseExists(f"{cfg.catalog.name}.{namespace}")
    assert [row["operation"] for row in spark.sql(f"SELECT operation FROM {table.ref}.snapshots").collect()] == ["append"]
    assert spark.sql(f"SELECT * FROM {table.ref}.metadata_log_entries").count() == 1  # one metadata file: one commit
    assert table.read().isEmpty() and [f.name for f in table.fields()] == ["id", "name"]
    metadata = table._document()
    assert metadata["format-version"] == 2  # Athena reads no v3
    assert metadata["properties"]["write.merge.mode"] == "merge-on-read" and metadata["properties"]["owner"]


def test_sessions_create_tables_in_one_missing_namespace_at_the_same_moment(spark, cfg: PipelineConfig) -> None:
    """Mirrors built together create their pending tables from several sessions at once, in a namespace none of
    them finds: every table is created (a session whose create failed before another made the namespace tries
    again; CI met that interleaving, which this test cannot force)."""
    pool = SessionPool(spark)
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    together = threading.Barrier(4, timeout=120)

    def create(number: int) -> bool:
        table = IcebergLakeTable(pool.current, f"made_{number}", namespace, cfg)
        like = pool.current.createDataFrame([], "id long")
        together.wait()
        table.create(like, [], "copy-on-write")
        return table.exists()

    assert pool.map(create, range(4), workers=4, name="made") == [True] * 4


def test_delta_round_trip_with_time_travel(spark, cfg: PipelineConfig) -> None:
    path = f"{cfg.lake.delta_root}/it/artists_{uuid.uuid4().hex[:8]}"
    spark.createDataFrame(ROWS[:2], "id long, name string, nationality string").write.format("delta").save(path)
    spark.createDataFrame(ROWS[2:], "id long, name string, nationality string").write.format("delta").mode("append").save(path)
    assert spark.read.format("delta").load(path).count() == 3
    assert spark.read.format("delta").option("versionAsOf", 0).load(path).count() == 2


def test_glue_catalog_on_s3(spark, stack, cfg: PipelineConfig) -> None:
    """The Glue + S3 alternative, registered in the running session, against moto."""
    bucket = f"lake-{uuid.uuid4().hex[:8]}"
    glue_cfg = make_config("catalog.name=glue_it", "catalog.type=glue", f"catalog.warehouse=s3://{bucket}/warehouse")
    boto3.client("s3", **cfg.aws.boto3_kwargs()).create_bucket(Bucket=bucket)
    for key, value in spark_catalog_conf(glue_cfg.catalog, glue_cfg.aws).items():
        spark.conf.set(key, value)
    namespace = f"gl_{uuid.uuid4().hex[:8]}"  # a kept stack's Glue still has the last run's table
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS glue_it.{namespace}")
    spark.createDataFrame(ROWS, "id long, name string, nationality string") \
        .writeTo(f"glue_it.{namespace}.artists").using("iceberg").create()
    entry = boto3.client("glue", **cfg.aws.boto3_kwargs()).get_table(DatabaseName=namespace, Name="artists")["Table"]
    assert entry["Parameters"]["table_type"].upper() == "ICEBERG"
    assert entry["Parameters"]["metadata_location"].startswith(f"s3://{bucket}/warehouse/")
    from pyiceberg.catalog import load_catalog

    glue_catalog = load_catalog("glue_it", **pyiceberg_properties(glue_cfg.catalog, glue_cfg.aws))
    assert sorted(zip(*glue_catalog.load_table((namespace, "artists")).scan().to_arrow().to_pydict().values())) == ROWS


def test_demo_smoke_path_end_to_end(spark, stack, cfg: PipelineConfig) -> None:
    report = smoke.run(cfg, spark, rows=250)
    assert (report.produced, report.iceberg_rows, report.delta_rows, report.pyiceberg_rows) == (250, 250, 250, 250)
    decoded = spark.table(f"{smoke.NAMESPACE}.{smoke.TABLE}").where("id = 7").collect()[0]
    assert (decoded["name"], decoded["email"]) == ("customer 7", "c7@example.com")
