"""The frame codec: frames split anywhere, checksums, size limits, the broker-entry prefix,
and hostile bytes that never raise anything but DecodeError nor grow the buffer."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.wire import commands as c
from pulsar_gateway.gateway.backend.wire.errors import ChecksumMismatch, DecodeError, FrameTooLarge
from pulsar_gateway.gateway.backend.wire.frames import (
    FrameReader,
    payload_frame_head,
    payload_section,
    simple_frame,
)
from pulsar_gateway.gateway.backend.wire.messages import (
    BrokerEntryMetadata,
    KeyValue,
    MessageIdData,
    MessageMetadata,
)

METADATA = MessageMetadata("p", 7, 1234, [KeyValue("a", "b")], partition_key="k")


def _message_frame(payload: bytes, broker_entry: BrokerEntryMetadata | None = None) -> bytes:
    section = payload_section(METADATA.encode(), payload)
    if broker_entry is not None:
        encoded = broker_entry.encode()
        section = b"\x0e\x02" + struct.pack(">I", len(encoded)) + encoded + section
    command = c.Message(5, MessageIdData(3, 4), redelivery_count=2)
    return payload_frame_head(command, len(section)) + section


def _stream() -> tuple[bytes, int]:
    frames = [
        simple_frame(c.Ping()),
        _message_frame(b"hello"),
        simple_frame(c.SendReceipt(1, 2, MessageIdData(3, 4))),
        _message_frame(b"", BrokerEntryMetadata(99, 1000)),
        _message_frame(bytes(range(256)) * 10),
    ]
    return b"".join(frames), len(frames)


def test_frames_split_at_every_byte() -> None:
    stream, count = _stream()
    whole = FrameReader().feed(stream)
    assert len(whole) == count
    for cut in range(len(stream) + 1):
        reader = FrameReader()
        got = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert got == whole, cut
        assert reader.buffered == 0
    reader = FrameReader()
    one_by_one = [frame for i in range(len(stream)) for frame in reader.feed(stream[i : i + 1])]
    assert one_by_one == whole


def test_a_message_frame_carries_metadata_payload_and_broker_entry() -> None:
    frames = FrameReader().feed(_message_frame(b"data", BrokerEntryMetadata(11, 22)))
    assert len(frames) == 1
    frame = frames[0]
    assert frame.command == c.Message(5, MessageIdData(3, 4), redelivery_count=2)
    assert frame.metadata == METADATA
    assert frame.payload == b"data"
    assert frame.broker_entry == BrokerEntryMetadata(11, 22)


def test_the_checksum_covers_metadata_and_payload() -> None:
    frame = bytearray(_message_frame(b"payload"))
    frame[-1] ^= 1  # the payload's last byte
    with pytest.raises(ChecksumMismatch):
        FrameReader().feed(bytes(frame))
    frame = bytearray(_message_frame(b"payload"))
    at = frame.index(b"\x0e\x01") + 2
    frame[at] ^= 0xFF  # the checksum itself
    with pytest.raises(ChecksumMismatch):
        FrameReader().feed(bytes(frame))
    reader = FrameReader()
    reader.verify_checksums = False
    assert reader.feed(bytes(frame))[0].payload == b"payload"


def test_the_send_section_checksum_is_crc32c() -> None:
    metadata = METADATA.encode()
    section = payload_section(metadata, b"xyz")
    assert section[:2] == b"\x0e\x01"
    covered = struct.pack(">I", len(metadata)) + metadata + b"xyz"
    assert struct.unpack(">I", section[2:6])[0] == crc32c(covered)


def test_a_frame_over_the_limit_is_refused_before_it_is_buffered() -> None:
    reader = FrameReader(max_frame_size=1000)
    with pytest.raises(FrameTooLarge):
        reader.feed(struct.pack(">I", 1001))
    reader = FrameReader(max_frame_size=1000)
    assert reader.feed(struct.pack(">I", 1000) + b"\x00" * 10) == []  # waits for the rest


def test_inconsistent_sizes_are_decode_errors() -> None:
    ping = c.encode_command(c.Ping())
    with pytest.raises(DecodeError):  # total too small for the command size field
        FrameReader().feed(struct.pack(">I", 2) + b"\x00\x00")
    with pytest.raises(DecodeError):  # command longer than its frame
        FrameReader().feed(struct.pack(">II", 4 + len(ping), len(ping) + 5) + ping)
    section = payload_section(METADATA.encode(), b"p")
    bad = bytearray(payload_frame_head(c.Message(1, MessageIdData(1, 1)), len(section)) + section)
    at = bad.index(b"\x0e\x01") + 6
    bad[at : at + 4] = struct.pack(">I", 10_000)  # metadata longer than the frame
    reader = FrameReader()
    reader.verify_checksums = False
    with pytest.raises(DecodeError):
        reader.feed(bytes(bad))


def test_unknown_commands_come_through_as_unknown() -> None:
    body = b"\x08\x44\xa2\x04\x00"  # type 68 with an empty body in field 68
    frame = struct.pack(">II", 4 + len(body), len(body)) + body
    assert FrameReader().feed(frame)[0].command == c.UnknownCommand(68)


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=300), st.integers(1, 50))
def test_random_bytes_never_raise_anything_but_decode_error(data: bytes, step: int) -> None:
    reader = FrameReader(max_frame_size=4096)
    try:
        for at in range(0, len(data), step):
            reader.feed(data[at : at + step])
            assert reader.buffered <= 4096 + 4 + step
    except DecodeError:
        pass


@settings(max_examples=examples(200), deadline=None)
@given(st.data())
def test_corrupted_and_truncated_frames_raise_decode_error_or_parse(data: st.DataObject) -> None:
    stream = bytearray(_stream()[0])
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(stream) - 1))
        stream[at] = data.draw(st.integers(0, 255))
    stream = stream[: data.draw(st.integers(0, len(stream)))]
    reader = FrameReader(max_frame_size=1 << 16)
    try:
        reader.feed(bytes(stream))
    except DecodeError:
        pass


def _outcome(reader: FrameReader, stream: bytes) -> object:
    try:
        return reader.feed(stream)
    except DecodeError as exc:
        return type(exc), str(exc)


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_large_frames_read_as_the_rest_are(data: st.DataObject) -> None:
    """A frame over `large_frame` is read from copies of its head and payload
    (frames._large_frame): the same frames, or the same error, as the whole-frame copy."""
    stream = bytearray(_stream()[0] + _message_frame(bytes(range(256)) * 300))
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(stream) - 1))
        stream[at] = data.draw(st.integers(0, 255))
    stream = stream[: data.draw(st.integers(0, len(stream)))]
    verify = data.draw(st.booleans())
    small, large = FrameReader(max_frame_size=1 << 20), FrameReader(max_frame_size=1 << 20)
    small.verify_checksums = large.verify_checksums = verify
    small.large_frame = 1 << 30
    large.large_frame = data.draw(st.sampled_from([0, 100, 64 * 1024]))
    assert _outcome(large, bytes(stream)) == _outcome(small, bytes(stream))


def test_a_large_frame_split_anywhere_reads_whole_with_its_checksum_checked() -> None:
    payload = bytes(range(256)) * 300  # 76,800 bytes: over LARGE_FRAME
    frame = _message_frame(payload, BrokerEntryMetadata(1, 2))
    reader = FrameReader()
    [whole] = reader.feed(frame)
    assert whole.payload == payload and whole.metadata == METADATA
    assert whole.broker_entry == BrokerEntryMetadata(1, 2)
    for cut in range(0, len(frame), 997):
        assert reader.feed(frame[:cut]) + reader.feed(frame[cut:]) == [whole]
    damaged = bytearray(frame)
    damaged[-1] ^= 1
    with pytest.raises(ChecksumMismatch):
        FrameReader().feed(bytes(damaged))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(0, 200_000), max_size=30), st.integers(1, 4))
def test_one_reader_cut_anywhere_reads_a_long_stream_whole(cuts: list[int], rounds: int) -> None:
    """One reader kept across big and small frames in pieces of any size (its buffer keeps
    its size between frames, the bytes left over moved to its front): the frames the whole
    stream gives, nothing left over."""
    small, _ = _stream()
    big = _message_frame(bytes(range(256)) * 400)
    stream = (small + big + small[:40] + small[40:] + big) * rounds
    whole = FrameReader().feed(stream)
    edges = [0, *sorted(cut % (len(stream) + 1) for cut in cuts), len(stream)]
    reader = FrameReader()
    got = [
        frame for a, b in zip(edges, edges[1:], strict=False) for frame in reader.feed(stream[a:b])
    ]
    assert got == whole
    assert reader.buffered == 0


def test_a_big_frame_after_another_is_read_into_the_same_buffer() -> None:
    """The tailer reads back every entry the gateway writes: after the first big frame
    the reader's buffer is not allocated again (each new block of a megabyte was fresh pages
    faulted in), only the frame's payload is (tracemalloc's peak: about one payload)."""
    payload = bytes(range(256)) * 4096  # 1 MiB
    frame = _message_frame(payload)
    reader = FrameReader()
    for at in range(0, len(frame), 65536):
        reader.feed(frame[at : at + 65536])
    tracemalloc.start()
    try:
        got = [f for at in range(0, len(frame), 65536) for f in reader.feed(frame[at : at + 65536])]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [f.payload for f in got] == [payload]
    assert peak < 1.5 * len(payload), peak


@pytest.mark.parametrize("size", [100, 1 << 20])  # a small frame and a large one
def test_a_claimed_message_is_read_without_copying_its_payload(size: int) -> None:
    """What `claim` gives for a MESSAGE stands for its payload, which is not copied out
    (the tailer makes the gateway's own entries from the writer's note: written_entries.py)
    but still checked; what it gives None for is read as before."""
    payload = bytes(range(256)) * (size // 256 + 1)
    frame = _message_frame(payload)
    asked: list[tuple[object, MessageMetadata]] = []

    def claim(command: object, metadata: MessageMetadata) -> object:
        asked.append((command, metadata))
        return "note" if len(asked) == 2 else None

    reader = FrameReader()
    reader.claim = claim
    [unclaimed] = reader.feed(frame)  # (the reader's buffer grown to the frame's size)
    assert (unclaimed.claimed, unclaimed.payload) == (None, payload)
    del unclaimed
    tracemalloc.start()
    try:
        [claimed] = reader.feed(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert asked == [(c.Message(5, MessageIdData(3, 4), redelivery_count=2), METADATA)] * 2
    assert (claimed.claimed, claimed.payload, claimed.metadata) == ("note", b"", METADATA)
    if size > 1000:
        assert peak < len(payload) // 4, peak
    damaged = bytearray(frame)
    damaged[-1] ^= 1
    reader.claim = lambda command, metadata: "note"
    with pytest.raises(ChecksumMismatch):
        reader.feed(bytes(damaged))
