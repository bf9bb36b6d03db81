"""A Kafka connection reads one frame per turn of the event loop (issue 33, "no client can
starve the rest").

A connection whose socket holds many frames used to read them all (up to its 64 pipelined
requests) in one go, and start a task for each; ten connections pipelining cheap requests
(ApiVersions) without reading the answers made each turn of the loop some 300 ms of work on
a loaded machine, and every other client waited several such turns for an answer. Here ten
connections of an in-memory listener each have 5,000 ApiVersions requests waiting in
their sockets while a bystander's round trips, one after the other, record the slowest.
"""

from __future__ import annotations

import asyncio

from harness.kafka_memory_store import memory_storage
from harness.machine_load import load_per_core
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.server import KafkaServer
from tests.unit.test_kafka_budgets_come_back import abort, read_frame, request

FLOODERS = 10
PIPELINED = 5_000
ROUND_TRIPS = 20
# one round trip is a few turns of the loop: each turn a frame and an answer per flooder
# now, 64 of them per flooder before; measured on the loaded 2-core test machine: 130 ms at
# worst now, 2.0 s before (4.4 s with 20,000 requests per flooder)
# half of what it was before, stretched by the load per core (harness/machine_load.py): it
# failed once at 1.0 s in a whole unit-suite run at load average 6-9 on 2 cores
SLOWEST = 1.0


def test_pipelined_floods_leave_others_answered() -> None:
    async def scenario() -> float:
        server = KafkaServer(KafkaSection(port=0), memory_storage())
        await server.start()
        host, port = server.address
        flooders = []
        try:
            flood = request(18, 0, 1, {}) * PIPELINED
            for _ in range(FLOODERS):
                _, writer = await asyncio.open_connection(host, port, local_addr=("127.0.0.2", 0))
                writer.write(flood)  # and never read the answers
                flooders.append(writer)
            reader, writer = await asyncio.open_connection(host, port)
            slowest = 0.0
            loop = asyncio.get_running_loop()
            for number in range(ROUND_TRIPS):
                started = loop.time()
                writer.write(request(18, 0, number, {}))
                async with asyncio.timeout(30):
                    await read_frame(reader)
                slowest = max(slowest, loop.time() - started)
            writer.close()
            return slowest
        finally:
            for flooder in flooders:
                abort(flooder)
            await server.stop()

    slowest = asyncio.run(scenario())
    bound = SLOWEST * load_per_core()
    assert slowest < bound, f"a bystander waited {slowest * 1000:.0f} ms ({bound:.1f} s allowed)"
