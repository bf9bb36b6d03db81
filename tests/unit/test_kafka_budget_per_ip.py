"""One address's Kafka connections share a queued-bytes budget of their own
(`kafka.max_queued_request_bytes_per_ip`), so they cannot take the whole listener's (issue
33, "no client can starve the rest").

Ten connections that never read their answers once held the listener's whole budget until
they were stopped for not reading, `frame_timeout_seconds` later, and no other client was
read meanwhile; so did a few frames whose size prefix and header came and whose body
never did. Here connections from 127.0.0.2 claim frames they never send; a client on
127.0.0.1 sending a frame as big is still answered at once, and when the claimants go
their address's budget goes too.
"""

from __future__ import annotations

import asyncio
import struct

from harness.kafka_memory_store import memory_storage
from harness.waiting import async_wait_until
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.server import KafkaServer
from tests.unit.test_kafka_budgets_come_back import abort, read_frame, request

KIB = 1024
CLAIM = 30 * KIB
CLAIMANTS = 3


def test_one_addresss_claims_leave_room_for_others() -> None:
    async def scenario() -> None:
        settings = KafkaSection(
            port=0,
            frame_timeout_seconds=30,
            max_queued_request_bytes_per_connection=256 * KIB,
            max_queued_request_bytes_per_ip=40 * KIB,
            max_queued_request_bytes=3 * CLAIM,  # what the claims would fill
        )
        server = KafkaServer(settings, memory_storage())
        await server.start()
        host, port = server.address
        try:
            claimants = []
            for _ in range(CLAIMANTS):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=("127.0.0.2", 0)
                )
                # a size prefix and the header's start, then nothing: the frame's budget is
                # taken and held until the frame timeout
                writer.write(struct.pack(">ihhi", CLAIM, 18, 0, 1))
                claimants.append(writer)
            await async_wait_until(
                lambda: server.queued.used >= CLAIM, 5, message="the first claim taken"
            )
            # the other claims wait for their address's room, not the listener's
            assert server.queued.used == CLAIM, server.queued.used
            reader, writer = await asyncio.open_connection(host, port)
            started = asyncio.get_running_loop().time()
            writer.write(request(18, 0, 1, {}, "c" * CLAIM))  # as big as a claim
            async with asyncio.timeout(5):
                await read_frame(reader)
            took = asyncio.get_running_loop().time() - started
            assert took < 1.0, f"a client of another address waited {took:.2f} s"
            writer.close()
            for claimant in claimants:
                abort(claimant)
            await async_wait_until(
                lambda: server.queued.used == 0 and len(server.queued_per_ip) == 0,
                5,
                message=lambda: f"{server.queued.used} B, {len(server.queued_per_ip)} addresses",
            )
        finally:
            await server.stop()

    asyncio.run(scenario())
