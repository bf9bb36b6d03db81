"""Kafka group commits mirrored onto durable Pulsar subscriptions named after the group.

After a group commits offset N on a partition, the Exclusive durable subscription
`<prefix><group>` on `<topic>-partition-<i>` is moved (acknowledge_cumulative, which
moves the cursor without receiving anything) so that a Pulsar consumer attached to it
starts at N; Pulsar's backlog is then the group's lag and retention keeps what the
group has not read.

Only subscriptions the gateway owns are touched: their names carry
`kafka.group_subscription_prefix` (default `__kafka.group.`). A subscription named
after the group alone may belong to a native Pulsar application; moving it (or
unsubscribing it, for a commit that goes backwards) once cost an offline Exclusive
subscriber every unread message. Pulsar has no subscription owner or property this
client can set and the embedded broker could show, so the name is the mark.

Bound: asynchronous and batched. Commits only record the latest offset per
(partition, group); every `interval` seconds (default 1 s) the latest one of each is
applied. A commit therefore reaches Pulsar within about `interval` plus one
subscribe and ack round trip (well under 2 s on a healthy broker), and each
subscription is moved at most once per interval whatever the commit rate.

A separate Pulsar client: on pulsar-lite a second Exclusive subscriber gets its whole
TCP connection closed (docs/backend.md, "A second Exclusive subscriber closes the
connection"), which must never take the gateway's producers and
readers with it. The mirror's consumer is closed after `idle_close` seconds without
commits, so a Pulsar application can take the subscription over. When it has
(ConsumerBusy on Apache Pulsar; a Timeout on pulsar-lite), mirroring of that
subscription is skipped, logged once, and retried after `busy_retry` seconds.
A commit that moves backwards re-creates the subscription (unsubscribe, subscribe at
the earliest message, acknowledge), because a cumulative ack cannot move back and
pulsar-lite's seek does not reposition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _pulsar
import pulsar
import pulsar.asyncio as pulsar_asyncio

from pulsar_gateway.gateway.backend import shielded_subscribe
from pulsar_gateway.gateway.backend.client_logging import client_logger
from pulsar_gateway.gateway.backend.connection_security import NO_SECURITY, PulsarSecurity
from pulsar_gateway.gateway.messages import MessageKey
from pulsar_gateway.gateway.waiting import cancel_and_wait

log = logging.getLogger("gateway.mirror")

Locate = Callable[[str, int], Awaitable[MessageKey | None]]
Key = tuple[str, str]  # (pulsar partition topic, subscription)


@dataclass
class _Held:
    consumer: Any
    last_used: float


class SubscriptionMirror:
    def __init__(
        self,
        service_url: str,
        locate: Locate,
        subscription_prefix: str,
        interval: float = 1.0,
        idle_close: float = 2.0,
        busy_retry: float = 30.0,
        operation_timeout_seconds: int = 5,
        concurrency: int = 8,
        client_log: Path | None = None,
        security: PulsarSecurity = NO_SECURITY,
    ) -> None:
        self.service_url = service_url
        self.client_log = client_log
        self.security = security  # the same TLS and authentication as the backend's
        self.locate = locate
        if not subscription_prefix:
            raise ValueError("the subscription prefix marks the gateway's own subscriptions")
        self.subscription_prefix = subscription_prefix
        self.interval = interval
        self.idle_close = idle_close
        self.busy_retry = busy_retry
        self.operation_timeout_seconds = operation_timeout_seconds
        self._client: pulsar_asyncio.Client | None = None
        self._pending: dict[Key, int] = {}
        self._mirrored: dict[Key, int] = {}
        self._held: dict[Key, _Held] = {}
        self._busy_until: dict[Key, float] = {}
        self._busy_logged: set[Key] = set()
        self._limit = asyncio.Semaphore(concurrency)
        self._round = asyncio.Lock()  # one flush at a time; forget waits for it
        self._task: asyncio.Task[None] | None = None
        self.applied = 0

    async def start(self) -> None:
        self._client = pulsar_asyncio.Client(
            self.service_url,
            operation_timeout_seconds=self.operation_timeout_seconds,
            logger=client_logger(self.client_log),
            io_threads=1,
            **self.security.client_options(),
        )
        self._task = asyncio.create_task(self._run(), name="subscription mirror")

    def subscription(self, group_id: str) -> str:
        """The name of the gateway's subscription for a group: never the bare group id."""
        return self.subscription_prefix + group_id

    def request(self, topic: str, group_id: str, offset: int) -> None:
        """Latest wins: only the newest offset per subscription is applied."""
        self._pending[(topic, self.subscription(group_id))] = offset

    def mirrored(self, topic: str, group_id: str) -> int | None:
        return self._mirrored.get((topic, self.subscription(group_id)))

    async def forget(self, topics: list[str]) -> None:
        """Stop mirroring onto these partition topics (their topic is being deleted): drop
        what is pending and let go of held consumers, so that no later commit subscribes,
        and thereby re-creates, a deleted topic."""
        gone = set(topics)
        async with self._round:  # a round in progress may be subscribing to them
            tables: list[dict[Key, Any]] = [self._pending, self._mirrored, self._busy_until]
            for table in tables:
                for key in [key for key in table if key[0] in gone]:
                    del table[key]
            self._busy_logged = {key for key in self._busy_logged if key[0] not in gone}
            for key in [key for key in self._held if key[0] in gone]:
                await self._drop(key)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.flush()
                await self._close_idle(self.idle_close)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the mirror must live
                log.exception("subscription mirror round failed")

    async def flush(self) -> None:
        async with self._round:
            batch, self._pending = self._pending, {}
            if batch:
                await asyncio.gather(*(self._apply(key, offset) for key, offset in batch.items()))

    async def _apply(self, key: Key, offset: int) -> None:
        topic, subscription = key
        if self._busy_until.get(key, 0.0) > time.monotonic():
            return
        async with self._limit:
            try:
                position = await self.locate(topic, offset)
                previous = self._mirrored.get(key)
                if previous is not None and offset < previous:
                    await self._recreate(key)
                consumer = await self._consumer(key)
                if position is not None:
                    await consumer.acknowledge_cumulative(pulsar.MessageId(-1, *position))
                self._mirrored[key] = offset
                self.applied += 1
                self._busy_logged.discard(key)
            except pulsar_asyncio.PulsarException as exc:
                await self._drop(key)
                if exc.error() in (_pulsar.Result.ConsumerBusy, _pulsar.Result.Timeout):
                    self._busy_until[key] = time.monotonic() + self.busy_retry
                    if key not in self._busy_logged:
                        self._busy_logged.add(key)
                        log.warning(
                            "subscription %s on %s is held by a Pulsar consumer (%s): "
                            "not mirroring group offsets onto it for now",
                            subscription,
                            topic,
                            exc.error(),
                        )
                else:
                    log.warning("mirroring %s on %s failed: %s", subscription, topic, exc)
            except LookupError as exc:
                log.debug("not mirroring %s on %s: %s", subscription, topic, exc)
            except Exception as exc:  # noqa: BLE001 - retried by the next commit
                await self._drop(key)
                log.warning("mirroring %s on %s failed: %s", subscription, topic, exc)

    async def _consumer(self, key: Key) -> Any:
        held = self._held.get(key)
        if held is not None:
            held.last_used = time.monotonic()
            return held.consumer
        assert self._client is not None
        consumer = await shielded_subscribe.subscribe(
            self._client,
            key[0],
            key[1],
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=0,
            consumer_name=f"kafka-group-mirror-{key[1]}",
        )
        self._held[key] = _Held(consumer, time.monotonic())
        return consumer

    async def _recreate(self, key: Key) -> None:
        consumer = await self._consumer(key)
        del self._held[key]
        await consumer.unsubscribe()
        with contextlib.suppress(Exception):
            await consumer.close()

    async def _drop(self, key: Key) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(held.consumer.close(), self.operation_timeout_seconds)

    async def _close_idle(self, idle: float) -> None:
        now = time.monotonic()
        for key, held in list(self._held.items()):
            if now - held.last_used >= idle and key not in self._pending:
                await self._drop(key)

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), 10)
        await self._close_idle(-1)
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None
