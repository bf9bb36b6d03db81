"""Share groups dispatched by the broker (docs/share-groups.md, "The broker dispatches") on
the memory twins: the share APIs through the dispatcher with a memory Shared subscription
(harness/share_feed_memory.py) that an outside consumer shares, and the whole-entry rule
of `BrokerHold` on a batch of three records."""

from __future__ import annotations

import asyncio
from typing import Any

from harness.share_feed_memory import MemoryShareFeeds, MemorySubscription
from pulsar_gateway.gateway.messages import RECORDS, LogEntry, StoredMessage
from pulsar_gateway.handlers.kafka.port import HandedEntry
from pulsar_gateway.handlers.kafka.share_broker import BrokerHold
from pulsar_gateway.handlers.kafka.share_groups import ShareGroups
from pulsar_gateway.handlers.kafka.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ARCHIVED,
    RELEASE,
    SharePartition,
)
from pulsar_gateway.kafka_codec.entry_format import BATCH
from pulsar_gateway.kafka_codec.record_batch import encode_batch
from tests.unit.test_kafka_apis import TOPIC
from tests.unit.test_share_group_apis import Share, acquired, values

OUTSIDE = "pulsar-app"


def broker_share(**settings: Any) -> tuple[Share, MemoryShareFeeds]:
    share = Share(**settings)
    feeds = MemoryShareFeeds()
    share.groups.feeds = feeds
    return share, feeds


def subscription(feeds: MemoryShareFeeds) -> MemorySubscription:
    return feeds.subscriptions[("g", f"{TOPIC}-partition-0")]


def test_an_outside_consumer_and_a_member_split_the_partition() -> None:
    """The member acquires only what the broker handed the gateway; what it accepts is
    acknowledged on the subscription; together the two get each record once."""

    async def scenario() -> None:
        share, feeds = broker_share()
        topic_id = await share.topic([b"r%d" % i for i in range(6)])
        await share.join("m1")
        assert acquired(await share.fetch("m1", topic_id)) == [(0, 2, 1)]
        sub = subscription(feeds)
        outside = [sub.take(OUTSIDE), sub.take(OUTSIDE)]  # the Pulsar application's turn
        assert [taken[0] for taken in outside if taken] == [3, 4]
        done = await share.fetch("m1", topic_id, acks=[(0, 2, ACCEPT)])
        assert acquired(done) == [(5, 5, 1)] and values(done) == [b"r5"]
        assert sub.acked == {0, 1, 2}
        for index in (3, 4):
            sub.ack(index)
        await share.fetch("m1", topic_id, acks=[(5, 5, ACCEPT)])
        assert sub.acked == {0, 1, 2, 3, 4, 5} and not sub.has_more()
        partition = share.groups.partitions[("g", TOPIC, 0)]
        assert partition.start == 6  # the outside consumer's records are not the group's

    asyncio.run(scenario())


def test_release_and_a_lapsed_lock_give_the_entries_back_with_counts_up() -> None:
    async def scenario() -> None:
        share, feeds = broker_share()
        topic_id = await share.topic([b"x", b"y", b"z"])
        await share.join("m1")
        await share.join("m2")
        assert acquired(await share.fetch("m1", topic_id)) == [(0, 2, 1)]
        await share.acknowledge("m1", topic_id, [(0, 0, RELEASE)])
        sub = subscription(feeds)
        assert sub.returned == [0] and sub.redeliveries == {0: 1}
        taken = sub.take(OUTSIDE)  # the released record reaches the other consumer
        assert taken is not None and taken[0] == 0 and taken[2] == 1
        share.clock.now += 10.0  # m1 never acknowledges y and z: their lock lapses
        await share.groups.sweep()
        assert sub.returned == [1, 2]
        again = await share.fetch("m2", topic_id)
        assert acquired(again) == [(1, 2, 2)] and values(again) == [b"y", b"z"]

    asyncio.run(scenario())


def test_a_restart_keeps_delivery_counts_of_what_was_in_flight() -> None:
    """The gateway dies holding y and z (acquired once): its consumer's entries go back to
    the broker, which hands y to an outside consumer; a new gateway on the stored state
    acquires only z, with count 2 (not y: the broker did not hand it over); the accepted x
    never comes again, and y stops holding the group's start back after a lock duration."""

    async def scenario() -> None:
        share, feeds = broker_share()
        topic_id = await share.topic([b"x", b"y", b"z"])
        await share.join("m1")
        await share.fetch("m1", topic_id)
        await share.acknowledge("m1", topic_id, [(0, 0, ACCEPT)])
        sub = subscription(feeds)
        sub.close_consumer("gateway")  # the old gateway's connection is gone
        taken = sub.take(OUTSIDE)
        assert taken is not None and taken[0] == 1
        after = ShareGroups(share.broker.storage.shares, share.groups.settings, share.clock)
        after.feeds = feeds
        after.group_configs = share.groups.group_configs
        share.groups = share.broker.context.share_groups = after
        share.epochs.clear()
        await share.join("m1")
        got = await share.fetch("m1", topic_id)
        assert acquired(got) == [(2, 2, 2)] and values(got) == [b"z"]
        await share.fetch("m1", topic_id, acks=[(2, 2, ACCEPT)])
        share.clock.now += 10.0  # y did not come back within a lock duration: another's
        await share.groups.sweep()
        assert share.broker.storage.shares.load("g", f"{TOPIC}-partition-0").start == 3

    asyncio.run(scenario())


class ListFeed:
    """A feed the test hands entries to."""

    def __init__(self, entries: list[HandedEntry]) -> None:
        self.waiting = entries
        self.settled: list[int] = []
        self.given_back: list[int] = []

    def follow(self, log: object) -> None: ...

    def handed(self, limit: int) -> list[HandedEntry]:
        out, self.waiting = self.waiting[:limit], self.waiting[limit:]
        return out

    def handed_future(self) -> asyncio.Future[None]:
        raise NotImplementedError

    def settle(self, entry: HandedEntry) -> None:
        self.settled.append(entry.first)

    def give_back(self, entry: HandedEntry) -> None:
        self.given_back.append(entry.first)

    def close(self) -> None: ...


def test_a_batch_goes_back_whole_or_stays_with_the_share_consumers() -> None:
    """A three-record entry: one record accepted, one released: the entry cannot go back
    (the broker would hand out the accepted one again), so the released record is acquired
    again by a share consumer; once all are settled the entry is acknowledged. An entry
    released whole goes back; one the broker handed at the delivery limit is archived."""
    partition = SharePartition(0, 0, 10.0, 3, 100)
    feed = ListFeed(
        [HandedEntry(0, 3, 0, "a"), HandedEntry(3, 2, 0, "b"), HandedEntry(5, 1, 3, "c")]
    )
    hold = BrokerHold(feed)
    assert hold.take(partition, 10, 100)
    assert partition.records[5].state == ARCHIVED  # delivered 3 times before: the limit
    assert [a.first for a in partition.acquire(range(0, 5), 0, "m", 0.0, 10)] == [0]
    assert partition.acknowledge("m", 0, 0, [ACCEPT]) == 0
    assert partition.acknowledge("m", 1, 1, [RELEASE]) == 0
    assert partition.acknowledge("m", 3, 4, [RELEASE]) == 0
    hold.reconcile(partition)
    assert feed.given_back == [3] and feed.settled == [5]
    assert sorted(hold.entries) == [0]
    again = partition.acquire(partition.available_in(hold.ranges()), 0, "m", 1.0, 10)
    assert [(a.first, a.last, a.delivery_count) for a in again] == [(1, 1, 2)]
    assert partition.acknowledge("m", 1, 2, [ACCEPT]) == 0
    hold.reconcile(partition)
    assert feed.settled == [5, 0] and not hold.entries
    assert partition.start == 3  # 3 and 4 are the broker's again, for a lock duration
    assert partition.expire(100.0) is False and partition.expire(200.0) is True
    assert partition.start == 6  # then another's: the start passes them


def test_an_entry_handed_again_is_taken_again_only_where_the_gateway_did_not_settle_it() -> None:
    """The broker hands entries whole. An entry whose first records the gateway accepted
    (its start passed them) and whose last one it still knows came back whole (its
    consumer closed, or after a restart): only the last is taken. One wholly below the
    start that the gateway knows nothing of was another consumer's: taken again, counts
    at least the broker's. Below the floor the offsets admin set, nothing is."""
    partition = SharePartition(0, 0, 10.0, 5, 100)
    partition.take_handed(0, 3, 0)
    partition.acquire(range(3), 0, "m", 0.0, 10)
    assert partition.acknowledge("m", 0, 1, [ACCEPT]) == 0
    assert partition.acknowledge("m", 2, 2, [RELEASE]) == 0
    assert partition.start == 2
    partition.disown()  # as after a restart: record 2 is returning
    assert partition.take_handed(0, 3, 1)
    assert partition.start == 2 and partition.available_in([(0, 3)]) == [2]
    assert partition.records[2].delivery_count == 1

    other = SharePartition(10, 10, 10.0, 5, 100)
    assert other.take_handed(5, 2, 1)  # another consumer gave it back
    assert other.start == 5 and other.available_in([(5, 2)]) == [5, 6]
    assert other.records[5].delivery_count == 1

    altered = SharePartition(10, 10, 10.0, 5, 100)
    altered.floor = 10
    assert not altered.take_handed(5, 2, 0)
    assert altered.start == 10 and altered.entry_state(5, 2) == ACKNOWLEDGED
    assert altered.take_handed(8, 4, 0)  # straddling the floor: only what is past it
    assert altered.start == 10 and altered.available_in([(8, 4)]) == [10, 11]


def test_a_partly_settled_batch_keeps_the_gateways_consumer_open() -> None:
    """A three-record batch of which the member accepted two, and the member leaves: the
    share partition is idle, but closing its consumer would hand the whole batch (the two
    accepted records too) to another consumer; it stays open until the batch is settled."""

    async def scenario() -> None:
        share, feeds = broker_share()
        topic_id = await share.topic([b"a"])
        log = share.broker.storage.topics.logs[f"{TOPIC}-partition-0"]
        batch = bytes(encode_batch(0, [(i, 0, None, b"b%d" % i, []) for i in range(3)]))
        stored = StoredMessage((1, 1, -1), batch, "", {BATCH: "3", RECORDS: "3"}, 0, 0)
        log.entries.append(LogEntry(1, stored))
        log.next_offset = 4
        await share.join("m1")
        assert acquired(await share.fetch("m1", topic_id)) == [(0, 2, 1)]
        await share.acknowledge("m1", topic_id, [(0, 2, ACCEPT)])
        sub = subscription(feeds)
        assert sub.acked == {0} and sub.out == {1: "gateway"}
        await share.groups.leave("g", "m1")
        await share.groups.sweep()
        assert sub.out == {1: "gateway"} and not sub.returned  # still the gateway's
        await share.join("m2")
        assert acquired(await share.fetch("m2", topic_id)) == [(3, 3, 1)]
        await share.acknowledge("m2", topic_id, [(3, 3, ACCEPT)])
        assert sub.acked == {0, 1} and not sub.out

    asyncio.run(scenario())
