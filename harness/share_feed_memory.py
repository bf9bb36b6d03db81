"""The port's `ShareFeeds` in memory: a Shared subscription per share group and partition,
as the broker keeps one, for the unit tests of share groups dispatched by the broker
(docs/share-groups.md, "The broker dispatches").

Entries go out in log order to whichever consumer asks (the gateway's feed, or an outside
consumer the test names); one given back goes out first again with its redelivery count
up, an acknowledged one never again, and a consumer that closes gives back all it holds.
"""

from __future__ import annotations

import asyncio

from pulsar_gateway.gateway.messages import LogEntry, records_in
from pulsar_gateway.handlers.kafka.port import HandedEntry, PartitionLog

GATEWAY = "gateway"


class MemorySubscription:
    def __init__(self, log: PartitionLog, earliest: bool) -> None:
        self.log = log
        entries: list[LogEntry] = getattr(log, "entries", [])
        self.next_index = 0 if earliest else len(entries)
        self.returned: list[int] = []  # given back: out first again
        self.redeliveries: dict[int, int] = {}
        self.acked: set[int] = set()
        self.out: dict[int, str] = {}  # entry index -> the consumer holding it

    def _entries(self) -> list[LogEntry]:
        return getattr(self.log, "entries", [])

    def has_more(self) -> bool:
        return bool(self.returned) or self.next_index < len(self._entries())

    def take(self, consumer: str) -> tuple[int, LogEntry, int] | None:
        if self.returned:
            index = self.returned.pop(0)
        elif self.next_index < len(self._entries()):
            index, self.next_index = self.next_index, self.next_index + 1
        else:
            return None
        self.out[index] = consumer
        return index, self._entries()[index], self.redeliveries.get(index, 0)

    def ack(self, index: int) -> None:
        self.acked.add(index)
        self.out.pop(index, None)

    def give_back(self, index: int) -> None:
        if self.out.pop(index, None) is not None and index not in self.acked:
            self.redeliveries[index] = self.redeliveries.get(index, 0) + 1
            self.returned.append(index)

    def close_consumer(self, consumer: str) -> None:
        for index in sorted(i for i, holder in self.out.items() if holder == consumer):
            self.give_back(index)


class MemoryShareFeed:
    def __init__(self, subscription: MemorySubscription) -> None:
        self.subscription = subscription
        self.closed = False

    def follow(self, log: PartitionLog) -> None:
        self.subscription.log = log

    def handed(self, limit: int) -> list[HandedEntry]:
        out: list[HandedEntry] = []
        while len(out) < limit and not self.closed:
            taken = self.subscription.take(GATEWAY)
            if taken is None:
                break
            index, entry, redeliveries = taken
            out.append(HandedEntry(entry.offset, records_in(entry.message), redeliveries, index))
        return out

    def handed_future(self) -> asyncio.Future[None]:
        if self.subscription.has_more():
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future
        return self.subscription.log.data_future()

    def settle(self, entry: HandedEntry) -> None:
        self.subscription.ack(entry.handle)

    def give_back(self, entry: HandedEntry) -> None:
        self.subscription.give_back(entry.handle)

    def close(self) -> None:
        self.closed = True
        self.subscription.close_consumer(GATEWAY)


class MemoryShareFeeds:
    def __init__(self) -> None:
        self.subscriptions: dict[tuple[str, str], MemorySubscription] = {}
        self.opened = 0

    async def open(self, group_id: str, log: PartitionLog, earliest: bool) -> MemoryShareFeed:
        key = (group_id, log.topic)
        if key not in self.subscriptions:
            self.subscriptions[key] = MemorySubscription(log, earliest)
        self.opened += 1
        return MemoryShareFeed(self.subscriptions[key])

    async def close(self) -> None:
        for subscription in self.subscriptions.values():
            subscription.close_consumer(GATEWAY)
