"""Subscribes through gateway/backend/shielded_subscribe.py can be cancelled at any point.

pulsar-client's asyncio subscribe completes in two loop callbacks: the first checks that
the future is pending, the second sets the result. The test puts a cancel exactly between
them: it holds the event loop until the C++ client has queued the first callback, then
queues the cancel behind it. The library's own subscribe then sets a result on a cancelled
future (asyncio logs InvalidStateError); the shielded one logs nothing and closes the
consumer that arrived after its caller left, so its exclusive subscription is free again."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pulsar
import pulsar.asyncio as pulsar_asyncio

from pulsar_gateway.gateway.backend.shielded_subscribe import subscribe

TOPIC = "persistent://public/default/shielded-subscribe"


def _hold_until_queued(loop: asyncio.AbstractEventLoop) -> None:
    """Block the loop until another thread queued a callback on it (the C++ client's
    completion), so that what this turn queues runs right behind that callback."""
    deadline = time.monotonic() + 10
    while not loop._ready:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the subscribe never completed"
        time.sleep(0.001)


async def _free(client: pulsar_asyncio.Client, name: str) -> bool:
    try:
        consumer = await subscribe(client, TOPIC, name, consumer_type=pulsar.ConsumerType.Exclusive)
    except pulsar_asyncio.PulsarException:
        return False  # the orphan still holds the exclusive subscription
    await consumer.close()
    return True


def test_a_cancel_between_the_callbacks_logs_nothing_and_leaves_no_consumer(
    broker_url: str,
) -> None:
    errors: list[dict[str, Any]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: errors.append(context))
        client = pulsar_asyncio.Client(broker_url)
        try:
            for round_ in range(3):
                name = f"cancelled-{round_}"
                attempt = asyncio.ensure_future(
                    subscribe(client, TOPIC, name, consumer_type=pulsar.ConsumerType.Exclusive)
                )
                await asyncio.sleep(0)  # the subscribe is on its way
                _hold_until_queued(loop)
                loop.call_soon(attempt.cancel)
                try:
                    await attempt
                except asyncio.CancelledError:
                    pass
                deadline = loop.time() + 20
                while not await _free(client, name):
                    assert loop.time() < deadline, f"an orphan consumer stayed on {name}"
        finally:
            await client.close()

    asyncio.run(scenario())
    assert not errors, errors[:3]
