import os
import subprocess
from pathlib import Path

import pytest

from pipeline.runtime import jvm
from pipeline.config.settings import load_config
from pipeline.runtime.spark import BATCH_COLLECTOR, BATCH_JAVA_OPTIONS, spark_conf
from tables.catalog import pyiceberg_properties, sqlalchemy_url


def _cfg(tmp_path: Path, *overrides: str):
    return load_config(overrides=[f"home={tmp_path}", "spark.connector_jars=submit", *overrides], environ={})


def test_iceberg_and_delta_share_one_session(tmp_path: Path) -> None:
    conf = spark_conf(_cfg(tmp_path))
    assert "IcebergSparkSessionExtensions" in conf["spark.sql.extensions"]
    assert "DeltaSparkSessionExtension" in conf["spark.sql.extensions"]
    assert conf["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog")
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.master"] == "local[*]"
    assert "spark.jars" not in conf  # spark-submit --packages provides them


def test_column_calls_record_no_python_call_site_unless_asked(tmp_path: Path) -> None:
    assert spark_conf(_cfg(tmp_path))["spark.python.sql.dataFrameDebugging.enabled"] == "false"
    asked = _cfg(tmp_path, "spark.conf.spark.python.sql.dataFrameDebugging.enabled=true")
    assert spark_conf(asked)["spark.python.sql.dataFrameDebugging.enabled"] == "true"


def test_jdbc_catalog_is_the_one_pyiceberg_opens(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    conf = spark_conf(cfg)
    props = pyiceberg_properties(cfg.catalog, cfg.aws)
    assert conf["spark.sql.catalog.lake.type"] == "jdbc"
    assert conf["spark.sql.catalog.lake.jdbc.schema-version"] == "V1"
    assert conf["spark.sql.catalog.lake.uri"] == f"jdbc:sqlite:{tmp_path / 'catalog.db'}"
    assert props["type"] == "sql"
    assert props["uri"] == f"sqlite:///{tmp_path / 'catalog.db'}"
    assert props["warehouse"] == conf["spark.sql.catalog.lake.warehouse"] == (tmp_path / "warehouse").as_uri()


def test_glue_catalog_on_s3(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "catalog.type=glue", "catalog.warehouse=s3://lake/warehouse")
    conf = spark_conf(cfg)
    assert conf["spark.sql.catalog.lake.type"] == "glue"
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lake.glue.endpoint"] == "http://127.0.0.1:5000"
    assert conf["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    props = pyiceberg_properties(cfg.catalog, cfg.aws)
    assert (props["type"], props["glue.endpoint"], props["s3.endpoint"]) == ("glue", "http://127.0.0.1:5000", "http://127.0.0.1:5000")


def test_glue_against_real_aws_sets_no_endpoints(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "catalog.type=glue", "catalog.warehouse=s3://lake/wh", "aws.endpoint_url=")
    conf = spark_conf(cfg)
    assert not any(key.endswith(("glue.endpoint", "s3.endpoint")) for key in conf)


def test_rest_catalog(tmp_path: Path) -> None:
    conf = spark_conf(_cfg(tmp_path, "catalog.type=rest", "catalog.uri=http://rest:8181"))
    assert (conf["spark.sql.catalog.lake.type"], conf["spark.sql.catalog.lake.uri"]) == ("rest", "http://rest:8181")


def test_user_conf_wins(tmp_path: Path) -> None:
    conf = spark_conf(_cfg(tmp_path, "spark.conf.spark.sql.shuffle.partitions=64", "spark.master="))
    assert conf["spark.sql.shuffle.partitions"] == "64"
    assert "spark.master" not in conf


def test_a_bounded_local_run_gets_the_batch_jvm_unless_told(tmp_path: Path) -> None:
    def options(*overrides: str, bounded: bool) -> str:
        return spark_conf(_cfg(tmp_path, *overrides), bounded)["spark.driver.extraJavaOptions"]

    batch = f"{BATCH_JAVA_OPTIONS} {BATCH_COLLECTOR}"
    assert batch in options(bounded=True)
    assert BATCH_JAVA_OPTIONS not in options(bounded=False)  # a stream's driver keeps the JVM's own
    assert BATCH_COLLECTOR not in options(bounded=False)
    assert BATCH_JAVA_OPTIONS not in options("spark.jvm=service", bounded=True)
    assert batch in options("spark.jvm=batch", bounded=False)
    assert BATCH_JAVA_OPTIONS not in options("spark.master=spark://master:7077", bounded=True)  # runs no task
    # the user's own JVM options come after the pipeline's: the JVM takes the last of a repeated flag
    told = options("spark.conf.spark.driver.extraJavaOptions=-XX:Tier4InvocationThreshold=9", bounded=True)
    assert told.index(BATCH_JAVA_OPTIONS) < told.index("-XX:Tier4InvocationThreshold=9")
    # but two collectors stop the JVM at its start: theirs alone
    theirs = options("spark.conf.spark.driver.extraJavaOptions=-XX:+UseG1GC -Xss4m", bounded=True)
    assert BATCH_JAVA_OPTIONS in theirs and BATCH_COLLECTOR not in theirs and "-XX:+UseG1GC" in theirs


def test_local_jars_missing_is_a_clear_error(tmp_path: Path) -> None:
    cfg = load_config(overrides=[f"home={tmp_path}"], environ={})
    with pytest.raises(jvm.SetupError, match="python -m pipeline setup"):
        spark_conf(cfg)


def test_sqlalchemy_url() -> None:
    assert sqlalchemy_url("jdbc:sqlite:/a/b.db") == "sqlite:////a/b.db"
    assert sqlalchemy_url("jdbc:postgresql://db:5432/cat") == "postgresql://db:5432/cat"
    with pytest.raises(ValueError, match="not a JDBC URL"):
        sqlalchemy_url("sqlite:///x")


def test_packages_come_from_the_checked_in_pom() -> None:
    packages = jvm.spark_packages()
    assert "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0" in packages
    assert "io.delta:delta-spark_4.1_2.13:4.4.0" in packages
    assert all(p.count(":") == 2 and "${" not in p for p in packages)


def test_spark_connectors_match_the_installed_pyspark() -> None:
    import pyspark

    packages = jvm.spark_packages()
    assert f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}" in packages
    assert f"org.apache.spark:spark-avro_2.13:{pyspark.__version__}" in packages


def test_hive_catalog_is_the_embedded_metastore_by_default(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "catalog.type=hive", "stack.metastore_port=9999")
    conf = spark_conf(cfg)
    props = pyiceberg_properties(cfg.catalog, cfg.aws)
    assert conf["spark.sql.catalog.lake.type"] == props["type"] == "hive"
    assert conf["spark.sql.catalog.lake.uri"] == props["uri"] == "thrift://127.0.0.1:9999"
    assert conf["spark.sql.catalog.lake.hadoop.iceberg.engine.hive.lock-enabled"] == "false"
    assert props["warehouse"] == (tmp_path / "warehouse").as_uri()


def test_s3a_points_at_the_endpoint_without_secrets(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "aws.endpoint_url=http://127.0.0.1:5000", "aws.access_key_id=AKIDSECRET",
               "aws.secret_access_key=verysecret")
    conf = spark_conf(cfg)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:5000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("EnvironmentVariableCredentialsProvider")
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    # PySpark passes its settings on spark-submit's command line: keys never go there.
    assert not any("SECRET" in value.upper() for value in conf.values())


def test_s3a_on_real_aws_uses_the_default_chain(tmp_path: Path) -> None:
    conf = spark_conf(_cfg(tmp_path, "aws.endpoint_url=", "aws.region=eu-west-1", "spark.s3_scheme=cluster"))
    assert not any(key.startswith("spark.hadoop.fs.s3a.endpoint") and key != "spark.hadoop.fs.s3a.endpoint.region"
                   for key in conf)
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(".DefaultCredentialsProvider")
    assert "spark.hadoop.fs.s3.impl" not in conf  # EMR keeps EMRFS for s3://


def test_s3a_is_not_a_package_for_spark_submit() -> None:
    packages = jvm.spark_packages()
    assert not any(p.startswith(("org.apache.hadoop:", "software.amazon.awssdk:")) for p in packages)
    assert "org.apache.iceberg:iceberg-aws-bundle:1.12.0" in packages


def test_the_kafka_source_waits_briefly_per_fetch_unless_the_properties_say_otherwise(tmp_path: Path) -> None:
    from pipeline.config.kafka import spark_options

    options = spark_options(_cfg(tmp_path, "kafka.bootstrap_servers=broker:9092").kafka)
    assert options["kafka.fetch.max.wait.ms"] == "10" and options["kafka.bootstrap.servers"] == "broker:9092"
    tuned = spark_options(_cfg(tmp_path, "kafka.properties.fetch.max.wait.ms=200").kafka)
    assert tuned["kafka.fetch.max.wait.ms"] == "200"


def test_python_workers_fork_from_the_preloading_daemon_unless_switched_off(tmp_path: Path) -> None:
    assert spark_conf(_cfg(tmp_path))["spark.python.daemon.module"] == "pipeline.runtime.worker_daemon"
    assert "spark.python.daemon.module" not in spark_conf(_cfg(tmp_path, "spark.preload_workers=false"))


def test_session_logs_to_a_file_and_only_errors_to_the_console(tmp_path: Path) -> None:
    from pipeline.runtime.spark import log_config, log_config_path

    cfg = _cfg(tmp_path)
    conf = spark_conf(cfg)
    assert conf["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile={log_config_path(cfg).as_uri()}"
    assert log_config_path(cfg) == tmp_path.resolve() / "logs" / "log4j2-spark.properties"
    assert conf["spark.driver.host"] == "127.0.0.1"  # local mode: no loopback-hostname warning
    text = log_config(cfg)
    assert f"appender.file.fileName = {tmp_path.resolve() / 'logs' / 'spark.log'}" in text
    assert "rootLogger.level = info" in text and "logger.gateway.level = info" in text
    assert "appender.console.filter.threshold.level = error" in text
    assert "appender.console.target = SYSTEM_ERR" in text
    assert "logger.kafka.name = org.apache.kafka\nlogger.kafka.level = warn" in text  # no config dump a consumer


def test_both_log_layouts_mask_the_message_and_the_exception_by_the_one_rule(tmp_path: Path) -> None:
    from pipeline.config.redaction import java_replacements
    from pipeline.runtime.spark import log_config

    text = log_config(_cfg(tmp_path))
    replacements = java_replacements()
    for appender in ("file", "console"):
        [pattern] = [line for line in text.splitlines() if line.startswith(f"appender.{appender}.layout.pattern")]
        assert pattern.count("%replace{") == 2 * len(replacements)  # around %m and around %ex
        nested = "%replace{" * len(replacements)
        assert f"{nested}%m}}" in pattern and f"{nested}%ex}}" in pattern
        for regex, replacement in replacements:  # backslashes doubled for the .properties file
            assert f"{{{regex.replace(chr(92), chr(92) * 2)}}}{{{replacement}}}" in pattern
        assert f"appender.{appender}.layout.alwaysWriteExceptions = false" in text  # no second, unmasked trace


def test_verbose_and_debug_bring_the_console_back(tmp_path: Path) -> None:
    from pipeline.cli.main import _console_level
    from pipeline.cli.parser import build_parser
    from pipeline.runtime.spark import log_config

    cfg = _cfg(tmp_path)
    for flags, level in ([], "ERROR"), (["--verbose"], "WARN"), (["--log-level", "DEBUG"], "INFO"):
        shown = _console_level(cfg, build_parser().parse_args([*flags, "config"]))
        assert shown.spark.console_log_level == level
        assert f"appender.console.filter.threshold.level = {level.lower()}" in log_config(shown)


def test_user_jvm_options_and_driver_host_are_kept(tmp_path: Path) -> None:
    from pipeline.runtime.spark import log_config_path

    cfg = _cfg(tmp_path, "spark.conf.spark.driver.extraJavaOptions=-Xss4m", "spark.conf.spark.driver.host=10.0.0.5")
    conf = spark_conf(cfg)
    assert conf["spark.driver.extraJavaOptions"] == (
        f"-Dlog4j2.configurationFile={log_config_path(cfg).as_uri()} -Xss4m")
    assert conf["spark.driver.host"] == "10.0.0.5"
    own = spark_conf(_cfg(tmp_path, "spark.conf.spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:/x"))
    assert own["spark.driver.extraJavaOptions"] == "-Dlog4j2.configurationFile=file:/x"


def test_no_driver_host_under_spark_submit(tmp_path: Path) -> None:
    assert "spark.driver.host" not in spark_conf(_cfg(tmp_path, "spark.master="))


def test_librdkafka_logs_through_python_logging(tmp_path: Path) -> None:
    import logging

    from pipeline.config import kafka

    from pipeline.runtime import logs

    cfg = _cfg(tmp_path)
    assert kafka.client_conf(cfg.kafka)["logger"] is kafka.LIBRDKAFKA
    assert not any("logger" in key for key in kafka.spark_options(cfg.kafka))
    logs.configure("INFO")
    assert logging.getLogger("librdkafka").getEffectiveLevel() == logging.ERROR
    logs.configure("INFO", verbose=True)
    assert logging.getLogger("librdkafka").level == logging.NOTSET  # the root logger's level again
    logs.configure("INFO")


def test_a_local_driver_maps_the_class_data_archive_once_setup_wrote_it(tmp_path: Path) -> None:
    from pipeline.runtime import class_data

    cfg = _cfg(tmp_path)
    assert "SharedArchiveFile" not in spark_conf(cfg)["spark.driver.extraJavaOptions"]  # not written yet
    written = class_data.archive(cfg)
    written.parent.mkdir(parents=True)
    written.write_bytes(b"")
    assert f"-XX:SharedArchiveFile={written}" in spark_conf(cfg)["spark.driver.extraJavaOptions"].split()
    for off in ("spark.master=spark://10.0.0.5:7077", "spark.class_data=false"):  # remote drivers have no such file
        assert "SharedArchiveFile" not in spark_conf(_cfg(tmp_path, off))["spark.driver.extraJavaOptions"], off
    (cfg.jars_dir / "spark").mkdir(parents=True)
    jar = cfg.jars_dir / "spark" / "iceberg-spark-runtime-9.jar"
    jar.write_bytes(b"jar")
    assert class_data.archive(cfg) != written  # another set of jars: another archive, which setup writes
    before = class_data.archive(cfg)
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 10**9))
    assert class_data.archive(cfg) != before  # rebuilt at its size: the JVM refuses an archive of the old one


def test_a_new_class_data_archive_replaces_those_of_other_jars(tmp_path: Path, monkeypatch) -> None:
    from pipeline.runtime import class_data

    cfg = _cfg(tmp_path)
    folder = class_data.archive(cfg).parent
    folder.mkdir(parents=True)
    stale = folder / "spark-0123456789abcdef.jsa"
    stale.write_bytes(b"an archive of jars since rebuilt")

    def training(command: list[str], **_: object) -> subprocess.CompletedProcess:
        Path(command[-1]).write_bytes(b"archive")  # the training JVM writes it at its exit
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(class_data.subprocess, "run", training)
    written = class_data.train(cfg)
    assert written == class_data.archive(cfg) and written.read_bytes() == b"archive"
    assert sorted(folder.iterdir()) == [written]  # the stale one is gone


def test_a_local_driver_creates_local_files_without_a_process_once_setup_built_it(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """jvm/localfs's file system goes on the class path of a local driver the pipeline starts (spark-submit reads
    the jars through it before they load), and is the `file:` file system; without its jar, on a cluster or under
    spark-submit, Hadoop's own."""
    cfg = _cfg(tmp_path, "spark.connector_jars=local")
    monkeypatch.setattr(jvm, "spark_jars", lambda jars_dir: [])
    assert "spark.hadoop.fs.file.impl" not in spark_conf(cfg)  # not built yet
    jar = cfg.jars_dir / "localfs" / "cdc-localfs-1.jar"
    monkeypatch.setattr(jvm, "local_fs_jars", lambda jars_dir: [jar] if jars_dir == cfg.jars_dir else [])
    assert "spark.hadoop.fs.file.impl" not in spark_conf(_cfg(tmp_path))  # spark-submit provides the jars
    conf = spark_conf(cfg)
    assert (conf["spark.driver.extraClassPath"], conf["spark.hadoop.fs.file.impl"]) == (
        str(jar), "cdc.hadoop.LocalFileSystem")
    remote = spark_conf(_cfg(tmp_path, "spark.connector_jars=local", "spark.master=spark://10.0.0.5:7077"))
    assert "spark.hadoop.fs.file.impl" not in remote and "spark.driver.extraClassPath" not in remote
    # a class path of the user's (the SQL server's connector jars) keeps it: without it the JVM would not start
    users = spark_conf(_cfg(tmp_path, "spark.connector_jars=local",
                            "spark.conf.spark.driver.extraClassPath=/x.jar:/y.jar"))
    assert users["spark.driver.extraClassPath"] == f"/x.jar:/y.jar:{jar}"


def test_a_local_warehouse_is_read_and_written_through_the_pipelines_local_file_io(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """Iceberg's FileIO on the local disk is jvm/cdc's, which sends no Hadoop configuration to tasks: only where
    that jar is loaded (local jars) and the warehouse is a local path; a catalog that names its own keeps it."""
    monkeypatch.setattr(jvm, "spark_jars", lambda jars_dir: [])
    key = "spark.sql.catalog.lake.io-impl"
    assert spark_conf(_cfg(tmp_path, "spark.connector_jars=local"))[key] == "cdc.iceberg.LocalFileIO"
    assert key not in spark_conf(_cfg(tmp_path))  # spark-submit's jars: jvm/cdc's may not be among them
    on_s3 = _cfg(tmp_path, "spark.connector_jars=local", "catalog.warehouse=s3://lake/wh")
    assert spark_conf(on_s3)[key] == "org.apache.iceberg.aws.s3.S3FileIO"
    own = _cfg(tmp_path, "spark.connector_jars=local", "catalog.properties.io-impl=org.apache.iceberg.hadoop.HadoopFileIO")
    assert spark_conf(own)[key] == "org.apache.iceberg.hadoop.HadoopFileIO"
