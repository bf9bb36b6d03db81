"""A client that resets its connection while the gateway waits to write its answers frees
everything, on the event loop the gateway runs (uvloop).

On uvloop, a reset socket's transport is closing for a moment with its descriptor already
gone (-1) while `get_extra_info("socket")` still returns the socket object: setting
SO_LINGER on it then raises ValueError, not OSError. The writer stopping a connection that
reads nothing (`_stop_writing(unread=True)`) met exactly that moment when the client reset
first: the writer task died of the ValueError and the reader, waiting for room in its
budget rather than on the socket, was never stopped, so the connection kept its queued
bytes and its slot for good. The listener's own tests run on asyncio's loop, where the
same call raises OSError; this one runs the listener on uvloop, as `pulsar-gateway run`
does.
"""

from __future__ import annotations

import uvloop

from harness.kafka_memory_store import memory_storage
from harness.waiting import async_wait_until
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.server import KafkaServer
from tests.unit.test_kafka_budgets_come_back import (
    KIB,
    PER_CONNECTION,
    VALUE,
    abort,
    all_given_back,
    connect,
    fetch,
    produce,
    read_frame,
)


def test_a_client_reset_while_its_answers_wait_gives_everything_back() -> None:
    async def scenario() -> None:
        settings = KafkaSection(
            port=0,
            # long: the client resets first, the gateway must not need to time it out
            frame_timeout_seconds=30.0,
            max_queued_request_bytes_per_connection=PER_CONNECTION,
            max_queued_request_bytes=2 * PER_CONNECTION,
        )
        server = KafkaServer(settings, memory_storage())
        await server.start()
        try:
            reader, writer = await connect(server.address)
            writer.write(produce(1, "big", b"v" * VALUE))  # each Fetch answers ~1 MB
            await read_frame(reader)
            writer.close()
            for attempt in range(3):
                reader, writer = await connect(server.address, receive_buffer=4 * KIB)
                for correlation in range(40):  # more than its budget: its reader waits
                    writer.write(fetch(correlation, "big"))
                await async_wait_until(
                    lambda: server.queued.used >= PER_CONNECTION - 20 * KIB,
                    5,
                    message="the connection's budget full, its answers unread",
                )
                abort(writer)
                await all_given_back(server, f"reset by the client (attempt {attempt})")
        finally:
            await server.stop()

    uvloop.run(scenario())
