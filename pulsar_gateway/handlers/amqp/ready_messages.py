"""A queue engine's ready messages, in the order they are delivered.

Without x-max-priority that is queue order. With it (up to 255, RabbitMQ's cap), a higher
priority goes first and equal priorities keep queue order; a message without the priority
property counts as 0 and one above the queue's maximum as the maximum, as RabbitMQ treats
them. A requeued message goes back to its original place among its own priority
(`put_back`), as in RabbitMQ's classic queues.

Only messages the engine has fetched are ordered: Pulsar hands the engine a queue's
messages in publish order, FETCH_BATCH at a time, so a higher-priority message overtakes
those fetched with it and after it, not a backlog still in Pulsar beyond what the engine
holds (docs/compatibility.md).
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
from collections import deque
from collections.abc import Iterable, Iterator

from pulsar_gateway.handlers.amqp.broker_model import QueueReader, StoredDelivery


class ReadyMessages:
    """Ready messages by priority level, each level in queue order."""

    def __init__(self, max_priority: int | None = None) -> None:
        self.max_priority = max_priority
        self._levels: dict[int, deque[StoredDelivery]] = {}
        self._order: list[int] = []  # the levels in use, lowest first
        self._len = 0

    def _level(self, delivery: StoredDelivery) -> int:
        if not self.max_priority:
            return 0
        return min(max(delivery.message.priority, 0), self.max_priority)

    def _queue_of(self, level: int) -> deque[StoredDelivery]:
        queue = self._levels.get(level)
        if queue is None:
            queue = self._levels[level] = deque()
            bisect.insort(self._order, level)
        return queue

    def _top(self) -> deque[StoredDelivery]:
        """The non-empty level delivered next (the caller checked that one exists)."""
        while True:
            level = self._order[-1]
            queue = self._levels[level]
            if queue:
                return queue
            del self._levels[level]
            self._order.pop()

    def append(self, delivery: StoredDelivery) -> None:
        """A message fetched from the store. Fetches mostly come in queue order, but a
        Shared subscription hands a message back late when the consumer it went to closes
        (a subscribe the gateway gave up on and closed once it completed,
        docs/backend.md, "Shared dispatch can reorder"): a late one goes to its place among
        those still ready, as RabbitMQ would have delivered it, and `put_back`'s merge
        relies on each level staying in queue order."""
        queue = self._queue_of(self._level(delivery))
        if queue and _order(delivery) < _order(queue[-1]):
            bisect.insort(queue, delivery, key=_order)
        else:
            queue.append(delivery)
        self._len += 1

    def head(self) -> StoredDelivery:
        return self._top()[0]

    def popleft(self) -> StoredDelivery:
        delivery = self._top().popleft()
        self._len -= 1
        return delivery

    def head_expiry(self, queue_ttl: int | None) -> int | None:
        """When the head expires (ms since the epoch), by the queue's TTL or its own."""
        return expiry_of(self.head(), queue_ttl) if self._len else None

    def pop_expired(self, queue_ttl: int | None, now_ms: int) -> list[StoredDelivery]:
        """The heads that are due: TTL expires messages at the head only (RabbitMQ's
        classic queues), so one without a TTL holds back those behind it."""
        expired = []
        while self._len:
            expiry = expiry_of(self.head(), queue_ttl)
            if expiry is None or expiry > now_ms:
                break
            expired.append(self.popleft())
        return expired

    def pop_over(self, count: int, size: int) -> list[StoredDelivery]:
        """Heads dropped until at most `count` fewer messages and `size` fewer body bytes
        are ready (x-max-length and x-max-length-bytes with drop-head)."""
        dropped: list[StoredDelivery] = []
        dropped_bytes = 0
        while self._len and (len(dropped) < count or dropped_bytes < size):
            head = self.popleft()
            dropped.append(head)
            dropped_bytes += len(head.message.body)
        return dropped

    def put_back(self, deliveries: Iterable[StoredDelivery]) -> None:
        """Requeued messages, each back in its original place."""
        by_level: dict[int, list[StoredDelivery]] = {}
        for delivery in deliveries:
            by_level.setdefault(self._level(delivery), []).append(delivery)
            self._len += 1
        for level, returned in by_level.items():
            queue = self._queue_of(level)
            returned.sort(key=_order)
            self._levels[level] = deque(heapq.merge(returned, queue, key=_order))

    def clear(self) -> None:
        self._levels.clear()
        self._order.clear()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[StoredDelivery]:
        for level in reversed(self._order):
            yield from self._levels[level]


async def fetch_more(
    reader: QueueReader, missing: int, room: int, seconds: float
) -> list[StoredDelivery]:
    """Up to `missing` more messages (at most `room`) that the queue's count says are
    stored, fetched for at most `seconds`: a priority queue gathers its backlog before it
    delivers, so a higher priority stored after the first message fetched still goes
    first, as RabbitMQ orders its backlog."""
    more: list[StoredDelivery] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while len(more) < min(missing, room):
        left = deadline - loop.time()
        if left <= 0:
            break
        got = await reader.fetch(min(missing, room) - len(more), left)
        if not got:
            break
        more += got
    return more


def expiry_of(delivery: StoredDelivery, queue_ttl: int | None) -> int | None:
    """When a message expires: the shorter of the queue's TTL and its own, from its
    acceptance; None when neither is set."""
    ttls = [t for t in (queue_ttl, delivery.message.expiration_ms) if t is not None]
    if not ttls:
        return None
    return delivery.message.timestamp_ms + min(ttls)


def _order(delivery: StoredDelivery) -> tuple[int, ...]:
    """Queue order: the store's message ids ((ledger, entry, batch index) for Pulsar)."""
    key = delivery.message_id
    return key if isinstance(key, tuple) else (0,)


def body_bytes(deliveries: Iterable[StoredDelivery]) -> int:
    """The body bytes of `deliveries` (what x-max-length-bytes counts)."""
    return sum(len(d.message.body) for d in deliveries)
