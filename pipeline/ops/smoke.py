"""The smoke path `pipeline demo` runs end to end on the embedded stack.

Avro records framed with an Apicurio schema id go into Kafka; Spark reads the topic, decodes the Avro on
the JVM and writes an Iceberg and a Delta table; pyiceberg reads the Iceberg table back; an S3 put
arrives on SQS as an event notification.
"""

from __future__ import annotations

import io
import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
import fastavro
import structlog
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.config import kafka
from pipeline.config.settings import PipelineConfig
from registry.ccompat import ConfluentCompatClient
from registry.wire import confluent_frame
from tables.catalog import load_pyiceberg_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

TOPIC = "demo.inventory.customers"
NAMESPACE = "demo"
TABLE = "customers"
BUCKET = "demo-landing"
QUEUE = "demo-landing-events"
CUSTOMER_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Customer",
    "namespace": "demo.inventory",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "email", "type": ["null", "string"], "default": None},
        {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


class SmokeError(RuntimeError):
    pass


@dataclass(frozen=True)
class SmokeReport:
    produced: int
    schema_id: int
    iceberg_rows: int
    delta_rows: int
    pyiceberg_rows: int
    s3_event_key: str


def run(cfg: PipelineConfig, spark: SparkSession, rows: int = 1000) -> SmokeReport:
    schema_id = produce_customers(cfg, rows)
    iceberg_rows, delta_rows = kafka_to_tables(cfg, spark, schema_id)
    pyiceberg_rows = load_pyiceberg_catalog(cfg.catalog, cfg.aws).load_table((NAMESPACE, TABLE)).scan().to_arrow().num_rows
    log.info("demo.pyiceberg", table=f"{NAMESPACE}.{TABLE}", rows=pyiceberg_rows)
    key = s3_put_arrives_on_sqs(cfg)
    return SmokeReport(rows, schema_id, iceberg_rows, delta_rows, pyiceberg_rows, key)


def produce_customers(cfg: PipelineConfig, rows: int) -> int:
    """Register the schema, recreate the topic, produce `rows` framed Avro records; return the schema id."""
    registry = ConfluentCompatClient.from_settings(cfg.registry)
    schema_id = registry.register(f"{TOPIC}-value", CUSTOMER_SCHEMA)
    _recreate_topic(cfg, TOPIC)
    parsed = fastavro.parse_schema(CUSTOMER_SCHEMA)
    failures: list[str] = []
    producer = Producer(kafka.client_conf(cfg.kafka, **{"enable.idempotence": True, "linger.ms": 5}))
    now_ms = int(time.time() * 1000)

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for i in range(rows):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"id": i, "name": f"customer {i}",
                                                 "email": f"c{i}@example.com" if i % 3 else None,
                                                 "updated_at": now_ms})
        producer.produce(TOPIC, key=str(i).encode(), value=confluent_frame(schema_id, buf.getvalue()),
                         on_delivery=on_delivery)
        producer.poll(0)
    if producer.flush(30) or failures:
        raise SmokeError(f"Kafka at {cfg.kafka.bootstrap_servers} did not acknowledge every record: {failures[:3]}")
    log.info("demo.produced", topic=TOPIC, records=rows, schema_id=schema_id)
    return schema_id


def kafka_to_tables(cfg: PipelineConfig, spark: SparkSession, schema_id: int) -> tuple[int, int]:
    """Spark batch-reads the topic, decodes with the registry schema, writes Iceberg and Delta; row counts back."""
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import expr

    schema_text = ConfluentCompatClient.from_settings(cfg.registry).schema(schema_id)
    raw = (spark.read.format("kafka").options(**kafka.spark_options(cfg.kafka))
           .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())
    customers = raw.select(from_avro(expr("substring(value, 6)"), schema_text).alias("c")).select("c.*")

    iceberg_table = f"{cfg.catalog.name}.{NAMESPACE}.{TABLE}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{NAMESPACE}")
    customers.writeTo(iceberg_table).using("iceberg").createOrReplace()
    delta_path = f"{cfg.lake.delta_root}/{NAMESPACE}/{TABLE}"
    customers.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(delta_path)

    iceberg_rows = spark.table(iceberg_table).count()
    delta_rows = spark.read.format("delta").load(delta_path).count()
    log.info("demo.tables", iceberg=iceberg_table, iceberg_rows=iceberg_rows, delta=delta_path, delta_rows=delta_rows)
    return iceberg_rows, delta_rows


def s3_put_arrives_on_sqs(cfg: PipelineConfig, timeout_s: float = 20.0) -> str:
    """Wire bucket notifications to a queue, put an object, and return the key the event names."""
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    sqs = boto3.client("sqs", **cfg.aws.boto3_kwargs())
    s3.create_bucket(Bucket=BUCKET)
    queue_url = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(
        Bucket=BUCKET,
        NotificationConfiguration={"QueueConfigurations": [{"QueueArn": queue_arn, "Events": ["s3:ObjectCreated:*"]}]},
    )
    key = f"dms/public/customers/{int(time.time() * 1000)}.csv"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"Op,id,name\nI,1,first\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1, MaxNumberOfMessages=10).get("Messages", []):
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            for record in json.loads(message["Body"]).get("Records", []):
                if urllib.parse.unquote_plus(record["s3"]["object"]["key"]) == key:  # S3 URL-encodes keys
                    log.info("demo.s3_event", bucket=BUCKET, key=key, queue=QUEUE)
                    return key
    raise SmokeError(f"no S3 event for s3://{BUCKET}/{key} arrived on SQS queue {QUEUE} within {timeout_s:.0f} s")


def _recreate_topic(cfg: PipelineConfig, topic: str) -> None:
    admin = AdminClient(kafka.client_conf(cfg.kafka))
    if topic in admin.list_topics(timeout=10).topics:
        admin.delete_topics([topic])[topic].result(timeout=30)
        deadline = time.monotonic() + 30
        while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.2)
    for attempt in range(50):  # deletion finishes asynchronously on the broker
        try:
            admin.create_topics([NewTopic(topic, num_partitions=cfg.stack.kafka_partitions)])[topic].result(timeout=30)
            return
        except Exception as exc:  # KafkaException(TOPIC_ALREADY_EXISTS) while the delete completes
            if "TOPIC_ALREADY_EXISTS" not in str(exc) or attempt == 49:
                raise
            time.sleep(0.2)
