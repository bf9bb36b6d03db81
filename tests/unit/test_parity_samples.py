"""How a parity report shows an offending record: short, printable, never a wall of bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.tools.parity.samples import PREVIEW_BYTES, RecordSample, preview


def test_text_binary_and_long_values() -> None:
    assert preview(None) is None
    assert preview(b"order-17") == "order-17"
    assert preview(b"line\nbreak") == "line\\nbreak"
    assert preview(b"\xff\x00\x01") == "0xff0001"
    long = b"x" * (PREVIEW_BYTES + 10)
    assert preview(long) == "x" * PREVIEW_BYTES + f"... ({PREVIEW_BYTES + 10} bytes)"


@given(st.binary(max_size=4096))
def test_a_preview_is_printable_and_bounded(data: bytes) -> None:
    shown = preview(data)
    assert shown is not None and shown.isprintable()
    assert len(shown) <= 2 + 4 * PREVIEW_BYTES + len(f"... ({len(data)} bytes)")


def test_a_sample_as_json_and_as_a_line() -> None:
    sample = RecordSample.of(11, b"k6", b"v6", [("trace", b"abc"), ("empty", None)], 1700)
    assert sample.to_json() == {
        "offset": 11,
        "key": "k6",
        "value": "v6",
        "headers": [["trace", "abc"], ["empty", None]],
        "timestamp": 1700,
    }
    assert sample.line() == "@11 key=k6 value=v6 headers[trace=abc, empty=None] ts=1700"
