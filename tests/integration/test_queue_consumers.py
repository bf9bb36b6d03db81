"""gateway/backend/queue_consumers.py against real pulsar-lite: grouped receives,
ack, negative ack with a raised redelivery count, fresh and deleted subscriptions, through
pulsar-client and through the gateway's wire client (`pulsar.client = "native"`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.native_queue_consumer import NativeQueueConsumer
from pulsar_gateway.gateway.backend.native_writer import NATIVE, PULSAR_CLIENT, ClientChoice
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.backend.queue_consumers import QueueConsumers
from pulsar_gateway.gateway.messages import OutMessage

TOPIC = "persistent://public/amqp-test/q"


@pytest.mark.parametrize("client", [PULSAR_CLIENT, NATIVE])
def test_shared_subscription_ack_nack_and_fresh_start(tmp_path: Path, client: ClientChoice) -> None:
    async def scenario() -> None:
        broker = EmbeddedBroker(tmp_path / "b")
        await broker.start()
        backend = PulsarBackend(broker.service_url, operation_timeout_seconds=5, client=client)
        await backend.start()
        try:
            consumers = QueueConsumers(backend, wire=True)
            await backend.send_queue_messages(TOPIC, [OutMessage(b"before")])
            await consumers.create_fresh(TOPIC, "amqp")  # starts at the end: "before" unseen
            await backend.send_queue_messages(
                TOPIC, [OutMessage(f"m{i}".encode()) for i in range(50)]
            )
            consumer = await consumers.open(TOPIC, "amqp")
            assert isinstance(consumer, NativeQueueConsumer) == (client == NATIVE)
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


def test_a_subscribe_refused_for_a_taken_consumer_id_is_retried_with_the_next(
    tmp_path: Path,
) -> None:
    """pulsar-lite never answers a subscribe whose consumer id a consumer of another
    connection holds on the subscription (docs/backend.md, "Consumer ids collide across
    connections"), and clients number consumers from 0: a second gateway's first queue
    consumer on a queue the first gateway consumes (a vhost handed over before the old
    owner let go) waited out the operation timeout and failed. Now an unanswered attempt
    is left behind (closed if it ever completes) and the next, with the next id, joins."""

    async def scenario() -> None:
        broker = EmbeddedBroker(tmp_path / "b")
        await broker.start()
        first = PulsarBackend(broker.service_url, operation_timeout_seconds=5)
        second = PulsarBackend(broker.service_url, operation_timeout_seconds=5)
        await first.start()
        await second.start()
        try:
            # both clients number their consumers alike: two each for a fresh subscription,
            # so the second's queue consumer asks for the id the first's holds
            await QueueConsumers(first).create_fresh(TOPIC, "amqp")
            await QueueConsumers(second).create_fresh(TOPIC, "other")
            held = await QueueConsumers(first).open(TOPIC, "amqp")
            joined = await QueueConsumers(second).open(TOPIC, "amqp")
            await held.close()
            await first.send(TOPIC, [OutMessage(f"m{i}".encode()) for i in range(5)], False)
            got: list[bytes | None] = []
            while len(got) < 5:
                batch = await joined.fetch(10, timeout=5)
                assert batch, "the joined consumer got nothing within 5 s"
                got.extend(m.payload for m in batch)
            assert sorted(got) == [f"m{i}".encode() for i in range(5)]  # type: ignore[type-var]
            await joined.close()
        finally:
            await second.close()
            await first.close()
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_batched_entry_acknowledged_in_part_gives_back_only_the_rest(tmp_path: Path) -> None:
    """Through the wire client a queue's publishes are batched entries; a consumer
    acknowledges one only once all of it is (pulsar-lite loses the rest of a batch
    acknowledged in part). The half acknowledged before a consumer closes must not come
    back to the next one: only the other half does."""

    async def scenario() -> None:
        broker = EmbeddedBroker(tmp_path / "b")
        await broker.start()
        backend = PulsarBackend(broker.service_url, operation_timeout_seconds=5, client=NATIVE)
        await backend.start()
        try:
            consumers = QueueConsumers(backend, wire=True)
            await consumers.create_fresh(TOPIC, "amqp")
            await backend.send_queue_messages(TOPIC, [OutMessage(b"opens the ledger")])
            await backend.send_queue_messages(
                TOPIC, [OutMessage(f"m{i}".encode()) for i in range(10)]
            )
            consumer = await consumers.open(TOPIC, "amqp")
            assert isinstance(consumer, NativeQueueConsumer)
            got = []
            while len(got) < 11:
                batch = await consumer.fetch(100, timeout=5)
                assert batch, "no message within 5 s"
                got.extend(batch)
            assert [m.payload for m in got] == [b"opens the ledger"] + [
                f"m{i}".encode() for i in range(10)
            ]
            assert len({m.id[:2] for m in got}) == 2  # two entries: one lone, one batch
            consumer.acknowledge([m.id for m in got[:1] + got[1::2]])
            await consumer.close()  # the other half goes back, in its entry
            consumer = await consumers.open(TOPIC, "amqp")
            back: list[bytes] = []
            while len(back) < 5:
                batch = await consumer.fetch(100, timeout=5)
                assert batch, "the unacknowledged half did not come back within 5 s"
                back += [m.payload for m in batch]
            assert back == [f"m{i}".encode() for i in range(1, 10, 2)]
            assert await consumer.fetch(100, timeout=0.5) == []
            consumer.acknowledge([])  # nothing held: nothing to do
            await consumer.close()
        finally:
            await backend.close()
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), 60))
