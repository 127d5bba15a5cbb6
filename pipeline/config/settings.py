"""The pipeline's one configuration: typed, validated, and shared by every command.

Settings come from, in rising precedence: the defaults below, a TOML file (`--config`, `$PIPELINE_CONFIG`,
or `./pipeline.toml` when present), environment variables `PIPELINE_<SECTION>__<KEY>`, and `--set
section.key=value` flags. An unknown or invalid setting fails loudly with its dotted name.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from tables.names import MAX_LENGTH, PLAIN, LakeNames
from tables.partitioning import PartitionField, parse_partition_fields

ENV_PREFIX = "PIPELINE_"
DEFAULT_CONFIG_FILE = "pipeline.toml"


class ConfigError(ValueError):
    """A setting is unknown, malformed or inconsistent; the message names it and how to fix it."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)


class StackSettings(_Section):
    """The embedded service stack that `pipeline stack up` runs on this machine."""

    host: str = "127.0.0.1"
    kafka_port: int = Field(9092, ge=1, le=65535)
    kafka_controller_port: int = Field(9093, ge=1, le=65535)
    kafka_partitions: int = Field(4, ge=1, description="default partitions of auto-created topics")
    kafka_heap: str = "512m"
    registry_port: int = Field(8080, ge=1, le=65535)
    registry_management_port: int = Field(9000, ge=1, le=65535, description="Apicurio's health endpoints")
    registry_storage: Literal["h2", "kafka"] = "h2"
    registry_heap: str = "512m"
    registry_java: Path | None = Field(None, description="a Java 21+ executable; found automatically when unset")
    moto_port: int = Field(5000, ge=1, le=65535)
    metastore: bool = Field(False, description="also run a Hive metastore (always when catalog.type = 'hive')")
    metastore_port: int = Field(9083, ge=1, le=65535)
    postgres: bool = Field(False, description="also run PostgreSQL (logical replication) and Kafka Connect with "
                           "Debezium's Postgres connector: a real CDC source (`stack up --with postgres`)")
    postgres_port: int = Field(5432, ge=1, le=65535)
    postgres_database: str = Field("shop", pattern=r"^[a-z_][a-z0-9_]*$")
    postgres_bin: Path | None = Field(None, description="the folder holding initdb/postgres/psql; found when unset")
    postgres_os_user: str = Field("postgres", description="the unprivileged account the server runs as when "
                                  "the stack is started by root (PostgreSQL refuses to run as root)")
    connect_port: int = Field(8083, ge=1, le=65535, description="Kafka Connect's REST API")
    connect_heap: str = "512m"
    java_options: str = Field("", description="JVM options for every Java service the stack starts, after each "
                              "one's own, space-separated (the tests' services compile with C1 alone)")
    trino: bool = Field(False, description="also run Trino, the engine Athena is built on, on the Glue and S3 the "
                        "pipeline writes (`stack up --with trino`)")
    trino_port: int = Field(8086, ge=1, le=65535)
    trino_heap: str = Field("4g", description="Trino's JVM heap; its queries may use 30% of it")
    trino_java: Path | None = Field(None, description="a Java 24+ executable; found automatically when unset")
    spark_cluster: bool = Field(False, description="also run a Spark standalone master and workers, each a JVM "
                                "of its own, to submit the stages to (`stack up --with spark-cluster`)")
    spark_master_port: int = Field(7077, ge=1, le=65535)
    spark_master_ui_port: int = Field(8090, ge=1, le=65535, description="the master's web UI")
    spark_workers: int = Field(2, ge=1, le=8)
    spark_worker_port: int = Field(7078, ge=1, le=65534, description="the first worker's; the next ones follow")
    spark_worker_ui_port: int = Field(8091, ge=1, le=65534, description="the first worker's web UI; the next "
                                      "ones follow")
    spark_worker_cores: int = Field(1, ge=1, description="cores each worker offers its executors")
    spark_worker_memory: str = Field("2g", description="memory each worker offers its executors")
    spark_worker_keep_s: int = Field(3600, ge=60, description="how long a worker keeps a finished application's "
                                     "folder (its copies of the jars, ~300 MB, and its executors' logs)")
    start_timeout_s: float = Field(120.0, gt=0)

    @model_validator(mode="after")
    def _distinct_ports(self) -> StackSettings:
        workers = range(self.spark_workers)
        ports = [self.kafka_port, self.kafka_controller_port, self.registry_port, self.registry_management_port,
                 self.moto_port, self.metastore_port, self.postgres_port, self.connect_port, self.trino_port,
                 self.spark_master_port, self.spark_master_ui_port,
                 *(self.spark_worker_port + i for i in workers), *(self.spark_worker_ui_port + i for i in workers)]
        if len(set(ports)) != len(ports):
            raise ValueError(f"stack ports must be distinct, got {ports}")
        return self


class KafkaSettings(_Section):
    """Kafka clients. `properties` pass through verbatim (security.protocol, sasl.*, ssl.* …)."""

    bootstrap_servers: str | None = Field(None, description="defaults to the embedded broker")
    properties: dict[str, str] = Field(default_factory=dict)
    executor_consumers: int = Field(1024, ge=1, description="Kafka consumers an executor keeps between batches "
                                    "(Spark's `spark.kafka.consumer.cache.capacity`, 64 by default): at least the "
                                    "topic partitions it reads, or each batch opens new ones")


class RegistrySettings(_Section):
    """The schema registry: which backend, how messages are framed, how subjects are named."""

    backend: Literal["ccompat", "apicurio", "glue"] = "ccompat"
    url: str | None = Field(None, description="defaults to the embedded Apicurio")
    ccompat_path: str = Field("/apis/ccompat/v7", description="appended to url for ccompat; '' for Confluent SR")
    wire_format: Literal["auto", "confluent", "apicurio-legacy", "glue"] = "auto"
    payload_id: Literal["auto", "content", "global"] = Field(
        "auto", description="the Apicurio id kind a payload frame carries; auto decides per id and subject")
    unknown_id_retry_s: float = Field(0.5, ge=0, description="an id the registry lacks is asked again this much later")
    subject_strategy: Literal["topic", "record", "topic-record"] = "topic"
    compatibility: Literal["BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
                           "FULL_TRANSITIVE", "NONE"] | None = "BACKWARD"
    group: str = Field("default", description="Apicurio artifact group (ccompat subjects live in 'default')")
    glue_registry: str = "pipeline"
    glue_compression: bool = False
    username: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    timeout_s: float = Field(10.0, gt=0)
    verify_tls: bool | str = True
    client_cert: Path | None = None
    client_key: Path | None = None

    @model_validator(mode="after")
    def _backend_matches_wire(self) -> RegistrySettings:
        if self.wire_format != "auto" and (self.backend == "glue") != (self.wire_format == "glue"):
            raise ValueError("registry.backend = 'glue' and registry.wire_format = 'glue' go together: Glue names "
                             "schema versions by UUID, which only the Glue header carries")
        if self.wire_format == "apicurio-legacy" and self.backend != "apicurio":
            raise ValueError("registry.wire_format = 'apicurio-legacy' carries global ids: use registry.backend = 'apicurio'")
        if self.glue_compression and self.written_wire_format != "glue":
            raise ValueError("registry.glue_compression needs registry.wire_format = 'glue'")
        if self.payload_id != "auto" and not self._is_apicurio:
            raise ValueError(f"registry.payload_id = '{self.payload_id}' names an Apicurio id kind, but the registry "
                             "is not an Apicurio (a Confluent Schema Registry has one kind of id, Glue names schema "
                             "versions by UUID): leave registry.payload_id = 'auto'")
        if self.client_key and not self.client_cert:
            raise ValueError("registry.client_key needs registry.client_cert")
        return self

    @property
    def written_wire_format(self) -> str:
        """The frame a serializer writes: `wire_format`, or under `auto` the backend's own (Glue's header for
        Glue, the Confluent frame otherwise)."""
        if self.wire_format != "auto":
            return self.wire_format
        return "glue" if self.backend == "glue" else "confluent"

    @property
    def apicurio_root(self) -> str | None:
        """The Apicurio root URL when the registry is an Apicurio (the `apicurio` backend, or `ccompat` through
        Apicurio's `/apis/ccompat/` API), whose native API tells global ids from content ids; else None."""
        url = (self.url or "").rstrip("/")
        if not url or not self._is_apicurio:
            return None
        return url.split("/apis/")[0]

    @property
    def _is_apicurio(self) -> bool:
        if self.backend != "ccompat":
            return self.backend == "apicurio"
        url = self.url or ""
        return "/apis/ccompat/" in (url if "/apis/" in url else self.ccompat_path + "/")

    @property
    def client_certificate(self) -> str | tuple[str, str] | None:
        """What requests takes as `cert`: one PEM, or (cert, key)."""
        if self.client_cert is None:
            return None
        return (str(self.client_cert), str(self.client_key)) if self.client_key else str(self.client_cert)


class AwsSettings(_Section):
    """AWS clients. With `endpoint_url` empty, boto3 and Iceberg use the real AWS endpoints."""

    region: str = "us-east-1"
    endpoint_url: str | None = Field(None, description="defaults to the embedded moto server; '' for AWS")
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None

    def boto3_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"region_name": self.region}
        if self.endpoint_url:
            kwargs["endpoint_url"] = self.endpoint_url
        if self.access_key_id and self.secret_access_key:
            kwargs["aws_access_key_id"] = self.access_key_id.get_secret_value()
            kwargs["aws_secret_access_key"] = self.secret_access_key.get_secret_value()
        return kwargs


class CatalogSettings(_Section):
    """The Iceberg catalog that Spark and pyiceberg share (same name, same paths)."""

    name: str = Field("lake", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    type: Literal["jdbc", "glue", "rest", "hive"] = "jdbc"
    uri: str | None = Field(None, description="jdbc: a sqlite file by default; rest: the server URL; "
                            "hive: thrift://host:port, the embedded metastore by default")
    warehouse: str | None = Field(None, description="defaults to <home>/warehouse; s3://… for glue")
    properties: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _needs(self) -> CatalogSettings:
        if self.type == "rest" and not self.uri:
            raise ValueError("catalog.type = 'rest' needs catalog.uri (the REST catalog's URL)")
        if self.type == "glue" and self.warehouse and not self.warehouse.startswith("s3"):
            raise ValueError("catalog.type = 'glue' needs an s3:// catalog.warehouse")
        return self


class SparkSettings(_Section):
    master: str | None = Field("local[*]", description="empty keeps what spark-submit set")
    app_name: str = "cdc-lakehouse"
    driver_memory: str = "4g"
    shuffle_partitions: int = Field(4, ge=1)
    ui: bool = False
    connector_jars: Literal["local", "submit"] = Field(
        "local", description="local: load the jars `pipeline setup` resolved; submit: spark-submit provides them"
    )
    s3_scheme: Literal["s3a", "cluster"] = Field(
        "s3a", description="s3a: s3:// paths go through Hadoop's S3A, like s3a://; cluster: leave s3:// to the "
        "cluster's own file system (EMRFS on EMR)")
    preload_workers: bool = Field(
        True, description="fork Spark's Python workers from a daemon that has the executors' modules imported "
        "(`pipeline.runtime.worker_daemon`); the executors must be able to import `pipeline`, as the s3-sqs source needs")
    console_log_level: Literal["ERROR", "WARN", "INFO", "DEBUG"] = Field(
        "ERROR", description="Spark's and the JVM's log lines shown on the console; every line from INFO up goes "
        "to <home>/logs/spark.log (--verbose: WARN, --log-level DEBUG: INFO)")
    class_data: bool = Field(
        True, description="a local driver maps the class-data archive of Spark's classes that `pipeline setup` "
        "writes (`pipeline/runtime/class_data.py`): about half of its start")
    jvm: Literal["service", "batch"] | None = Field(
        None, description="a local driver's JVM, which runs the tasks too: service, the JVM's own JIT and collector; "
        "batch, its optimising compiler (C2) only for code called 10 times as often and the parallel collector, "
        "for a run that ends with its work; unset: batch for `backfill`, service for the rest "
        "(docs/benchmarks.md, the initial load)")
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark settings, applied last")

    @field_validator("master")
    @classmethod
    def _empty_is_unset(cls, master: str | None) -> str | None:
        return master or None


class KinesisSettings(_Section):
    """The changelog stage's Kinesis source (`changelog.source = "kinesis"`): one stream per source database, as
    a DMS task writes one; the stream's name is the database's (`<stream>_<table>` tables). Endpoint, region and
    credentials come from `aws`."""

    streams: list[str] = Field(default_factory=list, description="streams to read, e.g. ['moma', 'hr']")
    starting_position: str = Field("TRIM_HORIZON", description="LATEST, TRIM_HORIZON or 'AT_TIMESTAMP <ISO time>'")
    max_fetch_records_per_shard: int = Field(100_000, gt=0, description="records per shard per batch at most")
    fetch_interval_ms: int = Field(200, ge=0, description="between two GetRecords calls on one shard")
    fail_on_data_loss: bool = Field(True, description="fail when records the checkpoint expects are gone")
    sts_role_arn: str | None = Field(None, description="a role to assume for the reads (cross-account streams)")
    sts_session_name: str | None = None
    sts_endpoint_url: str | None = Field(None, description="defaults to aws.endpoint_url")
    metadata_committer: Literal["HDFS", "DYNAMODB"] = Field(
        "HDFS", description="where executors record each shard's end per batch: files or a DynamoDB table")
    metadata_path: str | None = Field(None, description="HDFS committer: a path or s3:// URI; defaults to "
                                      "changelog.checkpoint")
    dynamodb_table_name: str | None = Field(None, description="DYNAMODB committer: its table (created when missing)")
    options: dict[str, str] = Field(default_factory=dict, description="more `aws-kinesis` options, e.g. "
                                    "'getRecords.numberOfRecordsPerFetch' (without the 'kinesis.' prefix)")

    @field_validator("streams", mode="before")
    @classmethod
    def _comma_separated(cls, streams: Any) -> Any:
        return [s.strip() for s in streams.split(",") if s.strip()] if isinstance(streams, str) else streams

    @field_validator("starting_position")
    @classmethod
    def _known_position(cls, position: str) -> str:
        from pipeline.sources.kinesis.options import StartingPosition

        StartingPosition.parse(position)
        return position

    @model_validator(mode="after")
    def _committer_has_its_table(self) -> KinesisSettings:
        if self.metadata_committer == "DYNAMODB" and not self.dynamodb_table_name:
            raise ValueError("kinesis.metadata_committer = DYNAMODB needs kinesis.dynamodb_table_name")
        return self


class DeadLetterSettings(_Section):
    """How many dead letters a batch may produce before the stage stops: a misconfigured converter or registry
    turns whole tables into dead letters, which must halt the stage rather than leave a mirror silently wrong."""

    max_fraction: float | None = Field(0.1, ge=0, le=1, description="stop when more than this fraction of a "
                                       "table's records in one batch are dead letters; unset: no bound")
    max_count: int | None = Field(None, ge=0, description="stop when one batch dead-letters more than this many "
                                  "records of one table; unset: no bound")
    min_records: int = Field(100, ge=1, description="max_fraction is judged only for a table that brought at "
                             "least this many records in the batch (max_count always is)")


class ChangelogSettings(_Section):
    """The changelog stage: which topics, how fast, and where its tables and checkpoint live."""

    source: Literal["kafka", "s3-sqs", "kinesis"] = Field("kafka", description="where change events come from")
    topics: list[str] = Field(default_factory=list, description="topics to read (or topic_pattern)")
    topic_pattern: str | None = Field(None, description="a Java regex of topics, e.g. 'moma\\..*'")
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: int | None = Field(None, gt=0)
    concurrent_topics: int = Field(4, ge=1, description="topics of one batch landed at once: one topic's driver work "
                                   "(registry, planning, the commit) overlaps another's tasks")
    native_decode: bool = Field(True, description="decode Debezium envelopes of plain and semantic row types "
                                "with the pipeline's own Spark function (jvm/cdc, cdc/native.py) where the session "
                                "has it and the types are ones it reads; "
                                "off: always from_avro and column expressions")
    one_job_topics: bool = Field(True, description="land a Kafka batch's quiet topics (at most "
                                 "kafka_offsets.ONE_TASK_RECORDS records each) in Iceberg by one Spark job, each "
                                 "table committed through Iceberg's Java API; off: each topic its own write")
    trigger_interval: str = "10 seconds"
    checkpoint: str | None = Field(None, description="a path or URI (s3://…); defaults to <home>/checkpoints/changelog")
    namespace: str = Field("changelog", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    dead_letter_table: str = Field("dead_letters", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    dead_letters: DeadLetterSettings = DeadLetterSettings()
    max_restarts: int = Field(3, ge=0, description="restarts from the checkpoint after a failure, with backoff")
    max_outage_s: float = Field(0, ge=0, description="give up when Kafka or the registry stays unreachable this "
                                "long (seconds); 0 waits for it forever")
    stall_probe_s: float = Field(30, gt=0, description="a trigger running this long with no progress report has "
                                 "Kafka and the registry probed, so an outage is named while Spark waits it out")

    @field_validator("topics", mode="before")
    @classmethod
    def _comma_separated(cls, topics: Any) -> Any:
        return [t.strip() for t in topics.split(",") if t.strip()] if isinstance(topics, str) else topics

    @model_validator(mode="after")
    def _one_subscription(self) -> ChangelogSettings:
        if self.topics and self.topic_pattern:
            raise ValueError("set changelog.topics or changelog.topic_pattern, not both")
        return self


class DmsFileSettings(_Section):
    """DMS files on S3 announced on SQS: where the simulator writes them and how `changelog --source s3-sqs`
    reads them (the `s3-sqs` source's options; `options` passes any other one through verbatim)."""

    bucket: str = Field("dms-cdc", pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    queue: str = Field("dms-cdc-events", pattern=r"^[A-Za-z0-9_-]{1,80}$", description="the queue's name")
    queue_url: str | None = Field(None, description="overrides the URL looked up from the queue's name")
    file_format: Literal["csv", "parquet"] = "parquet"
    timestamp_column: str = Field("dms_commit_ts", description="DMS's TimestampColumnName: the commit time")
    csv_schemas: dict[str, str] = Field(default_factory=dict, description="table -> Spark DDL of its CSV columns "
                                        "(CSV carries no types; a table without one lands as strings)")
    max_files_per_trigger: int = Field(100, ge=-1)
    max_file_age: str = "15d"
    long_polling_wait_s: int = Field(10, ge=0, le=20)
    visibility_timeout_s: int = Field(60, ge=0)
    keep_message_for_consumer_error: bool = False
    options: dict[str, str] = Field(default_factory=dict, description="more s3-sqs source options, verbatim")

    @field_validator("max_files_per_trigger")
    @classmethod
    def _not_zero(cls, value: int) -> int:
        if value == 0:
            raise ValueError("must be positive, or -1 for unlimited")
        return value


class LakeSettings(_Section):
    format: Literal["iceberg", "delta"] = Field("iceberg", description="the table format the stages write")
    delta_root: str | None = Field(None, description="defaults to <home>/delta")
    delta_glue: bool = Field(False, description="register the Delta tables in Glue (table_type=DELTA) as the "
                             "stages create and evolve them, for Athena; needs an s3:// delta_root")

    @model_validator(mode="after")
    def _glue_needs_s3(self) -> LakeSettings:
        if self.delta_glue and self.format == "delta" and not (self.delta_root or "").startswith(("s3://", "s3a://")):
            raise ValueError("lake.delta_glue needs an s3:// lake.delta_root (Athena reads tables from S3), "
                             f"not {self.delta_root!r}")
        return self


class NameSettings(_Section):
    """How source tables name their lake tables (`tables/names.py`): `<db>_<table>` by default, where `<db>` is
    the topic prefix, stream or bucket folder. A database with a table of one name in two schemas needs one of
    these, or the second table's records are dead letters (`TableNameCollision`)."""

    with_schema: list[str] = Field(default_factory=list, description="schemas whose tables are named "
                                   "<db>_<schema>_<table>: `<schema>` (in any database), `<db>.<schema>`, or `*` "
                                   "for every schema")
    tables: dict[str, str] = Field(default_factory=dict, description="source table <db>.<schema>.<table> -> the "
                                   "name of its lake table; wins over the rule")

    @field_validator("with_schema", mode="before")
    @classmethod
    def _comma_separated(cls, schemas: Any) -> Any:
        return [s.strip() for s in schemas.split(",") if s.strip()] if isinstance(schemas, str) else schemas

    @field_validator("tables")
    @classmethod
    def _plain_distinct_names(cls, tables: dict[str, str]) -> dict[str, str]:
        for source, name in tables.items():
            parts = source.split(".")
            if len(parts) < 3 or not all(parts):
                raise ValueError(f"names.tables key {source!r} must name a source table as <db>.<schema>.<table> "
                                 "(the topic, or <stream>.<schema>.<table>, or <folder>.<schema>.<table>)")
            if not PLAIN.fullmatch(name) or len(name) > MAX_LENGTH:
                raise ValueError(f"names.tables.{source} = {name!r}: a lake table name is lowercase ASCII letters, "
                                 f"digits and _, at most {MAX_LENGTH} characters")
        shared = sorted({name for name in tables.values() if list(tables.values()).count(name) > 1})
        if shared:
            raise ValueError(f"names.tables gives two source tables the same lake table ({', '.join(shared)}): "
                             "give each its own")
        return tables

    def rule(self) -> LakeNames:
        return LakeNames(frozenset(self.with_schema), dict(self.tables))


class MirrorSettings(_Section):
    """The mirror stage: which changelog tables become current-state tables, and how."""

    namespace: str = Field("mirror", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    tables: list[str] = Field(default_factory=list, description="changelog tables to mirror; empty: all of them")
    keys: dict[str, str] = Field(default_factory=dict, description="table -> its key columns, comma-separated")
    partition_by: dict[str, str] = Field(default_factory=dict, description="table -> partition fields: columns, "
                                         "bucket(N, col), years/months/days/hours(col) (Iceberg)")
    delete_mode: Literal["soft", "hard"] = "soft"
    write_mode: Literal["copy-on-write", "merge-on-read"] = Field(
        "copy-on-write", description="row-level writes of new mirrors (Delta: merge-on-read = deletion vectors); "
        "the pending layout's fold merges on read whatever this says")
    layout: Literal["pending", "merge"] = Field(
        "pending", description="Iceberg mirrors: pending = append the changes, fold them in at maintenance (cost "
        "follows the changes); merge = MERGE into the table each run (cost follows the table). Delta: merge")
    pending_namespace: str = Field("mirror_pending", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                   description="namespace of the pending tables of the pending layout")
    pending_build_rows: int = Field(
        100_000, ge=0, description="pending layout: a table's batch of at most this many changelog rows (changes to "
        "append, or a new unpartitioned mirror's first build) is written in one job with the run's other tables, by "
        "the task that reads it; a larger one, or a partitioned mirror's first build, by a pass of its own (0: every table alone)")
    scd_type: dict[str, int] = Field(default_factory=dict, description="table -> 1 (current state, the default) or "
                                     "2 (one row per version, docs/mirror.md)")
    track_history_columns: dict[str, str] = Field(default_factory=dict, description="SCD2 table -> the columns whose "
                                                  "change opens a new version, comma-separated; default all")
    track_history_except_columns: dict[str, str] = Field(default_factory=dict, description="SCD2 table -> columns "
                                                         "whose change updates the version in place")
    consistent: bool = Field(False, description="merge all tables of a run up to one common source position")
    max_attempts: int = Field(3, ge=1, description="tries per table when a concurrent commit conflicts")
    concurrent_tables: int = Field(4, ge=1, description="tables a run merges at once, each in a thread and "
                                   "session of its own: one table's driver work overlaps another's tasks")
    concurrent_lookups: int = Field(8, ge=1, description="tables whose changelog commit and watermark a run reads "
                                    "at once, to skip those with nothing new (catalog and metadata reads: waiting "
                                    "on I/O, not on the executors)")
    view_suffix: str = Field("_current", pattern=r"^[A-Za-z0-9_]+$")
    deleted_view_suffix: str = Field("_deleted", pattern=r"^[A-Za-z0-9_]+$", description="mirror view of soft deletes")
    history_view_suffix: str = Field("_history", pattern=r"^[A-Za-z0-9_]+$",
                                     description="SCD2 mirror view of every version")
    latest_view_suffix: str = Field("_latest", pattern=r"^[A-Za-z0-9_]+$",
                                    description="changelog view of the newest change per key")

    @field_validator("tables", mode="before")
    @classmethod
    def _comma_separated(cls, tables: Any) -> Any:
        return [t.strip() for t in tables.split(",") if t.strip()] if isinstance(tables, str) else tables

    def key_columns(self, table: str) -> list[str]:
        return [c.strip() for c in self.keys.get(table, "").split(",") if c.strip()]

    @field_validator("partition_by")
    @classmethod
    def _readable_partition_fields(cls, partition_by: dict[str, str]) -> dict[str, str]:
        for table, spec in partition_by.items():
            try:
                parse_partition_fields(spec)
            except ValueError as exc:
                raise ValueError(f"mirror.partition_by.{table}: {exc}") from None
        return partition_by

    def partition_fields(self, table: str) -> list[PartitionField]:
        return parse_partition_fields(self.partition_by.get(table, ""))

    def scd_type_of(self, table: str) -> int:
        return self.scd_type.get(table, 1)

    def history_columns(self, table: str) -> tuple[list[str] | None, list[str] | None]:
        """An SCD2 table's (tracked, untracked) column lists, each None when unset."""
        def listed(setting: dict[str, str]) -> list[str] | None:
            return [c.strip() for c in setting[table].split(",") if c.strip()] if table in setting else None
        return listed(self.track_history_columns), listed(self.track_history_except_columns)

    @model_validator(mode="after")
    def _history_settings(self) -> MirrorSettings:
        for table, kind in self.scd_type.items():
            if kind not in (1, 2):
                raise ValueError(f"mirror.scd_type.{table} must be 1 (current state) or 2 (history), not {kind}")
        if self.delete_mode == "hard" and 2 in self.scd_type.values():
            raise ValueError("mirror.delete_mode = 'hard' cannot go with mirror.scd_type = 2: an SCD2 table keeps a "
                             "delete as a version (its readers filter `NOT _is_deleted`); use delete_mode = 'soft'")
        for table in {*self.track_history_columns, *self.track_history_except_columns}:
            if self.scd_type_of(table) != 2:
                raise ValueError(f"mirror.track_history_columns / track_history_except_columns name {table}, which is "
                                 f"not an SCD2 table: set mirror.scd_type.{table} = 2")
            if table in self.track_history_columns and table in self.track_history_except_columns:
                raise ValueError(f"set mirror.track_history_columns.{table} or mirror.track_history_except_columns."
                                 f"{table}, not both")
        return self

    @model_validator(mode="after")
    def _pending_apart(self) -> MirrorSettings:
        if self.pending_namespace == self.namespace:
            raise ValueError(f"mirror.pending_namespace must differ from mirror.namespace ({self.namespace!r}): "
                             "a pending table has its mirror's name")
        return self


class MaintenanceSettings(_Section):
    """`pipeline maintain`: compaction, snapshot expiry and orphan-file cleanup for both stages' tables."""

    retain_hours: float = Field(168.0, ge=0, description="time-travel window kept by snapshot expiry")
    orphan_age_hours: float = Field(72.0, ge=24, description="unreferenced files older than this are deleted; "
                                    "Iceberg refuses less than 24 h (a running write's files look unreferenced)")
    target_file_mb: int = Field(128, ge=1, description="compaction's target data file size")
    concurrent_tables: int = Field(4, ge=1, description="tables maintained at once, each in a thread and "
                                   "session of its own")


class BackfillSettings(_Section):
    """`pipeline backfill`: the PostgreSQL database a table's snapshot is read from, and how much a commit holds."""

    url: str | None = Field(None, description="JDBC URL of the source database (jdbc:postgresql://host:port/db); "
                            "defaults to the embedded stack's PostgreSQL")
    user: str = "postgres"
    password: SecretStr | None = None
    batch_rows: int = Field(1_000_000, ge=1, description="rows a commit holds, about: a restart resumes after the "
                            "last commit")
    fetch_rows: int = Field(10_000, ge=1, description="rows a task fetches at a time (the JDBC fetch size): what "
                            "bounds a task's memory")

    @field_validator("url")
    @classmethod
    def _postgres_only(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith("jdbc:postgresql://"):
            raise ValueError("backfill.url must be a jdbc:postgresql://host:port/database URL: backfill reads "
                             "PostgreSQL tables (other sources snapshot through their CDC tool)")
        return url


class StatusSettings(_Section):
    """`pipeline status`: the freshness bound it reports against (and exits non-zero past)."""

    max_lag: float | None = Field(None, gt=0, description="seconds a table may lag (its oldest change not yet in "
                                  "the changelog, or not yet merged into the mirror) before `status` exits 4; "
                                  "unset: report only")
    concurrent_tables: int = Field(8, ge=1, description="tables whose facts are read at once (catalog and "
                                   "metadata reads: waiting on I/O more than on the CPU)")


class PipelineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    home: Path = Field(Path(".pipeline"), description="data folder: service data, logs, catalog, warehouse")
    jars: Path = Field(Path(".pipeline/jars"), description="where `pipeline setup` puts the JVM artifacts")
    stack: StackSettings = StackSettings()
    kafka: KafkaSettings = KafkaSettings()
    registry: RegistrySettings = RegistrySettings()
    aws: AwsSettings = AwsSettings()
    catalog: CatalogSettings = CatalogSettings()
    spark: SparkSettings = SparkSettings()
    lake: LakeSettings = LakeSettings()
    changelog: ChangelogSettings = ChangelogSettings()
    kinesis: KinesisSettings = KinesisSettings()
    dms_files: DmsFileSettings = DmsFileSettings()
    names: NameSettings = NameSettings()
    mirror: MirrorSettings = MirrorSettings()
    maintenance: MaintenanceSettings = MaintenanceSettings()
    status: StatusSettings = StatusSettings()
    backfill: BackfillSettings = BackfillSettings()

    @model_validator(mode="before")
    @classmethod
    def _resolve_defaults(cls, data: Any) -> Any:
        """Point unset addresses at the embedded stack and make every path absolute."""
        if not isinstance(data, dict):
            return data
        data = {key: dict(value) if isinstance(value, dict) else value for key, value in data.items()}
        home = Path(data.get("home", ".pipeline")).expanduser().resolve()
        data["home"] = home
        data["jars"] = Path(data["jars"]).expanduser().resolve() if data.get("jars") else home / "jars"
        try:
            stack = StackSettings.model_validate(data.get("stack", {}))
        except ValidationError:
            return data  # field validation reports the stack setting by name
        sections = ("kafka", "registry", "aws", "catalog", "lake")
        kafka, registry, aws, catalog, lake = (data.setdefault(name, {}) for name in sections)
        if not all(isinstance(section, dict) for section in (kafka, registry, aws, catalog, lake)):
            return data  # let field validation name the section that is not a table
        kafka.setdefault("bootstrap_servers", f"{stack.host}:{stack.kafka_port}")
        registry.setdefault("url", f"http://{stack.host}:{stack.registry_port}")
        if "endpoint_url" not in aws:
            aws.update(endpoint_url=f"http://{stack.host}:{stack.moto_port}")
            aws.setdefault("access_key_id", "test")
            aws.setdefault("secret_access_key", "test")
        if catalog.get("type", "jdbc") == "jdbc":
            catalog.setdefault("uri", f"jdbc:sqlite:{home / 'catalog.db'}")
            catalog.setdefault("warehouse", (home / "warehouse").as_uri())
        elif catalog.get("type") == "hive":
            catalog.setdefault("uri", f"thrift://{stack.host}:{stack.metastore_port}")
            catalog.setdefault("warehouse", (home / "warehouse").as_uri())
        elif catalog.get("type") == "glue" and not catalog.get("warehouse"):
            raise ValueError("catalog.type = 'glue' needs catalog.warehouse (an s3:// location)")
        lake.setdefault("delta_root", (home / "delta").as_uri())
        backfill = data.setdefault("backfill", {})
        if isinstance(backfill, dict):
            backfill.setdefault("url", f"jdbc:postgresql://{stack.host}:{stack.postgres_port}/{stack.postgres_database}")
        changelog = data.setdefault("changelog", {})
        if isinstance(changelog, dict):
            changelog.setdefault("checkpoint", str(home / "checkpoints" / "changelog"))
        return data

    @model_validator(mode="after")
    def _delta_partitions_by_columns(self) -> PipelineConfig:
        if self.lake.format == "delta":
            for table in self.mirror.partition_by:
                transformed = [str(f) for f in self.mirror.partition_fields(table) if f.transform != "identity"]
                if transformed:
                    raise ValueError(f"mirror.partition_by.{table}: Delta partitions by columns only, not by "
                                     f"{', '.join(transformed)}; use columns, or lake.format = 'iceberg'")
        return self

    @model_validator(mode="after")
    def _names_apart_from_dead_letters(self) -> PipelineConfig:
        if self.changelog.dead_letter_table in self.names.tables.values():
            raise ValueError(f"names.tables maps a source table to {self.changelog.dead_letter_table!r}, the "
                             "changelog.dead_letter_table: give it another name")
        return self

    @property
    def jars_dir(self) -> Path:
        return self.jars

    @property
    def services_dir(self) -> Path:
        return self.home / "services"


def load_config(
    path: Path | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> PipelineConfig:
    """Merge file, environment and `section.key=value` overrides, then validate once."""
    environ = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    path = path or (Path(environ["PIPELINE_CONFIG"]) if environ.get("PIPELINE_CONFIG") else None)
    if path is None and Path(DEFAULT_CONFIG_FILE).is_file():
        path = Path(DEFAULT_CONFIG_FILE)
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist; pass an existing file to --config") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and name != "PIPELINE_CONFIG":
            _assign(data, name[len(ENV_PREFIX):].lower().split("__"), value, source=f"environment {name}")
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r} must look like section.key=value")
        _assign(data, key.strip().split("."), value, source=f"--set {key}")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


# Settings that are maps of free-form keys: everything after the map's name is one key ("spark.conf.a.b").
_MAP_SETTINGS = {("spark", "conf"), ("kafka", "properties"), ("catalog", "properties"), ("mirror", "keys"),
                 ("mirror", "partition_by"), ("kinesis", "options"), ("dms_files", "options"),
                 ("dms_files", "csv_schemas"), ("names", "tables")}


def _assign(data: dict[str, Any], keys: list[str], value: str, source: str) -> None:
    if not all(keys):
        raise ConfigError(f"{source}: empty setting name")
    if tuple(keys[:2]) in _MAP_SETTINGS and len(keys) > 3:
        keys = [*keys[:2], ".".join(keys[2:])]
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{source}: {key} is a value, not a section")
    node[keys[-1]] = value


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err["loc"]) or "configuration"
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown setting '{name}': check its spelling against docs/configuration.md")
        else:
            lines.append(f"invalid setting '{name}': {err['msg']}")
    return "; ".join(lines)
