import uuid
import zlib

import pytest

from registry.wire import AmbiguousWireFormatError, WireFormat, WireFormatError, detect, frame, unframe

VERSION_ID = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")


@pytest.mark.parametrize(("fmt", "schema_id", "header"), [
    (WireFormat.CONFLUENT, 258, b"\x00\x00\x00\x01\x02"),
    (WireFormat.APICURIO_LEGACY, 2**40 + 7, b"\x00\x00\x00\x01\x00\x00\x00\x00\x07"),
    (WireFormat.GLUE, VERSION_ID, b"\x03\x00" + VERSION_ID.bytes),
])
def test_round_trip_and_exact_header(fmt: WireFormat, schema_id: int | uuid.UUID, header: bytes) -> None:
    framed = frame(fmt, schema_id, b"body")
    assert framed == header + b"body"
    assert unframe(framed, fmt) == (schema_id, b"body")


def test_glue_zlib_body_is_compressed_and_restored() -> None:
    body = b"avro" * 100
    framed = frame(WireFormat.GLUE, VERSION_ID, body, compressed=True)
    assert framed[:2] == b"\x03\x05" and zlib.decompress(framed[18:]) == body
    assert unframe(framed, WireFormat.GLUE) == (VERSION_ID, body)


@pytest.mark.parametrize(("fmt", "message", "error"), [
    (WireFormat.CONFLUENT, b"\x00\x01", "shorter than the 5-byte confluent header"),
    (WireFormat.CONFLUENT, b"\x07\x00\x00\x00\x01x", "magic byte 7 is not the confluent magic byte 0"),
    (WireFormat.APICURIO_LEGACY, b"\x00\x00\x00\x00\x01", "shorter than the 9-byte apicurio-legacy header"),
    (WireFormat.APICURIO_LEGACY, b"\x03" + bytes(8), "magic byte 3 is not the apicurio-legacy magic byte 0"),
    (WireFormat.GLUE, b"\x03\x00" + bytes(10), "shorter than the 18-byte glue header"),
    (WireFormat.GLUE, b"\x00\x00" + bytes(16) + b"x", "header version byte 0 is not the glue header version 3"),
    (WireFormat.GLUE, b"\x03\x09" + bytes(16) + b"x", "compression byte 9 is neither 0 \\(none\\) nor 5 \\(zlib\\)"),
    (WireFormat.GLUE, b"\x03\x05" + bytes(16) + b"not zlib", "marked zlib-compressed does not decompress"),
])
def test_malformed_headers_are_named(fmt: WireFormat, message: bytes, error: str) -> None:
    with pytest.raises(WireFormatError, match=error):
        unframe(message, fmt)


@pytest.mark.parametrize(("fmt", "schema_id", "error"), [
    (WireFormat.CONFLUENT, VERSION_ID, "confluent wire format carries an uncompressed body and an integer id"),
    (WireFormat.GLUE, 7, "glue wire format carries a schema version UUID"),
    (WireFormat.CONFLUENT, 2**32, "does not fit the confluent wire format's 4-byte id"),
])
def test_ids_the_format_cannot_carry_are_refused(fmt: WireFormat, schema_id: int | uuid.UUID, error: str) -> None:
    with pytest.raises(WireFormatError, match=error):
        frame(fmt, schema_id, b"body")


def test_only_glue_compresses() -> None:
    with pytest.raises(WireFormatError, match="uncompressed body"):
        frame(WireFormat.CONFLUENT, 1, b"body", compressed=True)


def test_detection_where_the_header_says() -> None:
    glue = frame(WireFormat.GLUE, VERSION_ID, b"body")
    assert detect(glue) is WireFormat.GLUE
    assert unframe(glue) == (VERSION_ID, b"body")


@pytest.mark.parametrize("fmt", [WireFormat.CONFLUENT, WireFormat.APICURIO_LEGACY])
def test_detection_refuses_magic_byte_zero_unless_pinned(fmt: WireFormat) -> None:
    message = frame(fmt, 1, b"x")
    with pytest.raises(AmbiguousWireFormatError, match="configure the wire format"):
        unframe(message)
    assert unframe(message, fmt) == (1, b"x")


@pytest.mark.parametrize(("message", "error"), [(b"", "empty message"), (b'{"json": 1}', "first byte 123 is neither")])
def test_detection_names_unknown_headers(message: bytes, error: str) -> None:
    with pytest.raises(WireFormatError, match=error):
        detect(message)


def test_formats_are_named_as_configured() -> None:
    assert [WireFormat(name) for name in ("confluent", "apicurio-legacy", "glue")] == list(WireFormat)
