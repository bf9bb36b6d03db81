"""The delayed-message exchange (`x-delayed-message`), as RabbitMQ's plugin behaves.

An exchange of type `x-delayed-message` routes as its `x-delayed-type` argument says
(direct, fanout, topic or headers); a message published to it with an `x-delay` header of
N > 0 milliseconds is routed N ms later, as if published then (a TTL of its own starts
counting at that point), and one without the header, or with N <= 0, at once. As with the
plugin, a delayed message is confirmed once it is held, and never returned (whether a
queue will be bound when it is due cannot be known when it is published).

Pulsar's own delayed delivery is not available on the embedded broker
(docs/backend.md), so the gateway holds the delay itself, durably: a delayed message is
stored in a topic of the vhost's own (`DELAYED_QUEUE`, one per vhost, never a queue of the
topology) with its due time, and read back by the vhost's owner, which keeps every pending
message in a heap by due time and, when one is due, routes it and writes it to its queues;
only then is it acknowledged in that topic. A gateway that stops or dies leaves its pending
messages unacknowledged, and the next owner of the vhost reads them back and routes them
when due (a message due meanwhile goes at once): at least once, as the plugin promises
nothing more either.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Hashable, Mapping
from typing import Any, Protocol

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, BrokerStore, QueueReader
from pulsar_gateway.handlers.amqp.field_values import text_or_none
from pulsar_gateway.handlers.amqp.property_octets import read_shortstr, split_properties
from pulsar_gateway.handlers.amqp.topology import ExchangeType, Topology

log = logging.getLogger("gateway.amqp.delayed")

# The vhost's topic of delayed messages; "amq." names are reserved, so no client's queue
# can take it.
DELAYED_QUEUE = "amq.gateway.delayed-messages"
FETCH_BATCH = 500


def delay_of(topology: Topology, exchange: str, headers: Mapping[str, Any] | None) -> int | None:
    """The delay in ms of a publish to `exchange`; None when it is routed at once."""
    target = topology.exchanges.get(exchange)
    if target is None or target.type is not ExchangeType.DELAYED or not headers:
        return None
    delay = headers.get("x-delay")
    if isinstance(delay, bool) or not isinstance(delay, int | float) or delay <= 0:
        return None
    return int(delay)


def uses_delays(topology: Topology) -> bool:
    return any(e.type is ExchangeType.DELAYED for e in topology.exchanges.values())


class DueRouter(Protocol):
    """Where a due message goes (vhost_state.VhostState.route_due)."""

    def route_due(self, message: AmqpMessage) -> Awaitable[None]: ...


class DelayedMessages:
    """A vhost's pending delayed messages (see the module docstring)."""

    def __init__(self, store: BrokerStore, vhost: str, router: DueRouter) -> None:
        self.store = store
        self.vhost = vhost
        self.router = router
        self._heap: list[tuple[int, int, Hashable, AmqpMessage]] = []
        self._seq = itertools.count()
        self._reader: QueueReader | None = None
        self._task: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None

    @property
    def pending(self) -> int:
        return len(self._heap)

    def start(self) -> Awaitable[None]:
        """Open the vhost's delayed topic (its subscription made before anything is held)
        and start routing what is due; done once the topic is open."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._open())
        return asyncio.shield(self._started)

    async def _open(self) -> None:
        self._reader = await self.store.open_queue(self.vhost, DELAYED_QUEUE)
        self._task = asyncio.ensure_future(self._run(self._reader))

    def hold(self, message: AmqpMessage, delay_ms: int) -> Awaitable[None]:
        """Store `message` until `delay_ms` from now; done once stored (its confirm)."""
        held = AmqpMessage(
            message.exchange,
            message.routing_key,
            message.properties_raw,
            message.body,
            message.persistent,
            delay_ms,  # the due time is timestamp_ms + this, kept with the message
            message.timestamp_ms or int(time.time() * 1000),
            message.priority,
        )

        async def stored() -> None:
            await self.start()
            await self.store.publish(self.vhost, frozenset({DELAYED_QUEUE}), held)

        return asyncio.ensure_future(stored())

    async def _run(self, reader: QueueReader) -> None:
        while True:
            timeout = None
            if self._heap:
                timeout = max(0.0, (self._heap[0][0] - _now_ms()) / 1000)
            try:
                batch = await reader.fetch(FETCH_BATCH, timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("vhost %s: reading delayed messages failed: %s", self.vhost, exc)
                await asyncio.sleep(0.5)
                continue
            for delivery in batch:
                message = delivery.message
                due = message.timestamp_ms + (message.expiration_ms or 0)
                entry = (due, next(self._seq), delivery.message_id, message)
                heapq.heappush(self._heap, entry)
            await self._route_due(reader)

    async def _route_due(self, reader: QueueReader) -> None:
        now = _now_ms()
        while self._heap and self._heap[0][0] <= now:
            _, _, message_id, held = heapq.heappop(self._heap)
            try:
                await self.router.route_due(_as_published(held))
            except Exception as exc:  # not acked: routed again after a restart
                log.warning("vhost %s: routing a delayed message failed: %s", self.vhost, exc)
                continue
            reader.ack([message_id])

    async def close(self) -> None:
        """Stop; what is pending stays in Pulsar for the vhost's next owner."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await self._reader.close()
        self._heap.clear()


def _as_published(held: AmqpMessage) -> AmqpMessage:
    """The message as if published now: its own expiration (a TTL) counts from here."""
    return AmqpMessage(
        held.exchange,
        held.routing_key,
        held.properties_raw,
        held.body,
        held.persistent,
        _expiration_of(held.properties_raw),
        int(time.time() * 1000),
        held.priority,
    )


def _expiration_of(raw: bytes) -> int | None:
    try:
        fields = split_properties(raw)[1]
    except (ValueError, IndexError):
        return None
    text = text_or_none(read_shortstr(fields["expiration"])) if "expiration" in fields else None
    return int(text) if text and text.isdigit() else None


def _now_ms() -> int:
    return int(time.time() * 1000)
