"""gateway/backend/queue_consumers.py against real pulsar-lite: grouped receives,
ack, negative ack with a raised redelivery count, fresh and deleted subscriptions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.backend.queue_consumers import QueueConsumers
from pulsar_gateway.gateway.messages import OutMessage

TOPIC = "persistent://public/amqp-test/q"


def test_shared_subscription_ack_nack_and_fresh_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = EmbeddedBroker(tmp_path / "b")
        await broker.start()
        backend = PulsarBackend(broker.service_url, operation_timeout_seconds=5)
        await backend.start()
        try:
            consumers = QueueConsumers(backend)
            await backend.send(TOPIC, [OutMessage(b"before")], batching=False)
            await consumers.create_fresh(TOPIC, "amqp")  # starts at the end: "before" unseen
            await backend.send(
                TOPIC, [OutMessage(f"m{i}".encode()) for i in range(50)], batching=False
            )
            consumer = await consumers.open(TOPIC, "amqp")
            got = []
            while len(got) < 50:
                batch = await consumer.fetch(100, timeout=5)
                assert batch, "no message within 5 s"
                got.extend(batch)
            assert [m.payload for m in got] == [f"m{i}".encode() for i in range(50)]
            assert all(m.redelivery_count == 0 for m in got)
            assert await consumer.fetch(10, timeout=0.2) == []
            consumer.acknowledge([m.id for m in got[1:]])
            consumer.negative_acknowledge([got[0].id])
            again = await consumer.fetch(10, timeout=5)
            assert [(m.payload, m.redelivery_count) for m in again] == [(b"m0", 1)]
            assert consumer.held == 1
            await consumer.close()  # unacked: back to the subscription
            consumer = await consumers.open(TOPIC, "amqp")
            back = await consumer.fetch(10, timeout=5)
            assert [m.payload for m in back] == [b"m0"] and back[0].redelivery_count >= 1
            await consumer.close()
            await consumers.delete(TOPIC, "amqp")
            await consumers.create_fresh(TOPIC, "amqp")  # a new queue of the same name
            consumer = await consumers.open(TOPIC, "amqp")
            assert await consumer.fetch(10, timeout=0.5) == []
            await consumer.close()
        finally:
            await backend.close()
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), 60))
