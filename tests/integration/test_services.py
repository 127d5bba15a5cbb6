"""Each embedded service does its job for a real client."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import boto3
import pytest
import requests
from confluent_kafka import Consumer, Producer

from pipeline.config import kafka

from pipeline.ops import smoke
from pipeline.config.settings import PipelineConfig
from pipeline.stack import Stack
from registry.ccompat import ConfluentCompatClient, RegistryError
from tests.conftest import free_port, make_config

pytestmark = pytest.mark.integration

SCHEMA = {"type": "record", "name": "Probe", "namespace": "t", "fields": [{"name": "id", "type": "long"}]}


def test_kafka_produce_and_consume(stack: Stack, cfg: PipelineConfig) -> None:
    topic = f"probe-{uuid.uuid4().hex[:8]}"
    producer = Producer(kafka.client_conf(cfg.kafka, **{"enable.idempotence": True}))
    for i in range(20):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(kafka.client_conf(cfg.kafka, **{"group.id": topic, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    values, deadline = set(), time.monotonic() + 30
    while len(values) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            values.add(msg.value().decode())
    consumer.close()
    assert values == {f"v{i}" for i in range(20)}
    metadata = Producer(kafka.client_conf(cfg.kafka)).list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == cfg.stack.kafka_partitions


def test_registry_serves_both_apis(stack: Stack, cfg: PipelineConfig) -> None:
    subject = f"probe-{uuid.uuid4().hex[:8]}-value"
    client = ConfluentCompatClient.from_settings(cfg.registry)
    schema_id = client.register(subject, SCHEMA)
    assert client.register(subject, SCHEMA) == schema_id  # registering again finds the same schema
    assert subject in client.subjects()
    fresh = ConfluentCompatClient.from_settings(cfg.registry)
    assert '"Probe"' in fresh.schema(schema_id)
    native = f"{cfg.registry.url}/apis/registry/v3"
    by_artifact = requests.get(f"{native}/groups/default/artifacts/{subject}/versions/branch=latest/content", timeout=10)
    by_content_id = requests.get(f"{native}/ids/contentIds/{schema_id}", timeout=10)
    assert by_artifact.json() == by_content_id.json() == SCHEMA


def test_registry_errors_name_the_id_and_address(stack: Stack, cfg: PipelineConfig) -> None:
    client = ConfluentCompatClient.from_settings(cfg.registry)
    with pytest.raises(RegistryError, match=rf"registry at {cfg.registry.url}/apis/ccompat/v7 refused schema id 987654"):
        client.schema(987654)
    down = ConfluentCompatClient.from_settings(make_config("stack.registry_port=1").registry)
    with pytest.raises(RegistryError, match=r"127\.0\.0\.1:1/apis/ccompat/v7 is unreachable"):
        down.subjects()


def test_registry_with_kafka_storage_survives_a_restart(tmp_path: Path, stack: Stack) -> None:
    cfg = make_config(f"home={tmp_path}", "stack.registry_storage=kafka",
                      f"stack.registry_port={free_port()}", f"stack.registry_management_port={free_port()}")
    registry = Stack(cfg, only=["registry"])
    subject = f"durable-{uuid.uuid4().hex[:8]}-value"
    try:
        assert registry.up() == ["registry"]
        schema_id = ConfluentCompatClient.from_settings(cfg.registry).register(subject, SCHEMA)
        registry.down()
        registry.up()
        assert '"Probe"' in ConfluentCompatClient.from_settings(cfg.registry).schema(schema_id)
    finally:
        registry.down()


def test_s3_put_arrives_as_an_sqs_notification(stack: Stack, cfg: PipelineConfig) -> None:
    key = smoke.s3_put_arrives_on_sqs(cfg)
    assert key.startswith("dms/public/customers/")


def test_glue_table_create_and_get(stack: Stack, cfg: PipelineConfig) -> None:
    glue = boto3.client("glue", **cfg.aws.boto3_kwargs())
    database = f"probe_{uuid.uuid4().hex[:8]}"
    glue.create_database(DatabaseInput={"Name": database})
    glue.create_table(DatabaseName=database, TableInput={
        "Name": "artists", "TableType": "EXTERNAL_TABLE", "Parameters": {"table_type": "ICEBERG"},
        "StorageDescriptor": {"Columns": [{"Name": "id", "Type": "bigint"}], "Location": "s3://lake/artists"},
    })
    table = glue.get_table(DatabaseName=database, Name="artists")["Table"]
    assert table["Parameters"]["table_type"] == "ICEBERG"
    assert table["StorageDescriptor"]["Columns"] == [{"Name": "id", "Type": "bigint"}]


def test_kinesis_stream_round_trip(stack: Stack, cfg: PipelineConfig) -> None:
    kinesis = boto3.client("kinesis", **cfg.aws.boto3_kwargs())
    stream = f"probe-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 50})
    kinesis.put_record(StreamName=stream, Data=b"hello", PartitionKey="k")
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    assert [r["Data"] for r in kinesis.get_records(ShardIterator=iterator)["Records"]] == [b"hello"]
