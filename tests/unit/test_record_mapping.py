"""Kafka record -> Pulsar message -> Kafka record is lossless, and plain values stay plain
(so Pulsar consumers see the KoP mapping)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.backend.resend_filter import SEQ
from pulsar_gateway.gateway.messages import OutMessage, StoredMessage
from pulsar_gateway.kafka_codec.record_mapping import headers_of, key_of, timestamp_of, to_message


def _stored(message: OutMessage, publish_time: int = 5) -> StoredMessage:
    """As read back from Pulsar: the backend stamps every message it writes (SEQ)."""
    return StoredMessage(
        (0, 0, -1),
        message.payload,
        message.key or "",
        {**(message.properties or {}), SEQ: "7"},
        message.event_time,
        publish_time,
    )


header_names = st.one_of(
    st.text(min_size=0, max_size=12), st.sampled_from(["__gw.seq", "__gw.x", "__kafka.y"])
)
header_values = st.one_of(st.none(), st.binary(max_size=20))


@given(
    key=st.one_of(st.none(), st.binary(max_size=16)),
    value=st.one_of(st.none(), st.binary(max_size=64)),
    timestamp=st.integers(min_value=1, max_value=2**62),
    headers=st.lists(st.tuples(header_names, header_values), max_size=6),
)
def test_round_trip_is_lossless(key, value, timestamp, headers) -> None:
    stored = _stored(to_message(key, value, timestamp, headers))
    assert key_of(stored) == key
    assert stored.payload == value
    assert headers_of(stored) == headers
    assert timestamp_of(stored) == timestamp


def test_plain_records_map_to_plain_messages() -> None:
    message = to_message(b"user-1", b"v", 1000, [("a", b"1"), ("b", b"two")])
    assert message.key == "user-1"
    assert message.properties == {"a": "1", "b": "two"}
    unsorted = to_message(None, b"v", 1000, [("z", b"1"), ("a", b"2")])
    assert unsorted.properties["z"] == "1" and unsorted.properties["a"] == "2"
    assert message.event_time == 1000


def test_messages_from_pulsar_producers_map_naturally() -> None:
    stored = StoredMessage((1, 2, -1), b"p", "k", {"x": "y"}, 0, 1234)
    assert key_of(stored) == b"k"
    assert headers_of(stored) == [("x", b"y")]
    assert timestamp_of(stored) == 1234  # publish time stands in for a missing event time
    assert key_of(StoredMessage((1, 2, -1), b"p", "", {}, 0, 1)) is None


def test_gateway_stamps_are_not_headers() -> None:
    stored = _stored(to_message(b"k", b"v", 1, [("a", b"1")]))
    assert headers_of(stored) == [("a", b"1")]
    assert headers_of(_stored(to_message(b"k", b"v", 1, []))) == []
