import pytest

from registry.wire import WireFormatError, confluent_frame, confluent_unframe


def test_confluent_round_trip() -> None:
    framed = confluent_frame(258, b"body")
    assert framed == b"\x00\x00\x00\x01\x02body"
    assert confluent_unframe(framed) == (258, b"body")


@pytest.mark.parametrize(("message", "error"), [(b"\x00\x01", "shorter than the 5-byte"), (b"\x07\x00\x00\x00\x01x", "magic byte 7")])
def test_malformed_headers_are_named(message: bytes, error: str) -> None:
    with pytest.raises(WireFormatError, match=error):
        confluent_unframe(message)
