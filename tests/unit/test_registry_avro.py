import pytest
from fastavro.read import SchemaResolutionError

from registry.avro import avro_schema, decode, encode

V1 = {"type": "record", "name": "Artist", "namespace": "moma",
      "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "nationality", "type": ["null", "string"], "default": None}]}


def test_round_trip_in_the_writer_schema() -> None:
    schema = avro_schema(V2)
    record = {"id": 299, "name": "Nam June Paik", "nationality": "American"}
    assert decode(encode(schema, record), schema) == record


def test_v1_record_decodes_into_v2_with_the_new_field_null() -> None:
    body = encode(avro_schema(V1), {"id": 1, "name": "Anni Albers"})
    assert decode(body, avro_schema(V1), avro_schema(V2)) == {"id": 1, "name": "Anni Albers", "nationality": None}


def test_v2_record_decoded_with_the_v1_reader_drops_the_field() -> None:
    body = encode(avro_schema(V2), {"id": 2, "name": "Josef Albers", "nationality": "German"})
    assert decode(body, avro_schema(V2), avro_schema(V1)) == {"id": 2, "name": "Josef Albers"}


def test_an_unresolvable_reader_is_an_error() -> None:
    reader = {**V1, "fields": [*V1["fields"], {"name": "born", "type": "int"}]}  # new field without a default
    with pytest.raises(SchemaResolutionError):
        decode(encode(avro_schema(V1), {"id": 1, "name": "x"}), avro_schema(V1), avro_schema(reader))


def test_each_schema_text_is_parsed_once() -> None:
    schema = avro_schema(V1)
    assert avro_schema(schema.text) is schema and avro_schema(schema) is schema and avro_schema(V1) is schema
    assert schema.full_name == "moma.Artist"
