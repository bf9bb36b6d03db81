"""The vhost's sweep: x-expires and idle Pulsar consumers, driven with a clock."""

from __future__ import annotations

import asyncio
import time

from harness.amqp_memory_store import MemoryStore
from pulsar_gateway.handlers.amqp.topology import Queue, Topology
from pulsar_gateway.handlers.amqp.vhost_state import VhostState


def test_the_sweep_expires_an_unused_queue_that_never_had_an_engine() -> None:
    """x-expires holds for a queue nobody ever consumed from (no queue engine): the sweep
    walks the topology's queues, not the engines."""

    async def scenario() -> None:
        store = MemoryStore()
        kept = Queue("kept", durable=True)
        expiring = Queue("expiring", durable=True, arguments={"x-expires": 1000})
        topology = Topology("/")
        for queue in (kept, expiring):
            await store.save_queue("/", queue)
            topology.add_queue(queue)
        vhost = VhostState(store, "/", topology, reader_idle_seconds=30)
        assert not vhost.engines
        now = time.monotonic()
        await vhost.sweep(now)
        assert "expiring" in topology.queues
        await vhost.sweep(now + 2)
        assert "expiring" not in topology.queues and "kept" in topology.queues
        await vhost.close()

    asyncio.run(scenario())
