"""Stream queues (`x-queue-type: stream`) over AMQP 0-9-1, as RabbitMQ 3.9+ serves them.

A stream is an append-only log: publishing appends, consuming reads from an offset and
removes nothing, and every consumer reads at its own pace from where it asked to start
(`x-stream-offset` on basic.consume: `first`, `last`, `next` (the default), a numeric
offset, a timestamp, or an interval such as `30m` back from now). Each delivery carries its
offset in the `x-stream-offset` header (a `long`). A consumer must set a prefetch
(basic.qos) and acknowledge manually: acknowledgements only give credit back. basic.get,
no-ack consumers and basic.nack/basic.reject are refused with RabbitMQ's 540s.

The log is a Pulsar topic (storage/amqp/store.py: partition 0 of the Kafka topic of the
same name), so Kafka consumers and Pulsar readers see the same messages, at the same
offsets as Kafka's. Each engine follows its log from the beginning to keep a compact index
(position, acceptance time and size of every message: about 40 bytes each) that turns an
offset, a time or the retention into a position; each consumer then reads the log with a
cursor of its own from that position. Retention (`x-max-age`, `x-max-length-bytes`) moves
the first offset a consumer may start at; the embedded Pulsar deletes nothing, so the
messages stay in the topic for Pulsar and Kafka readers (docs/compatibility.md).
"""

from __future__ import annotations

import array
import asyncio
import bisect
import contextlib
import dataclasses
import datetime
import logging
import time
from collections.abc import Hashable
from typing import Any

from pulsar_gateway.handlers.amqp.broker_model import BrokerStore, StoredDelivery, StreamCursor
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode, resource
from pulsar_gateway.handlers.amqp.queue_arguments import max_age_ms
from pulsar_gateway.handlers.amqp.queue_roles import QueueConsumer
from pulsar_gateway.handlers.amqp.topology import Queue

log = logging.getLogger("gateway.amqp.stream")

READ_BATCH = 500
CATCH_UP_SECONDS = 10.0  # a consumer waits this long at most for the index to reach the end
IDLE_READ_SECONDS = 0.2  # a read this long without a message: the index has caught up


def not_supported(what: str, queue: str, vhost: str) -> AmqpError:
    """RabbitMQ's 540 for what streams do not do (a connection error)."""
    where = resource("queue", queue, vhost)
    return AmqpError(ReplyCode.NOT_IMPLEMENTED, f"{what} not supported by stream queues {where}")


class StreamIndex:
    """Position, acceptance time and size of every message of a stream, by offset."""

    def __init__(self) -> None:
        self.positions: list[Hashable] = []
        self.times = array.array("q")
        self.total_bytes = array.array("q", [0])  # bytes before each offset

    def __len__(self) -> int:
        return len(self.positions)

    def append(self, delivery: StoredDelivery) -> None:
        self.positions.append(delivery.message_id)
        self.times.append(delivery.message.timestamp_ms)
        self.total_bytes.append(self.total_bytes[-1] + len(delivery.message.body))

    def first_kept(self, max_age: int | None, max_bytes: int | None, now_ms: int) -> int:
        """The first offset retention keeps."""
        first = 0
        if max_age is not None:
            first = bisect.bisect_left(self.times, now_ms - max_age)
        if max_bytes is not None:
            first = max(
                first, bisect.bisect_left(self.total_bytes, self.total_bytes[-1] - max_bytes)
            )
        return min(first, len(self))

    def at_time(self, when_ms: int) -> int:
        return bisect.bisect_left(self.times, when_ms)


class StreamEngine:
    """A stream queue in this process: its index and its consumers' cursors."""

    def __init__(self, vhost: str, queue: Queue, store: BrokerStore) -> None:
        self.vhost = vhost
        self.queue = queue
        self.name = queue.name
        self.store = store
        self.index = StreamIndex()
        self.consumers: list[QueueConsumer] = []
        self.closed = False
        self._caught_up = asyncio.Event()
        self._follower: asyncio.Task[None] | None = None
        self._feeders: dict[int, tuple[asyncio.Task[None], asyncio.Event]] = {}
        arguments = queue.arguments
        self.max_age = max_age_ms(arguments["x-max-age"]) if "x-max-age" in arguments else None
        self.max_bytes = queue.max_length_bytes

    # --- what the broker layer asks of any queue ---------------------------------------

    message_count = 0  # RabbitMQ's queue.declare-ok says 0 for streams
    ever_consumed = False

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def settle(self, deliveries: Any, was_outstanding: bool, ack: bool = True) -> None:
        """An ack removes nothing from a stream: it only gives credit back (kick)."""

    def requeue(self, deliveries: Any) -> None:
        """A closed channel's unacked deliveries stay in the log: nothing to put back."""

    def reject(self, deliveries: Any, reason: str = "rejected") -> None: ...

    def kick(self) -> None:
        for _, wake in self._feeders.values():
            wake.set()

    # --- the index ---------------------------------------------------------------------

    def _follow(self) -> None:
        if self._follower is None and not self.closed:
            self._follower = asyncio.ensure_future(self._read_log())

    async def _read_log(self) -> None:
        cursor = await self.store.open_stream(self.vhost, self.name, None)
        try:
            while not self.closed:
                timeout = None if self._caught_up.is_set() else IDLE_READ_SECONDS
                try:
                    batch = await cursor.read(READ_BATCH, timeout)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("stream %s: reading its log failed: %s", self.name, exc)
                    await asyncio.sleep(0.5)
                    continue
                for delivery in batch:
                    self.index.append(delivery)
                if not batch:
                    self._caught_up.set()
        finally:
            with contextlib.suppress(Exception):
                await cursor.close()

    async def _index_ready(self) -> None:
        self._follow()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._caught_up.wait(), CATCH_UP_SECONDS)

    # --- consumers ---------------------------------------------------------------------

    async def add_consumer(self, consumer: QueueConsumer, offset: Any) -> None:
        """Start feeding `consumer` from the offset its x-stream-offset names."""
        await self._index_ready()
        start = self._start_offset(offset)
        count = len(self.index)
        if start < count:
            position, skip = self.index.positions[start], 0
        elif count:
            position, skip = self.index.positions[count - 1], start - count + 1
        else:
            position, skip = None, start
        cursor = await self.store.open_stream(self.vhost, self.name, position)
        self.consumers.append(consumer)
        self.ever_consumed = True
        wake = asyncio.Event()
        task = asyncio.ensure_future(self._feed(consumer, cursor, start - skip, skip, wake))
        self._feeders[id(consumer)] = (task, wake)

    def _start_offset(self, offset: Any) -> int:
        now = int(time.time() * 1000)
        first = self.index.first_kept(self.max_age, self.max_bytes, now)
        count = len(self.index)
        if offset is None or offset == "next":
            return count
        if offset == "first":
            return first
        if offset == "last":
            return max(first, count - 1) if count else 0
        if isinstance(offset, bool):
            raise _bad_offset(offset)
        if isinstance(offset, int):
            return max(first, offset)
        if isinstance(offset, datetime.datetime):
            moment = offset if offset.tzinfo else offset.replace(tzinfo=datetime.UTC)
            return max(first, self.index.at_time(int(moment.timestamp() * 1000)))
        if isinstance(offset, str | bytes):
            back = max_age_ms(offset)
            if back is not None:
                return max(first, self.index.at_time(now - back))
        raise _bad_offset(offset)

    async def _feed(
        self,
        consumer: QueueConsumer,
        cursor: StreamCursor,
        offset: int,
        skip: int,
        wake: asyncio.Event,
    ) -> None:
        """Deliver the log to one consumer from its cursor, as its credit allows."""
        try:
            while not self.closed and getattr(consumer, "active", True):
                if not consumer.has_credit():
                    wake.clear()
                    await wake.wait()
                    continue
                credit = max(1, consumer.prefetch - consumer.unacked)
                batch = await cursor.read(credit + skip, None)
                for delivery in batch:
                    current, offset = offset, offset + 1
                    if skip:  # before the offset asked for: read past
                        skip -= 1
                        continue
                    outgoing = dataclasses.replace(delivery, stream_offset=current)
                    consumer.deliver(self, outgoing, False)  # type: ignore[arg-type]
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            log.warning("stream %s: feeding consumer %s failed: %s", self.name, consumer.tag, exc)
        finally:
            with contextlib.suppress(Exception):
                await cursor.close()

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        with contextlib.suppress(ValueError):
            self.consumers.remove(consumer)
        feeder = self._feeders.pop(id(consumer), None)
        if feeder is not None:
            feeder[0].cancel()

    def cancel_consumers(self) -> None:
        for consumer in list(self.consumers):
            consumer.cancelled_by_server()
            self.remove_consumer(consumer)

    async def close(self) -> None:
        self.closed = True
        for task, _ in list(self._feeders.values()):
            task.cancel()
        self._feeders.clear()
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(BaseException):
                await self._follower


def _bad_offset(value: Any) -> AmqpError:
    return AmqpError(ReplyCode.PRECONDITION_FAILED, f"invalid x-stream-offset {value!r}")
