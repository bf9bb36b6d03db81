"""Durable Shared subscriptions on queue topics: receive, acknowledge, requeue.

An AMQP queue is one Pulsar topic with one durable Shared subscription. Shared, because it
is the only type on which pulsar-lite honours negative acks, and the only one a Pulsar
client may join beside the gateway: never KeyShared, no requeue through Exclusive/Failover
(docs/backend.md, "KeyShared stalls", "Redelivery only on Shared"). Received messages reach
the event loop in groups, as in `reader_stream.py`: one `receive_async` wakes the loop, the
rest of the client's receive queue is drained without blocking.

Acks and negative acks are plain local calls: the client groups them and sends
them in the background, so they cost no loop wake-up. `batch_index_ack_enabled`
stays off (pulsar-lite loses the rest of a batch with it).

With `pulsar.client = "native"` the consumers are the gateway's own wire consumers
(native_queue_consumer.py), with the same contract (`AnyQueueConsumer`); the nudge stays a
pulsar-client consumer of no receive queue (the wire consumer always asks for messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

import _pulsar
import pulsar

from pulsar_gateway.gateway.backend import shielded_subscribe
from pulsar_gateway.gateway.backend.loop_bridge import message_future, to_loop
from pulsar_gateway.gateway.backend.native_queue_consumer import NativeQueueConsumer
from pulsar_gateway.gateway.backend.partial_acks import PartialBatches
from pulsar_gateway.gateway.backend.pulsar_backend import BackendError, PulsarBackend
from pulsar_gateway.gateway.backend.queue_message import ReceivedMessage
from pulsar_gateway.gateway.backend.wire import Consumer as WireConsumer
from pulsar_gateway.gateway.backend.wire import InitialPosition, SubscriptionType
from pulsar_gateway.gateway.messages import MessageKey
from pulsar_gateway.gateway.waiting import result_within

log = logging.getLogger("gateway.queues")

# Redelivery after a negative ack: short, because AMQP's requeue is immediate.
NACK_REDELIVERY_MS = 100
# How long a wire queue consumer groups its acknowledgements (pulsar-client's default).
ACK_GROUP_SECONDS = 0.1
# How long each subscribe may go unanswered before the next is tried (None: the client's
# operation timeout). pulsar-lite never answers one whose consumer id a consumer of another
# connection holds (docs/backend.md, "Consumer ids collide across connections"); the next
# attempt takes the client's next id.
SUBSCRIBE_ATTEMPT_SECONDS = (5.0, 10.0, None)


class QueueConsumer:
    """One Shared consumer on a queue's durable subscription.

    The raw `_pulsar.MessageId` of every message handed out is kept until it is
    acknowledged or negatively acknowledged, so the caller only deals in keys.
    """

    def __init__(self, raw: Any, topic: str, subscription: str) -> None:
        self._raw = raw
        self.topic = topic
        self.subscription = subscription
        self._loop = asyncio.get_running_loop()
        self._pending: asyncio.Future[Any] | None = None
        self._ids: dict[MessageKey, Any] = {}
        self.closed = False

    @property
    def held(self) -> int:
        """Messages received and neither acked nor negatively acked yet."""
        return len(self._ids)

    def _take(self, msg: Any) -> ReceivedMessage | None:
        mid = msg.message_id()
        key = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
        if key in self._ids:
            return None  # a replay of a message this consumer still holds
        self._ids[key] = mid
        return ReceivedMessage(
            key,
            msg.data(),
            msg.properties(),
            msg.publish_timestamp(),
            msg.redelivery_count(),
            msg.producer_name(),
        )

    def _drain(self, out: list[ReceivedMessage], limit: int) -> None:
        while len(out) < limit:
            try:
                msg = self._raw.receive(0)
            except _pulsar.Timeout:
                return
            taken = self._take(msg)
            if taken is not None:
                out.append(taken)

    def _arm(self) -> asyncio.Future[Any]:
        future, done = message_future(
            self._loop, lambda result: BackendError(f"receive failed: {result}")
        )
        self._raw.receive_async(done)
        return future

    async def fetch(self, limit: int = 500, timeout: float | None = None) -> list[ReceivedMessage]:
        """Up to `limit` messages, waiting up to `timeout` seconds (None: forever) for one.

        A receive left pending by a timeout stays armed: its message is
        returned by the next call, never lost.
        """
        out: list[ReceivedMessage] = []
        if self.closed:
            return out
        if self._pending is None:
            self._drain(out, limit)
            if out:
                return out
            self._pending = self._arm()
        try:
            msg = await result_within(self._pending, timeout)
        except TimeoutError:
            return out
        except BackendError:
            self._pending = None
            raise
        self._pending = None
        taken = self._take(msg)
        if taken is not None:
            out.append(taken)
        self._drain(out, limit)
        return out

    def acknowledge(self, ids: Iterable[MessageKey]) -> None:
        """Done with these messages: the subscription never delivers them again."""
        for key in ids:
            mid = self._ids.pop(key, None)
            if mid is not None and not self.closed:
                self._raw.acknowledge(mid)

    def negative_acknowledge(self, ids: Iterable[MessageKey]) -> None:
        """Give these back: Pulsar redelivers them (to any consumer) after a short delay,
        with their redelivery count raised."""
        for key in ids:
            mid = self._ids.pop(key, None)
            if mid is not None and not self.closed:
                self._raw.negative_acknowledge(mid)

    def _mark_closed(self) -> bool:
        """Stop local work once; False when it was already closed."""
        if self.closed:
            return False
        self.closed = True
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()
        self._ids.clear()
        return True

    async def close(self) -> None:
        """Close; what was received and not acknowledged is redelivered by Pulsar."""
        if self._mark_closed():
            await _call_async(self._loop, self._raw.close_async)

    async def unsubscribe(self) -> None:
        """Delete the subscription itself (its cursor and backlog go with it)."""
        if not self._mark_closed():
            return
        await _call_async(self._loop, self._raw.unsubscribe_async)
        with contextlib.suppress(Exception):
            await _call_async(self._loop, self._raw.close_async)


# what `QueueConsumers.open` gives: the same contract through pulsar-client or the wire client
AnyQueueConsumer = QueueConsumer | NativeQueueConsumer


async def _call_async(loop: asyncio.AbstractEventLoop, method: Any, timeout: float = 10) -> None:
    future: asyncio.Future[Any] = loop.create_future()

    def done(result: Any) -> None:
        to_loop(loop, lambda: None if future.done() else future.set_result(result))

    method(done)
    result = await asyncio.wait_for(future, timeout)
    if result != _pulsar.Result.Ok:
        raise BackendError(f"{getattr(method, '__name__', 'call')} failed: {result}")


def _close_if_subscribed(attempt: asyncio.Future[Any]) -> None:
    """The end of a subscribe nobody waits for any more: a consumer it made is closed."""
    if attempt.cancelled() or attempt.exception() is not None:
        return
    consumer = attempt.result()
    if isinstance(consumer, WireConsumer):
        asyncio.ensure_future(consumer.close())
        return
    with contextlib.suppress(Exception):
        consumer._consumer.close_async(lambda _result: None)


class QueueConsumers:
    """Opens Shared consumers on queue subscriptions through the gateway's client."""

    def __init__(
        self, backend: PulsarBackend, receiver_queue_size: int = 1000, wire: bool = False
    ) -> None:
        """`wire`: consumers through the gateway's own client when it has one, for queues
        written as batched entries (`amqp.batched_queue_entries`)."""
        self.backend = backend
        self.wire = wire
        self.receiver_queue_size = receiver_queue_size
        # the wire consumers' entries acknowledged in part, kept across a queue's consumers
        self.partial = PartialBatches()

    @property
    def native(self) -> bool:
        """Consumers are the gateway's own wire consumers (`NativeQueueConsumer`), which
        split batched entries and keep their acknowledged messages in `partial`."""
        return self.wire and self.backend.wire_client is not None

    async def open(
        self, topic: str, subscription: str, receiver_queue_size: int | None = None
    ) -> AnyQueueConsumer:
        """A consumer on `subscription`; a new subscription starts at the topic's end.
        Through the wire client when the backend has one (`pulsar.client = "native"`).

        A subscribe that goes unanswered for SUBSCRIBE_ATTEMPT_SECONDS is left behind and
        the next one tried: its consumer id may be one another connection holds on this
        subscription (a cluster member that has not let go of the vhost yet, a native
        client), which pulsar-lite never answers. One left behind that completes after all
        is closed at once, so no consumer the gateway does not read holds messages."""
        size = receiver_queue_size or self.receiver_queue_size
        wire = self.backend.wire_client if self.wire else None
        for limit in SUBSCRIBE_ATTEMPT_SECONDS:
            if wire is not None:
                attempt: asyncio.Future[Any] = asyncio.ensure_future(
                    wire.subscribe(
                        topic,
                        subscription,
                        subscription_type=SubscriptionType.SHARED,
                        initial_position=InitialPosition.LATEST,
                        receiver_queue_size=size,
                        idle_nudge=True,
                        # pulsar-client's grouping time: an ACK every 10 ms per queue held
                        # confirms back (docs/backend.md, "AMQP queue messages in batched
                        # entries")
                        ack_delay=ACK_GROUP_SECONDS,
                    )
                )
            else:
                attempt = asyncio.ensure_future(
                    self.backend.client.subscribe(
                        topic,
                        subscription,
                        consumer_type=pulsar.ConsumerType.Shared,
                        receiver_queue_size=size,
                        negative_ack_redelivery_delay_ms=NACK_REDELIVERY_MS,
                        initial_position=pulsar.InitialPosition.Latest,
                        batch_index_ack_enabled=False,
                    )
                )
            try:
                await asyncio.wait({attempt}, timeout=limit)
            finally:
                if not attempt.done():
                    attempt.add_done_callback(_close_if_subscribed)
            if not attempt.done():
                log.warning(
                    "subscribing %s on %s: no answer in %.0f s; trying again with the next "
                    "consumer id",
                    subscription,
                    topic,
                    limit,
                )
                continue
            try:
                consumer = attempt.result()
            except Exception as exc:
                raise BackendError(f"cannot subscribe {subscription} on {topic}: {exc}") from exc
            if wire is not None:
                return NativeQueueConsumer(consumer, topic, subscription, self.partial)
            return QueueConsumer(consumer._consumer, topic, subscription)
        raise AssertionError("the last attempt has no time limit")  # not reached

    async def create_fresh(self, topic: str, subscription: str) -> None:
        """Make the subscription exist, empty, at the topic's end.

        A leftover subscription of an earlier queue of the same name (deleted,
        or transient and lost in a restart) is dropped first, so a new queue
        never inherits old messages.
        """
        self.partial.forget(topic, subscription)
        consumer = await self.open(topic, subscription, receiver_queue_size=1)
        await consumer.unsubscribe()
        consumer = await self.open(topic, subscription, receiver_queue_size=1)
        await consumer.close()

    async def nudge(self, topic: str, subscription: str) -> None:
        """Attach and detach a consumer that takes nothing (zero receive queue).

        pulsar-lite's Shared dispatcher can park a message in its replay queue when a
        send to a consumer fails and then wait for the next event (a publish, flow
        permits, a consumer coming or going) before dispatching again; a consumer that
        has what it had will never send more permits. A consumer coming and going is
        such an event, and moves no messages. Harmless on Apache Pulsar.
        """
        try:
            raw = await shielded_subscribe.subscribe(
                self.backend.client,
                topic,
                subscription,
                consumer_type=pulsar.ConsumerType.Shared,
                receiver_queue_size=0,
                initial_position=pulsar.InitialPosition.Latest,
            )
        except Exception as exc:
            log.warning("nudging %s on %s failed: %s", subscription, topic, exc)
            return
        with contextlib.suppress(Exception):
            await raw.close()

    async def delete(self, topic: str, subscription: str) -> None:
        """Drop the subscription (queue.delete): its messages are gone for AMQP."""
        self.partial.forget(topic, subscription)
        consumer = await self.open(topic, subscription, receiver_queue_size=1)
        await consumer.unsubscribe()
