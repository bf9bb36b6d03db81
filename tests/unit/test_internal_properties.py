"""The gateway's own bookkeeping (`__gw.*`, `__kafka.*` properties) never reaches a Kafka
consumer as a header, however the message was written."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.backend.resend_filter import SEQ
from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.kafka_codec.record_mapping import HEADER_ORDER, headers_of, to_message


def _stored(properties: dict[str, str]) -> StoredMessage:
    return StoredMessage((1, 0, -1), b"v", "k", properties, 0, 1)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["b", "a", "c", SEQ, "__kafka.x", "__gw.records"]),
            st.one_of(st.none(), st.binary(max_size=3), st.just(b"ok")),
        ),
        max_size=5,
    )
)
def test_headers_read_back_are_the_ones_written_and_no_stamp(headers) -> None:
    written = to_message(b"k", b"v", 1, headers)
    properties = dict(written.properties or {})
    properties[SEQ] = "41"  # what the backend adds to every message it sends
    assert headers_of(_stored(properties)) == headers


def test_a_foreign_header_order_naming_a_stamp_does_not_leak_it() -> None:
    properties = {"a": "1", SEQ: "7", HEADER_ORDER: f'["{SEQ}", "a", "gone"]'}
    assert headers_of(_stored(properties)) == [("a", b"1")]
