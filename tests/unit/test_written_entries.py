"""What the native writer notes of each batched entry (gateway/backend/written_entries.py)
is what the gateway's reader would parse back from that entry: the reader then skips the
parse. Also: the notes are taken once, dropped when they do not fit the entry, and bounded."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.native_reader import claim_written, stored_messages
from pulsar_gateway.gateway.backend.native_writer import entries
from pulsar_gateway.gateway.backend.wire import MessageId, ReceivedEntry
from pulsar_gateway.gateway.backend.wire.batch import split_batch
from pulsar_gateway.gateway.backend.wire.messages import MessageMetadata
from pulsar_gateway.gateway.backend.written_entries import WrittenEntries, WrittenEntry
from pulsar_gateway.gateway.messages import OutMessage, StoredMessage

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
records = st.builds(
    OutMessage,
    st.none() | st.binary(max_size=300),
    st.none() | text,
    st.none() | st.dictionaries(text, text, max_size=3),
    st.integers(-5, 2**41),
)


def _parsed(payload: bytes, count: int, ledger: int, entry: int) -> list[StoredMessage]:
    """What native_reader.stored_messages makes of a batched entry it parses."""
    return [
        StoredMessage(
            (ledger, entry, m.batch_index),
            m.payload,
            m.key or "",
            m.properties,
            m.event_time,
            1234,
            "gw-x.native",
        )
        for m in split_batch(payload, count)
    ]


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(records, min_size=1, max_size=30), st.integers(200, 3000), st.booleans())
# equal properties in another order: the writer, comparing dicts, wrote the second message
# with the first's order (found in cc28)
@example(
    [OutMessage(None, None, {"": "", "0": ""}), OutMessage(None, None, {"0": "", "": ""})],
    200,
    False,
)
def test_a_noted_entry_gives_what_parsing_it_gives(messages, limit, whole) -> None:
    noted = 0
    for position, entry in enumerate(entries(messages, 7, whole, limit)):
        if not entry.batched:
            assert entry.note is None  # an unbatched entry is parsed as before
            continue
        note = entry.note
        assert isinstance(note, WrittenEntry)
        mine = note.stored(3, position, 1234, "gw-x.native")
        parsed = _parsed(entry.payload, entry.num_messages, 3, position)
        assert mine == parsed
        # property order too: a fetch maps them to headers in order
        assert [list(m.properties) for m in mine] == [list(m.properties) for m in parsed]
        noted += entry.num_messages
    assert noted == sum(
        1 for e in entries(messages, 7, whole, limit) if e.batched for _ in range(e.num_messages)
    )


def _note(count: int) -> WrittenEntry:
    return WrittenEntry([OutMessage(b"v")] * count, 1, False, True)


def test_a_note_is_taken_once_and_only_for_an_entry_of_its_size() -> None:
    written = WrittenEntries()
    written.add("p", 5, _note(3), 30)
    written.add("p", 8, _note(2), 20)
    assert written.take("p", 5, 3) is not None
    assert written.take("p", 5, 3) is None  # taken
    assert written.take("q", 8, 2) is None  # another producer's
    assert written.take("p", 8, 3) is None  # not the entry noted: parsed instead, note gone
    assert written.take("p", 8, 2) is None
    assert len(written) == 0 and written.messages == written.bytes == 0


def test_notes_never_read_are_dropped_oldest_first() -> None:
    written = WrittenEntries(max_messages=10)
    for sequence in range(0, 20, 4):
        written.add("p", sequence, _note(4), 1)
    assert written.messages <= 10
    assert written.take("p", 0, 4) is None
    assert written.take("p", 16, 4) is not None


def test_notes_are_bounded_in_bytes_too() -> None:
    written = WrittenEntries(max_bytes=1000)
    for sequence in range(10):
        written.add("p", sequence, _note(1), 300)
    assert written.bytes <= 1000 and len(written) == 3
    assert written.take("p", 6, 1) is None
    assert written.take("p", 9, 1) is not None


def test_a_claimed_entry_without_its_payload_reads_as_the_whole_entry() -> None:
    """The tailer's reader takes an entry's note as its frame arrives
    (native_reader.claim_written), and the frame then carries no payload: the entry gives
    exactly what the entry with its payload and the note still kept gives. Unbatched and
    chunked entries, another producer's and an entry of another size claim nothing."""
    messages = [OutMessage(b"v%d" % i, f"k{i}", {"h": str(i)}, 1000 + i) for i in range(5)]
    [entry] = entries(messages, 7, True, 1 << 20)
    note, payload = entry.note, bytes(entry.payload)
    assert isinstance(note, WrittenEntry)
    metadata = MessageMetadata("gw-x.native", 7, 1234, num_messages_in_batch=5)
    kept, claiming = WrittenEntries(), WrittenEntries()
    for written in (kept, claiming):
        written.add("gw-x.native", 7, note, len(payload))
    whole = ReceivedEntry(MessageId(3, 4), metadata, payload)
    claimed = claim_written(claiming, metadata)
    assert isinstance(claimed, WrittenEntry) and len(claiming) == 0
    bare = ReceivedEntry(MessageId(3, 4), metadata, b"", claimed=claimed)
    assert stored_messages(bare, claiming) == stored_messages(whole, kept)
    assert stored_messages(bare, claiming) == _parsed(payload, 5, 3, 4)
    for other in (
        MessageMetadata("gw-x.native", 7, 1234),  # unbatched
        MessageMetadata("gw-y.native", 7, 1234, num_messages_in_batch=5),
        MessageMetadata("gw-x.native", 7, 1234, num_messages_in_batch=4),
        MessageMetadata("gw-x.native", 7, 1234, num_messages_in_batch=5, num_chunks_from_msg=2),
    ):
        again = WrittenEntries()
        again.add("gw-x.native", 7, note, len(payload))
        assert claim_written(again, other) is None
