"""The soak's healthy AMQP load: aio-pika publishers with publisher confirms, one per queue,
and consumers acknowledging every message, all on one asyncio loop in its own thread.

One publisher per queue, one message unconfirmed at a time: then the queue's order is the
publish order, and the gap between confirms is exactly what the publisher waited. A
connection that drops with a message unconfirmed leaves that message in doubt (it may or
may not be stored): it is not republished, since a republish would be a duplicate the
client made, not the gateway. A drop of any of these connections is a failure of the soak.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any

import aio_pika
from aio_pika.abc import AbstractIncomingMessage
from aiormq.exceptions import DeliveryError

from bench.soak_common import ClientRecord, QueueLedger, Timeline, kafka_value, parse_value

PREFETCH = 100
LAG_PROBE_SECONDS = 0.1


async def declare_queues(url: str, queues: list[str]) -> None:
    connection = await aio_pika.connect(url, timeout=30)
    async with connection:
        channel = await connection.channel()
        for queue in queues:
            await channel.declare_queue(queue, durable=True)


async def warm_up(url: str, queue: str, messages: int = 500) -> None:
    """Publish with confirms and consume once before the RSS baseline (see soak_kafka)."""
    connection = await aio_pika.connect(url, timeout=30)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        declared = await channel.declare_queue(queue, durable=True)
        for i in range(messages):
            body = aio_pika.Message(kafka_value("warmup", queue, i), delivery_mode=2)
            await channel.default_exchange.publish(body, routing_key=queue)
        got = 0
        async with declared.iterator() as stream:
            async for message in stream:
                await message.ack()
                got += 1
                if got == messages:
                    break


class AmqpLoad:
    """Healthy publishers and consumers for `queues`, `rate` messages a second per queue."""

    def __init__(self, url: str, queues: list[str], rate: float, timeline: Timeline) -> None:
        self.url = url
        self.queues = queues
        self.rate = rate
        self.timeline = timeline
        self.ledgers = {q: QueueLedger(q, f"amqp-pub-{q}") for q in queues}
        self.publishers = {q: ClientRecord(f"amqp-pub-{q}", "amqp", "publisher") for q in queues}
        self.consumers = {q: ClientRecord(f"amqp-con-{q}", "amqp", "consumer") for q in queues}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="amqp", daemon=True)
        self.publish_tasks: list[asyncio.Task[None]] = []
        self.consume_tasks: list[asyncio.Task[None]] = []
        self.stop_publishing = asyncio.Event()
        self.stop_consuming = asyncio.Event()
        # per second of the soak, the longest this client's own loop was late (ms): all
        # its publishers and consumers share the loop, so a loop starved of CPU slows every
        # queue at once, which looks like the gateway stalling unless it is measured
        self.loop_lag_ms: dict[int, float] = {}
        self._lag_probe: asyncio.Task[None] | None = None

    @property
    def records(self) -> list[ClientRecord]:
        return [*self.publishers.values(), *self.consumers.values()]

    def _call(self, coroutine: Coroutine[Any, Any, Any], timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def start(self) -> AmqpLoad:
        self.thread.start()
        self._call(self._start(), 30)
        return self

    async def _start(self) -> None:
        self._lag_probe = asyncio.create_task(self._probe_lag())
        for queue in self.queues:
            self.consume_tasks.append(asyncio.create_task(self._consume(queue)))
            self.publish_tasks.append(asyncio.create_task(self._publish(queue)))

    def stop_publishers(self, timeout: float = 120) -> None:
        """Let each publisher have its last message confirmed; one still waiting after
        `timeout` is cancelled and its message stays in doubt."""
        self._call(self._stop(self.stop_publishing, self.publish_tasks, timeout), timeout + 30)

    def stop_consumers(self, timeout: float = 60) -> None:
        self._call(self._stop(self.stop_consuming, self.consume_tasks, timeout), timeout + 30)

    async def _probe_lag(self) -> None:
        """How late a short sleep wakes up, kept as the worst per second."""
        while True:
            before = time.monotonic()
            await asyncio.sleep(LAG_PROBE_SECONDS)
            late_ms = (time.monotonic() - before - LAG_PROBE_SECONDS) * 1000
            second = int(self.timeline.now())
            self.loop_lag_ms[second] = max(self.loop_lag_ms.get(second, 0.0), late_ms)

    def close(self) -> None:
        if self._lag_probe is not None and self.thread.is_alive():
            probe = self._lag_probe
            self._call(self._stop(asyncio.Event(), [probe], 0), 10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _stop(self, flag: asyncio.Event, tasks: list[asyncio.Task[None]], timeout: float):
        flag.set()
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=10)

    async def _connect(self, record: ClientRecord) -> aio_pika.abc.AbstractConnection | None:
        """A new connection, or None after a failed attempt (an error of `record`'s, and a
        second's pause before the caller tries again)."""
        try:
            return await aio_pika.connect(self.url, timeout=30)
        except Exception as error:  # noqa: BLE001 - counted, retried
            record.error(self.timeline.now(), f"connect: {type(error).__name__}: {error}")
            await asyncio.sleep(1)
            return None

    async def _publish(self, queue: str) -> None:
        ledger, record = self.ledgers[queue], self.publishers[queue]
        seq = 0
        next_at = time.monotonic()
        while not self.stop_publishing.is_set():
            connection = await self._connect(record)
            if connection is None:
                continue
            in_flight: int | None = None
            try:
                channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
                while not self.stop_publishing.is_set():
                    next_at += 1 / self.rate
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                    message = aio_pika.Message(
                        kafka_value(record.name, queue, seq), delivery_mode=2
                    )
                    ledger.published += 1
                    record.produced += 1
                    in_flight = seq
                    try:
                        await channel.default_exchange.publish(message, routing_key=queue)
                    except DeliveryError as error:  # a nack, or returned as unroutable
                        ledger.nacked[seq] = self.timeline.now()
                        record.error(self.timeline.now(), f"{type(error).__name__}: {error}")
                    else:
                        now = self.timeline.now()
                        ledger.confirmed[seq] = now
                        record.ack_times.append(now)
                        self.timeline.count("amqp confirmed")
                    in_flight = None
                    seq += 1
            except asyncio.CancelledError:
                if in_flight is not None:
                    ledger.in_doubt[in_flight] = self.timeline.now()
                raise
            except Exception as error:  # noqa: BLE001 - a dropped connection: counted
                now = self.timeline.now()
                if in_flight is not None:
                    ledger.in_doubt[in_flight] = now
                    seq += 1
                record.drop(now, f"{type(error).__name__}: {error}")
                next_at = time.monotonic()
            finally:
                await _close_quietly(connection)

    async def _consume(self, queue: str) -> None:
        ledger, record = self.ledgers[queue], self.consumers[queue]

        async def on_message(message: AbstractIncomingMessage) -> None:
            parsed = parse_value(message.body)
            await message.ack()
            now = self.timeline.now()
            if parsed is None or parsed[1] != queue:
                ledger.foreign += 1
                return
            ledger.received.append((parsed[2], bool(message.redelivered), now, "consumer"))
            self.timeline.count("amqp consumed")

        while not self.stop_consuming.is_set():
            connection = await self._connect(record)
            if connection is None:
                continue
            try:
                channel = await connection.channel()
                await channel.set_qos(prefetch_count=PREFETCH)
                declared = await channel.declare_queue(queue, durable=True)
                tag = await declared.consume(on_message)
                stop = asyncio.ensure_future(self.stop_consuming.wait())
                lost = [
                    asyncio.ensure_future(connection.closed()),
                    asyncio.ensure_future(channel.closed()),
                ]
                await asyncio.wait([stop, *lost], return_when=asyncio.FIRST_COMPLETED)
                for waiter in (stop, *lost):
                    waiter.cancel()
                if not self.stop_consuming.is_set():
                    raise ConnectionError("the gateway closed the consumer's connection or channel")
                await declared.cancel(tag)
                await asyncio.sleep(0.5)  # acks of deliveries already in hand
            except Exception as error:  # noqa: BLE001 - a dropped connection: counted
                record.drop(self.timeline.now(), f"{type(error).__name__}: {error}")
                await asyncio.sleep(1)
            finally:
                await _close_quietly(connection)


async def _close_quietly(connection: aio_pika.abc.AbstractConnection) -> None:
    try:
        await asyncio.wait_for(connection.close(), 10)
    except Exception:  # noqa: BLE001 - closing after a failure may fail again
        pass


async def drain(
    url: str, ledgers: dict[str, QueueLedger], timeline: Timeline, deadline: float = 180
) -> dict[str, str]:
    """Consume what is left in each queue onto its ledger, until every confirmed message
    has been received and nothing more came for 3 s (so a late duplicate still counts);
    a queue where nothing comes for 15 s, or `deadline` seconds for all queues, ends it.
    Returns a problem per queue that ended with confirmed messages not received."""
    problems: dict[str, str] = {}
    ends = time.monotonic() + deadline
    connection = await aio_pika.connect(url, timeout=30)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1000)
        for name, ledger in ledgers.items():
            queue = await channel.declare_queue(name, durable=True)
            last = [time.monotonic()]

            async def on_message(
                message: AbstractIncomingMessage, ledger=ledger, last=last
            ) -> None:
                parsed = parse_value(message.body)
                await message.ack()
                last[0] = time.monotonic()
                if parsed is None or parsed[1] != ledger.queue:
                    ledger.foreign += 1
                    return
                ledger.received.append(
                    (parsed[2], bool(message.redelivered), timeline.now(), "drain")
                )

            tag = await queue.consume(on_message)
            while True:
                quiet = time.monotonic() - last[0]
                got = {seq for seq, *_ in ledger.received}
                complete = all(seq in got for seq in ledger.confirmed)
                if complete and quiet > 3:
                    break
                if quiet > 15 or time.monotonic() > ends:
                    problems[name] = f"nothing more after {quiet:.0f} s, confirmed ones missing"
                    break
                await asyncio.sleep(0.2)
            await queue.cancel(tag)
    return problems
