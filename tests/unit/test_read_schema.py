"""Records are decoded with a reader schema cut to what normalising reads (`cdc.normalize.read_schema`)."""

from __future__ import annotations

import io

import fastavro

from cdc.normalize import ENVELOPE_SOURCE_FIELDS, read_schema

VALUE = {"type": "record", "name": "Value", "fields": [{"name": "id", "type": "long"},
                                                      {"name": "name", "type": ["null", "string"]}]}
SOURCE = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql", "fields": [
    {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
    {"name": "name", "type": "string"}, {"name": "ts_ms", "type": "long"}, {"name": "db", "type": "string"},
    {"name": "sequence", "type": ["null", "string"]}, {"name": "schema", "type": "string"},
    {"name": "table", "type": "string"}, {"name": "txId", "type": ["null", "long"]},
    {"name": "lsn", "type": ["null", "long"]}, {"name": "xmin", "type": ["null", "long"]}]}
ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "shop.public.items", "fields": [
    {"name": "before", "type": ["null", VALUE]}, {"name": "after", "type": ["null", "Value"]},
    {"name": "source", "type": SOURCE}, {"name": "transaction", "type": ["null", {
        "type": "record", "name": "block", "fields": [{"name": "id", "type": "string"}]}]},
    {"name": "op", "type": "string"}, {"name": "ts_ms", "type": ["null", "long"]}]}


def test_the_envelope_keeps_the_images_the_op_and_what_is_read_of_source() -> None:
    cut = read_schema(ENVELOPE, "debezium")
    assert [f["name"] for f in cut["fields"]] == ["before", "after", "source", "op"]
    source = cut["fields"][2]["type"]
    assert [f["name"] for f in source["fields"]] == [f["name"] for f in SOURCE["fields"]
                                                      if f["name"] in ENVELOPE_SOURCE_FIELDS]
    assert {"version", "name", "xmin"}.isdisjoint(f["name"] for f in source["fields"])
    assert cut["fields"][0] == ENVELOPE["fields"][0] and source["name"] == SOURCE["name"]


def test_a_record_written_with_the_whole_envelope_reads_with_the_cut_one() -> None:
    record = {"before": None, "after": {"id": 7, "name": "x"}, "op": "c", "ts_ms": 5,
              "transaction": {"id": "t1"},
              "source": {"version": "2.7", "connector": "postgresql", "name": "shop", "ts_ms": 3, "db": "shop",
                         "sequence": '["1","2"]', "schema": "public", "table": "items", "txId": 9, "lsn": 2,
                         "xmin": None}}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(ENVELOPE), record)
    body.seek(0)
    read = fastavro.schemaless_reader(body, fastavro.parse_schema(ENVELOPE),
                                      fastavro.parse_schema(read_schema(ENVELOPE, "debezium")))
    assert read == {"before": None, "after": {"id": 7, "name": "x"}, "op": "c",
                    "source": {k: v for k, v in record["source"].items() if k in ENVELOPE_SOURCE_FIELDS}}


def test_other_formats_are_read_whole() -> None:
    dms = {"type": "record", "name": "r", "fields": [{"name": "data", "type": VALUE},
                                                      {"name": "metadata", "type": "string"}]}
    assert read_schema(dms, "dms") is dms
