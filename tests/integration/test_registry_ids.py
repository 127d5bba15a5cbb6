"""Real Kafka and Apicurio: one topic holding every way a producer names its schema lands, without the framing
configured, and an id the registry does not know is dead-lettered with its reason.

The values are written byte for byte as Apicurio's serdes and Kafka Connect converter write them (2.x and 3.x):
magic 0 + 4-byte content id (3.x default) or global id (`apicurio.registry.use-id=globalId`), magic 0 + 8-byte
global id (the legacy id handler), and, with `apicurio.registry.headers.enabled` (2.x default, seed 002), the plain
Avro body with the id as an 8-byte big-endian long in `apicurio.value.globalId` / `apicurio.value.contentId` and
`apicurio.value.encoding=BINARY`.
"""

from __future__ import annotations

import struct
import time
import uuid
from pathlib import Path

import pytest

from pipeline.config import kafka
from pipeline.stages.changelog import ChangelogStage
from pipeline.config.settings import PipelineConfig
from registry.apicurio import ApicurioClient, ArtifactVersion
from registry.avro import avro_schema, encode
from registry.backend import RegistryError

pytestmark = pytest.mark.integration

UNKNOWN_GLOBAL_ID = 10**12
_METADATA = [("__op", "string"), ("__db", "string"), ("__table", "string"), ("__schema", "string"),
             ("__lsn", "long"), ("__source_ts_ms", "long"), ("__deleted", "string")]


def _unwrapped(topic: str, version: int) -> dict:
    """Debezium's unwrapped value for a `people` table; version 2 adds a nullable `email`."""
    columns = [("name", "string"), *([("email", "string")] if version == 2 else [])]
    return {"type": "record", "name": "Value", "namespace": topic,
            "fields": [{"name": "id", "type": "int"},
                       *[{"name": name, "type": ["null", kind], "default": None}
                         for name, kind in [*columns, *_METADATA]]]}


def _long(value: int) -> bytes:
    return struct.pack(">q", value)


def _versions_with_a_trap(apicurio: ApicurioClient, scratch: ApicurioClient) -> tuple[str, ArtifactVersion,
                                                                                    ArtifactVersion]:
    """A topic whose value subject has two versions, where an id one of them is written with also names a
    schema of another subject under the other reading (decoded that way, it lands with the wrong schema), and
    no id of the subject names two of its versions under the two readings. Either v2's global id is another
    schema's content id (a young registry, where the counters run close), or v1's content id is another
    schema's global id (a registry many tests have used, where global ids run ahead of content ids).
    Apicurio allocates the two kinds of id independently, so the versions are registered, with unrelated ones
    in between, until one holds."""
    for _ in range(20):
        topic = f"ids{uuid.uuid4().hex[:6]}.public.people"
        v1 = apicurio.create_version(f"{topic}-value", _unwrapped(topic, 1))
        scratch.create_version(f"{topic}-scratch", {"type": "record", "name": "Scratch", "fields": [
            {"name": f"f{uuid.uuid4().hex[:8]}", "type": "int"}]})
        v2 = apicurio.create_version(f"{topic}-value", _unwrapped(topic, 2))
        own = (_text(apicurio, v1), _text(apicurio, v2))
        traps = (lambda: apicurio.by_content_id(v2.global_id), lambda: apicurio.by_global_id(v1.content_id))
        trap = any(_other_schema(lookup, own) for lookup in traps)
        if trap and v1.content_id != v2.global_id and v2.content_id != v1.global_id \
                and v1.content_id not in (v1.global_id, v2.global_id):
            return topic, v1, v2
    raise AssertionError("could not register two versions one of whose ids names another schema under the "
                         "other reading")


def _other_schema(lookup, own: tuple[str, str]) -> bool:  # type: ignore[no-untyped-def]
    try:
        return lookup() not in own
    except RegistryError:  # no schema has that id of that kind yet
        return False


def _text(apicurio: ApicurioClient, version: ArtifactVersion) -> str:
    return apicurio.by_global_id(version.global_id)


def test_every_id_framing_lands_from_one_topic_and_an_unknown_id_is_retried_then_dead_lettered(
        stack, spark, cfg: PipelineConfig, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    apicurio = ApicurioClient.from_settings(cfg.registry)
    scratch = ApicurioClient.from_settings(cfg.registry.model_copy(update={"compatibility": None}))
    topic, v1, v2 = _versions_with_a_trap(apicurio, scratch)
    db = topic.split(".")[0]

    def body(version: int, key: int) -> bytes:
        row = {"id": key, "name": f"n{key}", "__op": "c", "__db": db, "__table": "people", "__schema": "public",
               "__lsn": 1000 + key, "__source_ts_ms": int(time.time() * 1000), "__deleted": "false"}
        return encode(avro_schema(_unwrapped(topic, version)), row | ({"email": f"e{key}"} if version == 2 else {}))

    binary = [("apicurio.value.encoding", b"BINARY")]
    records = {  # id -> (value, headers, the `_schema_id` it lands with)
        1: (b"\x00" + struct.pack(">I", v1.content_id) + body(1, 1), [], str(v1.content_id)),
        2: (b"\x00" + struct.pack(">I", v1.global_id) + body(1, 2), [], str(v1.global_id)),
        3: (b"\x00" + struct.pack(">I", v2.global_id) + body(2, 3), [], str(v2.global_id)),  # after the change
        4: (b"\x00" + _long(v2.global_id) + body(2, 4), [], str(v2.global_id)),  # legacy 8-byte
        5: (body(2, 5), [("apicurio.key.globalId", _long(v1.global_id)), ("apicurio.key.encoding", b"BINARY"),
                         ("apicurio.value.globalId", _long(v2.global_id)), *binary], f"global:{v2.global_id}"),
        6: (body(2, 6), [("apicurio.value.contentId", _long(v2.content_id)), *binary], f"content:{v2.content_id}"),
        7: (body(2, 7), [("apicurio.value.globalId", _long(UNKNOWN_GLOBAL_ID)), *binary], None),
    }
    producer = Producer(kafka.client_conf(cfg.kafka))
    for key, (value, headers, _) in records.items():
        producer.produce(topic, value=value, key=str(key).encode(), headers=headers)
    assert producer.flush(30) == 0

    changelog = cfg.changelog.model_copy(update={"topics": [topic], "checkpoint": tmp_path / "cp"})
    ChangelogStage(cfg.model_copy(update={"changelog": changelog}), spark).run(until_caught_up=True)

    landed = spark.table(f"{cfg.catalog.name}.changelog.{db}_people").select("id", "name", "email", "_schema_id")
    expected = {(key, f"n{key}", f"e{key}" if key > 2 else None, schema_id)
                for key, (_, _, schema_id) in records.items() if schema_id}
    assert {tuple(row) for row in landed.collect()} == expected
    dead = spark.table(f"{cfg.catalog.name}.changelog.dead_letters").where(f"topic = '{topic}'").collect()
    assert [(row["key"], row["schema_id"], row["error_class"]) for row in dead] == [
        (b"7", f"global:{UNKNOWN_GLOBAL_ID}", "UnknownSchemaId")]
    assert dead[0]["error_message"] == (
        f"global id {UNKNOWN_GLOBAL_ID} (Kafka header apicurio.value.globalId) is not in the Apicurio at "
        f"{apicurio.address}, asked again after 0.5 s: the producer registered its schema in another registry, "
        "or it was deleted")
