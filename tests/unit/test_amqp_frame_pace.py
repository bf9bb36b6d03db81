"""A half-sent AMQP frame is judged against a minimum rate after a grace (issue 33,
"timeouts on half-sent frames"), as Kafka frames are.

Before, an AMQP frame under way was given up only when no byte came for
`amqp.frame_timeout_seconds` (30 s): a frame header claiming 100 KiB, then a byte every
tenth of a second, held its connection, its buffer and its slot for as long as the client
liked. Now, once `amqp.frame_grace_seconds` have passed since the frame began, its bytes
must average `amqp.min_frame_bytes_per_second` (frame_pace.py). A listener on the
in-memory store, spoken to by hand over a real socket (harness/raw_amqp_socket.py).
"""

from __future__ import annotations

import asyncio
import struct
import time

from pamqp import commands

from harness.amqp_memory_store import MemoryStore
from harness.raw_amqp_socket import next_method, open_connection
from pulsar_gateway.gateway.config import AmqpSection
from pulsar_gateway.handlers.amqp.frame_pace import FramePace
from pulsar_gateway.handlers.amqp.frames import FrameReader, encode_content, encode_method
from pulsar_gateway.handlers.amqp.server import AmqpServer

KIB = 1024
GRACE = 0.5
METHOD_FRAME = 1


def _trickle_until_closed(port: int, seconds: float) -> float:
    """A frame header claiming 100 KiB, then a byte every tenth of a second: how long until
    the listener closes the connection (``seconds`` if it does not)."""
    sock = open_connection(port)
    sock.settimeout(0.1)
    started = time.monotonic()
    try:
        sock.sendall(struct.pack(">BHI", METHOD_FRAME, 0, 100 * KIB))
        while time.monotonic() - started < seconds:
            try:
                if sock.recv(65536) == b"":
                    return time.monotonic() - started
            except TimeoutError:
                pass
            sock.sendall(b"x")
    except OSError:  # reset while writing: closed too
        return time.monotonic() - started
    finally:
        sock.close()
    return seconds


def test_a_trickled_frame_is_closed_after_the_grace() -> None:
    async def scenario() -> None:
        # frame_timeout_seconds at its 30 s default: a byte every 0.1 s never stalls
        server = AmqpServer(AmqpSection(port=0, frame_grace_seconds=GRACE), MemoryStore())
        await server.start()
        try:
            took = await asyncio.to_thread(_trickle_until_closed, server.address[1], 10.0)
            # at the grace plus what the trickle's bytes earned at the floor (none to speak of)
            assert took < GRACE + 1.5, f"a trickled frame held its connection {took:.1f} s"
        finally:
            await server.stop()

    asyncio.run(scenario())


def _slow_publish(port: int, body_size: int, chunk: int, pause: float) -> tuple[float, object]:
    """basic.publish with a body of one frame, sent ``chunk`` bytes at a time; then
    channel.close: (how long the sending took, the answer to the close)."""
    sock = open_connection(port)
    reader = FrameReader(0)
    try:
        sock.sendall(encode_method(1, commands.Channel.Open()))
        assert isinstance(next_method(sock, reader), commands.Channel.OpenOk)
        publish = commands.Basic.Publish(exchange="", routing_key="nowhere")
        frames = encode_content(1, publish, b"b" * body_size, b"\x00\x00", 131072)
        started = time.monotonic()
        for at in range(0, len(frames), chunk):
            sock.sendall(frames[at : at + chunk])
            time.sleep(pause)
        took = time.monotonic() - started
        sock.sendall(
            encode_method(1, commands.Channel.Close(reply_code=200, class_id=0, method_id=0))
        )
        return took, next_method(sock, reader)
    finally:
        sock.close()


def test_a_slow_frame_above_the_floor_is_read_past_the_grace() -> None:
    """A 120 KiB body frame sent at ~80 KiB/s, over the 16 KiB/s floor set here, takes
    about three times the grace to arrive and is taken: the grace bounds trickles, not
    slow links."""

    async def scenario() -> None:
        settings = AmqpSection(
            port=0, frame_grace_seconds=GRACE, min_frame_bytes_per_second=16 * KIB
        )
        server = AmqpServer(settings, MemoryStore())
        await server.start()
        try:
            took, answer = await asyncio.to_thread(
                _slow_publish, server.address[1], 120 * KIB, 8 * KIB, 0.1
            )
            assert took > 2 * GRACE, f"sent in {took:.1f} s: not slower than the grace"
            assert isinstance(answer, commands.Channel.CloseOk), answer
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_the_pace_names_why_and_starts_again_after_a_pause() -> None:
    pace = FramePace(stall_seconds=30.0, grace_seconds=5.0, min_bytes_per_second=1000)
    assert pace.deadline() is None  # between frames: heartbeats rule
    pace.read(now=100.0, size=10, unfinished=10)
    assert pace.deadline() == 100.0 + 5.0 + 10 / 1000
    pace.read(now=101.0, size=2000, unfinished=2010)
    assert pace.deadline() == 100.0 + 5.0 + 2010 / 1000
    assert "amqp.min_frame_bytes_per_second" in pace.why(107.2)
    assert "amqp.frame_timeout_seconds" in pace.why(131.0)
    pace.restart(now=200.0)  # the gateway did not read: not the client's time
    assert pace.deadline() == 205.0
    pace.read(now=201.0, size=5, unfinished=0)  # the frame is complete
    assert pace.deadline() is None
