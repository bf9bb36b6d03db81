"""A big Produce body read straight into one buffer (handlers/kafka/body_reader.py) gets
exactly the bytes `readexactly` gets, however the stream is split and whenever the reading
starts, and the stream goes on after it as before; the end of the stream or a connection's
error in the middle ends the read as `readexactly`'s would."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.kafka.body_reader import BodyBuffers, BodyReader


async def _fed(reader: BodyReader, stream: bytes, cuts: list[int], early: int) -> None:
    """`stream` fed in pieces cut at `cuts`, the first `early` of them before anyone reads,
    a turn of the loop between the later ones."""
    edges = [0, *sorted(cut % (len(stream) + 1) for cut in cuts), len(stream)]
    pieces = [stream[a:b] for a, b in zip(edges, edges[1:], strict=False)]
    for index, piece in enumerate(pieces):
        if index >= early:
            await asyncio.sleep(0)
        reader.feed_data(piece)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.binary(min_size=1, max_size=300),
    st.integers(0, 40),
    st.binary(max_size=60),
    st.lists(st.integers(0, 10_000), max_size=12),
    st.integers(0, 13),
    st.integers(1, 64),
)
def test_the_body_is_what_readexactly_reads(body, at, rest, cuts, early, limit) -> None:
    at = min(at, len(body))  # bytes of the frame already read before (`start`)
    stream = body[at:] + rest
    progress: list[int] = []

    async def scenario() -> tuple[bytearray, bytes]:
        reader = BodyReader(limit)
        feeding = asyncio.ensure_future(_fed(reader, stream, cuts, early))
        if early:
            await asyncio.sleep(0)
        target = bytearray(len(body))
        target[:at] = body[:at]
        await reader.read_into(target, at, progress.append)
        await feeding
        reader.feed_eof()
        return target, await reader.read()

    target, after = asyncio.run(asyncio.wait_for(scenario(), 5))  # a lost wake-up: a hang
    assert target == body and after == rest
    assert progress == sorted(progress) and all(at < p <= len(body) for p in progress)
    assert not progress or progress[-1] == len(body)


@settings(max_examples=examples(100), deadline=None)
@given(st.binary(min_size=2, max_size=200), st.data())
def test_the_end_of_the_stream_mid_body_is_an_incomplete_read(body, data) -> None:
    sent = data.draw(st.integers(0, len(body) - 1))

    async def scenario() -> None:
        reader = BodyReader(16)
        reading = asyncio.ensure_future(reader.read_into(bytearray(len(body)), 0, lambda n: None))
        await asyncio.sleep(0)
        reader.feed_data(body[:sent])
        reader.feed_eof()
        with pytest.raises(asyncio.IncompleteReadError) as ended:
            await reading
        assert ended.value.partial == body[:sent] and ended.value.expected == len(body)

    asyncio.run(asyncio.wait_for(scenario(), 5))


def test_a_connection_error_mid_body_ends_the_read_with_it() -> None:
    async def scenario() -> None:
        reader = BodyReader(16)
        reading = asyncio.ensure_future(reader.read_into(bytearray(100), 0, lambda n: None))
        await asyncio.sleep(0)
        reader.feed_data(b"x" * 10)
        await asyncio.sleep(0)
        reader.set_exception(ConnectionResetError("gone"))
        with pytest.raises(ConnectionResetError):
            await reading
        # nothing is being filled any more: later bytes are buffered as usual
        assert reader._into is None

    asyncio.run(asyncio.wait_for(scenario(), 5))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.booleans()), min_size=1, max_size=12))
def test_a_body_buffer_is_handed_out_again_only_once_nothing_views_it(bodies) -> None:
    """`BodyBuffers`: bodies of random sizes, some kept (a view of a slice of them, as a
    compressed batch's bytes are kept for tail fetches), the others dropped: a kept body's
    bytes never change however many bodies come after it, and a buffer dropped is reused
    (no new allocation while one is free)."""
    buffers = BodyBuffers(count=2, smallest=100, largest=2000)
    kept: list[tuple[memoryview | bytearray, bytes]] = []
    for index, (size, keep) in enumerate(bodies):
        body = buffers.take(size)
        assert len(body) == size and not memoryview(body).readonly
        content = bytes([index % 256]) * size
        body[:] = content
        if keep:
            kept.append((body[size // 3 :], content[size // 3 :]))
        del body
        for view, expected in kept:
            assert bytes(view) == expected


def test_a_dropped_body_buffer_is_handed_out_again() -> None:
    buffers = BodyBuffers(count=2, smallest=100, largest=2000)
    first = buffers.take(1000)
    held = buffers.take(500)
    assert isinstance(first, memoryview) and isinstance(held, memoryview)
    assert isinstance(buffers.take(500), bytearray)  # both held: one of its own
    assert isinstance(buffers.take(50), bytearray)  # under `smallest`
    assert isinstance(buffers.take(2001), bytearray)  # over `largest`
    del first
    again = buffers.take(1500)  # the first one's buffer, grown
    assert isinstance(again, memoryview) and len(again) == 1500
    assert isinstance(buffers.take(500), bytearray)  # `held` still holds the other


def test_cleared_body_buffers_are_not_handed_out_again() -> None:
    """Once the listener's last connection has gone (`clear`), nothing stays allocated: a
    buffer still viewed is no longer the pool's, the next body gets a new one."""
    buffers = BodyBuffers(count=1, smallest=100, largest=2000)
    kept = buffers.take(1000)
    buffers.clear()
    fresh = buffers.take(1000)
    assert isinstance(fresh, memoryview)
    fresh[:] = b"x" * 1000
    assert bytes(kept) != bytes(fresh)  # not the same memory
