"""Every byte a Kafka connection takes from the queued-bytes budgets comes back, however the
connection ends (issue 33, "budgets that always come back").

A listener on the in-memory storage, with a small per-connection budget and a short frame
timeout, spoken to over real sockets. Connections are killed at every stage a request can
be in: half a frame sent, requests queued behind a storage that does not answer, responses
being written, and a client that stops reading its answers (the listener stops it after
`frame_timeout_seconds`). After each, the listener's budget (what
gateway_queued_request_bytes shows) is back to zero, every connection slot is free, and a
fresh client is answered. Before the fix, a connection stopped for not reading while its
reader waited for room in its budget kept its bytes and its slot for ever.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import struct

import pytest

from harness import kafka_memory_store
from harness.kafka_memory_store import memory_storage
from harness.waiting import async_wait_until
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.connection import KafkaConnection
from pulsar_gateway.handlers.kafka.server import KafkaServer
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.record_batch import encode_batch

KIB = 1024
TCP_ESTABLISHED = 1
FRAME_TIMEOUT = 0.5
PER_CONNECTION = 256 * KIB
VALUE = 1_000_000  # one record of about Kafka's message.max.bytes: each Fetch answers ~1 MB
PADDED_CLIENT = "c" * (16 * KIB)  # ~16 KiB per Fetch frame: ~15 fill a connection's budget


def request(api: int, version: int, correlation: int, body: dict, client: str = "t") -> bytes:
    return protocol.encode_request(api, version, correlation, client, body)


def fetch(correlation: int, topic: str) -> bytes:
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 2 * VALUE}
    body = {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 2 * VALUE,
        "isolation_level": 0,
        "session_id": 0,
        "topics": [{"topic": topic, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return request(1, 12, correlation, body, PADDED_CLIENT)


def produce(correlation: int, topic: str, value: bytes) -> bytes:
    records = encode_batch(0, [(0, 1000, None, value, [])])
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    return request(0, 9, correlation, body)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def connect(
    address: tuple[str, int], receive_buffer: int = 0
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client socket; with ``receive_buffer``, a small kernel window (set before connect),
    so that what the client does not read backs up into the gateway quickly."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address)
    return await asyncio.open_connection(sock=sock)


def abort(writer: asyncio.StreamWriter) -> None:
    """Close with a reset, as a killed client does."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def store_a_big_record(address: tuple[str, int]) -> None:
    """Topic `big` gets one record of VALUE bytes: every Fetch of it answers ~1 MB."""
    reader, writer = await connect(address)
    writer.write(produce(1, "big", b"v" * VALUE))
    await read_frame(reader)
    writer.close()


async def answered(address: tuple[str, int]) -> None:
    """A fresh client gets ApiVersions and Metadata answered."""
    reader, writer = await connect(address)
    try:
        writer.write(request(18, 0, 1, {}))
        writer.write(request(3, 9, 2, {"topics": None, "allow_auto_topic_creation": False}))
        async with asyncio.timeout(5):
            for _ in range(2):
                await read_frame(reader)
    finally:
        writer.close()


async def all_given_back(server: KafkaServer, stage: str) -> None:
    await async_wait_until(
        lambda: server.queued.used == 0 and server.limits.open == 0,
        5 + 4 * FRAME_TIMEOUT,
        message=f"{stage}: budget {server.queued.used} B, {server.limits.open} connections",
    )
    await answered(server.address)


def test_budgets_come_back_however_a_connection_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = asyncio.Event()
    append = kafka_memory_store.MemoryPartitionLog.append

    async def gated_append(self, *args, **kwargs):  # the port's signature, whatever it is
        if "gated" in self._topic:
            await gate.wait()
        return await append(self, *args, **kwargs)

    monkeypatch.setattr(kafka_memory_store.MemoryPartitionLog, "append", gated_append)

    async def scenario() -> None:
        settings = KafkaSection(
            port=0,
            frame_timeout_seconds=FRAME_TIMEOUT,
            max_queued_request_bytes_per_connection=PER_CONNECTION,
            max_queued_request_bytes=2 * PER_CONNECTION,
        )
        server = KafkaServer(settings, memory_storage())
        await server.start()
        address = server.address
        try:
            await store_a_big_record(address)

            # mid-frame: a size prefix and half a body, then gone
            _, writer = await connect(address)
            body = fetch(1, "big")
            writer.write(body[: len(body) // 2])
            await async_wait_until(lambda: server.queued.used > 0, 5, message="half a frame")
            abort(writer)
            await all_given_back(server, "mid-frame")

            # queued: Produce requests waiting for a storage that does not answer
            _, writer = await connect(address)
            for correlation in range(8):
                writer.write(produce(correlation, "gated", b"q" * KIB))
            await async_wait_until(
                lambda: server.queued.used > 8 * KIB, 5, message="queued produces"
            )
            abort(writer)
            gate.set()
            await all_given_back(server, "queued")

            # writing: answers going out, the client reads a little and is killed, while
            # its reader waits for room in its budget
            reader, writer = await connect(address, receive_buffer=4 * KIB)
            for correlation in range(40):
                writer.write(fetch(correlation, "big"))
            await reader.readexactly(64 * KIB)
            await async_wait_until(
                lambda: server.queued.used >= PER_CONNECTION - 20 * KIB, 5, message="full"
            )
            abort(writer)
            await all_given_back(server, "writing")

            # stopped for not reading: ten clients that never read their answers, each with
            # its budget full; each is stopped after frame_timeout_seconds
            clients = [await connect(address, receive_buffer=4 * KIB) for _ in range(10)]
            for _, writer in clients:
                for correlation in range(40):
                    writer.write(fetch(correlation, "big"))
            await async_wait_until(
                lambda: server.limits.open == 0, 10 + 4 * FRAME_TIMEOUT, message="all stopped"
            )
            await all_given_back(server, "stopped for not reading")
            # and their sockets are closed, not kept to write out what they never read
            sockets = [writer.get_extra_info("socket") for _, writer in clients]
            await async_wait_until(
                lambda: not any(map(_established, sockets)),
                5,
                message="the stopped clients' sockets reset",
            )
            for _, writer in clients:
                abort(writer)
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_a_trickled_frame_gives_its_budget_back_after_the_grace() -> None:
    """A 10 MiB size prefix, a header, then a byte every tenth of a second (never a stall
    of frame_timeout_seconds, 30 s here): the frame's budget was held for as long as the
    client liked. Now its body must average kafka.min_frame_bytes_per_second once
    kafka.frame_grace_seconds have passed, or the connection is closed: within the grace
    and a quarter of it (the watchdog's pace), not at the idle watchdog's 7.5 s."""
    grace = 0.5

    async def scenario() -> None:
        settings = KafkaSection(port=0, frame_grace_seconds=grace)
        server = KafkaServer(settings, memory_storage())
        await server.start()
        try:
            reader, writer = await connect(server.address)
            await asyncio.sleep(0.2)  # the watchdog's first turn, at the idle pace
            writer.write(struct.pack(">ihhi", 10 * 1024 * KIB, 0, 9, 1))
            await async_wait_until(lambda: server.queued.used > 0, 5, message="the claim")
            started = asyncio.get_running_loop().time()
            closed = False
            while not closed and asyncio.get_running_loop().time() - started < 10:
                writer.write(b"x")
                try:
                    async with asyncio.timeout(0.1):
                        closed = await reader.read(1) == b""
                except TimeoutError:
                    pass
                except ConnectionError:
                    closed = True
            took = asyncio.get_running_loop().time() - started
            assert closed and took < grace + 1.5, f"held for {took:.1f} s (grace {grace} s)"
            await all_given_back(server, "a trickled frame")
            abort(writer)
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_a_slow_frame_above_the_floor_is_read_past_the_grace() -> None:
    """A 256 KiB Produce sent at ~160 KiB/s, over the floor of 64 KiB/s set here, takes
    about three times the grace to arrive and is answered: the grace bounds trickles,
    not slow links."""
    grace = 0.5

    async def scenario() -> None:
        settings = KafkaSection(
            port=0, frame_grace_seconds=grace, min_frame_bytes_per_second=64 * KIB
        )
        server = KafkaServer(settings, memory_storage())
        await server.start()
        try:
            reader, writer = await connect(server.address)
            frame = produce(1, "slow", b"s" * (256 * KIB))
            started = asyncio.get_running_loop().time()
            for at in range(0, len(frame), 16 * KIB):
                writer.write(frame[at : at + 16 * KIB])
                await writer.drain()
                await asyncio.sleep(0.1)
            took = asyncio.get_running_loop().time() - started
            async with asyncio.timeout(10):
                answer = await read_frame(reader)
            assert took > 2 * grace, f"sent in {took:.1f} s: not slower than the grace"
            assert struct.unpack_from(">i", answer)[0] == 1  # its correlation id
            writer.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def _established(sock: socket.socket) -> bool:
    """Whether the listener has not closed the connection, without reading from it."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == TCP_ESTABLISHED


def test_a_connection_builds_one_fetch_answer_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty pipelined Fetches of ~1 MB answers from a client that reads nothing: their
    requests are small, so the budget let them all in, and all forty answers were built at
    once (40 MB for this one connection; ten such took a gateway from 140 to 310 MB). Now
    a connection's next Fetch runs once its previous answer is written out: only the
    answers the socket took before the client was stopped are ever read from storage."""
    reads = 0
    read = kafka_memory_store.MemoryPartitionLog.read

    async def counted_read(self, *args, **kwargs):  # the port's signature, whatever it is
        nonlocal reads
        reads += 1
        return await read(self, *args, **kwargs)

    monkeypatch.setattr(kafka_memory_store.MemoryPartitionLog, "read", counted_read)

    async def scenario() -> None:
        settings = KafkaSection(port=0, frame_timeout_seconds=FRAME_TIMEOUT)
        server = KafkaServer(settings, memory_storage())
        await server.start()
        try:
            await store_a_big_record(server.address)
            nonlocal reads
            reads = 0
            _, writer = await connect(server.address, receive_buffer=4 * KIB)
            for correlation in range(40):
                writer.write(fetch(correlation, "big"))
            await async_wait_until(
                lambda: server.limits.open == 0, 10 + 4 * FRAME_TIMEOUT, message="stopped"
            )
            await all_given_back(server, "a client reading none of its Fetches")
            abort(writer)
        finally:
            await server.stop()

    asyncio.run(scenario())
    assert reads < 20, f"{reads} Fetch answers built for a client that read none"


def test_a_huge_request_is_not_kept_once_answered() -> None:
    """A Metadata naming 20,000 topics, answered, from a client that then stays connected
    and idle, and then leaves: its decoded request (a list of 20,000 names) is freed once
    answered, not kept by the connection's reading loop until its next frame (a 99,999-topic
    one held 25 MB per idle connection, outside every budget), nor, after the connection
    ends, by a cycle through the exception that ended it, which waited for a full garbage
    collection (rare: gc.freeze keeps the heap of start-up out of them), with the
    connection and its buffers. The collector is off throughout, so only reference counts
    free anything."""
    names = 20_000

    def alive() -> bool:
        return any(isinstance(o, list) and len(o) == names for o in gc.get_objects())

    async def scenario() -> None:
        settings = KafkaSection(port=0, frame_timeout_seconds=FRAME_TIMEOUT)
        server = KafkaServer(settings, memory_storage())
        await server.start()
        try:
            reader, writer = await connect(server.address)
            body = {"topics": [{"name": f"n{i}"} for i in range(names)]}
            writer.write(request(3, 9, 1, body | {"allow_auto_topic_creation": False}))
            del body
            async with asyncio.timeout(30):
                await read_frame(reader)
            # freed within a few turns of the loop (the executor's future hands the
            # decoded request over on the next one), not when the next frame comes
            await async_wait_until(
                lambda: not alive(), 5, 0.2, "the answered request freed while idle"
            )
            writer.close()
            await async_wait_until(lambda: server.limits.open == 0, 5, message="closed")
            await async_wait_until(lambda: not alive(), 5, 0.2, "the request freed at the end")
            await async_wait_until(
                lambda: not any(isinstance(o, KafkaConnection) for o in gc.get_objects()),
                5,
                0.2,
                "the ended connection freed",
            )
        finally:
            await server.stop()

    gc.collect()
    gc.disable()
    try:
        asyncio.run(scenario())
    finally:
        gc.enable()


def test_an_answer_dropped_with_its_connection_leaves_no_unread_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that reads none of its answers is stopped after frame_timeout_seconds, and
    the answers still queued are dropped. One of them, a Produce still waiting on storage,
    failed after that: its error was never read, and asyncio logged it at ERROR (a hostile
    test's gateway log showed it). Its error is read when it ends, and nothing is logged."""
    gate = asyncio.Event()
    reported: list[dict] = []

    async def failing_append(self, *args, **kwargs):  # the port's signature, whatever it is
        await gate.wait()
        raise RuntimeError("storage failed after the client was gone")

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        settings = KafkaSection(port=0, frame_timeout_seconds=FRAME_TIMEOUT)
        server = KafkaServer(settings, memory_storage())
        await server.start()
        try:
            await store_a_big_record(server.address)
            monkeypatch.setattr(kafka_memory_store.MemoryPartitionLog, "append", failing_append)
            # answers of ~1 MB the client never reads, then a Produce that will fail
            reader, writer = await connect(server.address, receive_buffer=4 * KIB)
            for correlation in range(8):
                writer.write(fetch(correlation, "big"))
            writer.write(produce(99, "doomed", b"x"))
            await async_wait_until(
                lambda: server.limits.open == 0, 10 + 4 * FRAME_TIMEOUT, message="stopped"
            )
            gate.set()
            for _ in range(10):  # the failed Produce's task ends, and is collected
                await asyncio.sleep(0)
            gc.collect()
            abort(writer)
        finally:
            await server.stop()

    asyncio.run(scenario())
    lost = [ctx for ctx in reported if "never retrieved" in ctx.get("message", "")]
    assert not lost, lost
