"""The `native` client's entries (gateway/backend/native_writer.py): every Kafka record of a
batch comes back from the batched entries as the message pulsar-client would have written
(key as partition and ordering key, properties with the `__gw.seq` stamp, event time, null
value), in order, cut under the size limit, and a record over it alone and unbatched."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.native_writer import EntryBuffers, entries, lone_entry
from pulsar_gateway.gateway.backend.wire.batch import split_batch
from pulsar_gateway.gateway.backend.wire.messages import MessageMetadata
from pulsar_gateway.gateway.messages import OutMessage

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
records = st.builds(
    OutMessage,
    st.none() | st.binary(max_size=300),
    st.none() | text,
    st.none() | st.dictionaries(text, text, max_size=3),
    st.integers(0, 2**41),
)


def _unpacked(messages: list[OutMessage], limit: int, whole: bool = True) -> list[tuple]:
    out = []
    for entry in entries(messages, 7, whole, limit):
        if entry.batched:
            assert len(entry.payload) <= limit + 16
            out += [
                (m.payload, m.key, m.ordering_key, m.properties, m.event_time)
                for m in split_batch(entry.payload, entry.num_messages)
            ]
        else:
            meta = MessageMetadata.decode(b"\x0a\x00\x10\x00\x18\x00" + entry.metadata_fields)
            out.append(
                (
                    None if meta.null_value else entry.payload,
                    meta.partition_key,
                    meta.ordering_key,
                    meta.properties_dict(),
                    meta.event_time,
                )
            )
    return out


def _expected(messages: list[OutMessage], whole: bool = True) -> list[tuple]:
    last = len(messages) - 1
    out = []
    for index, m in enumerate(messages):
        stamp = f"{7 + index}{'+' if whole and index != last else ''}"
        key = m.key or None
        out.append(
            (
                m.payload,
                key,
                key.encode("utf-8", "surrogateescape") if key else None,
                {"__gw.seq": stamp, **(m.properties or {})},
                m.event_time,
            )
        )
    return out


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(records, min_size=1, max_size=30), st.integers(200, 3000), st.booleans())
def test_entries_carry_every_record_as_pulsar_client_would(messages, limit, whole) -> None:
    assert _unpacked(messages, limit, whole) == _expected(messages, whole)


def test_a_batch_over_the_limit_is_cut_and_a_huge_record_goes_alone() -> None:
    messages = [OutMessage(b"a" * 400, "k") for _ in range(10)]
    messages.insert(5, OutMessage(b"b" * 5000, "big"))
    cut = entries(messages, 1, True, 1000)
    assert [e.batched for e in cut] == [True, True, True, False, True, True, True]
    assert sum(e.num_messages for e in cut) == 11
    assert all(len(e.payload) <= 1000 for e in cut if e.batched)
    assert _unpacked(messages, 1000) == _expected(messages)


def test_a_lone_entry_is_unbatched_with_its_stamp() -> None:
    entry = lone_entry(OutMessage(None, "k", {"h": "v"}, 5), 3, True)
    assert not entry.batched and entry.payload == b""
    meta = MessageMetadata.decode(b"\x0a\x00\x10\x00\x18\x00" + entry.metadata_fields)
    assert meta.null_value and meta.partition_key == "k" and meta.ordering_key == b"k"
    assert meta.properties_dict() == {"__gw.seq": "3+", "h": "v"}


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.binary(max_size=40), max_size=8), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_entry_buffers_never_overwrite_a_payload_still_held(joins) -> None:
    """Each join gives its parts' bytes, and keeps giving them while held, whatever is
    joined after it: a buffer still exported is passed over; one let go is used again;
    with every buffer held, or outside the sizes, the parts are joined into new bytes."""
    buffers = EntryBuffers(count=2, smallest=1, largest=200)
    held: list[tuple[bytes | memoryview, bytes]] = []
    for parts, keep in joins:
        payload = buffers.join(parts)
        expected = b"".join(parts)
        assert payload == expected
        assert isinstance(payload, memoryview) or not 1 <= len(expected) <= 200 or len(held) >= 2
        if keep:
            held.append((payload, expected))
        del payload
        for kept, its_bytes in held:
            assert kept == its_bytes
    assert len(buffers._buffers) <= 2


def test_a_buffer_let_go_is_joined_into_again() -> None:
    buffers = EntryBuffers(count=1, smallest=1, largest=100)
    first = buffers.join([b"abc", b"def"])
    assert isinstance(first, memoryview)
    second = buffers.join([b"xyz"])  # the only buffer is held: new bytes
    assert isinstance(second, bytes) and second == b"xyz" and first == b"abcdef"
    first.release()
    third = buffers.join([b"uv", b"w"])
    assert isinstance(third, memoryview) and third == b"uvw"
    assert len(buffers._buffers) == 1  # the same buffer, written again
