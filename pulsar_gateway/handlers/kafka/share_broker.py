"""A share partition dispatched by the broker (docs/share-groups.md, "The broker
dispatches"): the Pulsar entries the gateway's Shared consumer of the group's subscription
holds, and keeping them in step with the share partition's records.

The broker splits a partition's entries between the consumers of the subscription: the
gateway's (one per share group and partition, `ShareFeed`) and any Pulsar consumer beside
it. Only records of entries the broker handed the gateway may be acquired by share
consumers. The broker deals in whole entries (a Kafka batch is one), so an entry is
acknowledged once every record of it is settled, and given back (it then goes to any
consumer, its redelivery count up) only when none of its records is settled or held and
one was delivered: a record released while others of its entry are settled stays with the
share consumers, as when the gateway dispatches.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.kafka.port import HandedEntry, ShareFeed
from pulsar_gateway.handlers.kafka.share_partition import (
    ACQUIRED,
    AVAILABLE,
    SharePartition,
)


@dataclass
class Held:
    entry: HandedEntry
    counted: int  # its records' delivery counts when handed: more since, it was delivered


class BrokerHold:
    """The entries one share partition holds from its feed, by first offset."""

    def __init__(self, feed: ShareFeed) -> None:
        self.feed = feed
        self.entries: dict[int, Held] = {}

    def records_held(self) -> int:
        return sum(held.entry.count for held in self.entries.values())

    def take(self, partition: SharePartition, wanted: int, max_records: int) -> bool:
        """Take what the broker handed while fewer than `wanted` records are available
        (a fetch's worth: what the gateway does not take the broker may hand to others)
        and fewer than `max_records` are held; whether anything was handed (the state to
        store, the entries to reconcile)."""
        changed = False
        available = len(partition.available_in(self.ranges()))
        held = self.records_held()
        while available < wanted and held < max_records:
            handed = self.feed.handed(1)
            if not handed:
                break
            for entry in handed:
                partition.take_handed(entry.first, entry.count, entry.redelivery_count)
                if entry.first not in self.entries:  # else handed again (a replay): kept
                    self.entries[entry.first] = Held(entry, _counted(partition, entry))
                metrics.SHARE_ENTRIES.labels("handed").inc()
                available += entry.count
                held += entry.count
                changed = True
        return changed

    def partly_settled(self, partition: SharePartition) -> bool:
        """Whether an entry held has records settled and others not: it cannot go back to
        the broker (it would come back whole), so it stays until all are settled."""
        return any(
            partition.entry_state(first, held.entry.count) == ACQUIRED
            for first, held in self.entries.items()
        )

    def ranges(self) -> list[tuple[int, int]]:
        return [(first, held.entry.count) for first, held in self.entries.items()]

    def reconcile(self, partition: SharePartition, settle: bool = True) -> None:
        """After the share partition's state was stored: acknowledge the entries it settled
        whole and give back those it released whole. Without `settle`, only give back
        (safe before the state is stored: a given-back record is not settled, and one
        whose deliveries ran out is archived again from the stored state)."""
        for first, held in list(self.entries.items()):
            state = partition.entry_state(first, held.entry.count)
            if state == ACQUIRED:
                continue
            if state == AVAILABLE:
                if _counted(partition, held.entry) <= held.counted:
                    continue  # handed and not fetched yet
                partition.give_back(first, held.entry.count)
                self.feed.give_back(held.entry)
                metrics.SHARE_ENTRIES.labels("given_back").inc()
            elif not settle:
                continue
            else:
                self.feed.settle(held.entry)
                metrics.SHARE_ENTRIES.labels("settled").inc()
            del self.entries[first]

    def future(self, max_records: int) -> asyncio.Future[None]:
        """Resolves when the broker hands an entry the gateway could take; with the window
        full, never (a fetch then waits for a lock to lapse or its deadline)."""
        if self.records_held() >= max_records:
            return asyncio.get_running_loop().create_future()
        return self.feed.handed_future()

    def close(self) -> None:
        self.entries.clear()
        self.feed.close()


def _counted(partition: SharePartition, entry: HandedEntry) -> int:
    records = partition.records
    last = entry.first + entry.count
    return sum(records[o].delivery_count for o in range(entry.first, last) if o in records)
