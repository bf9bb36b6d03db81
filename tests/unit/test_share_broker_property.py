"""A property test of share groups dispatched by the broker (docs/share-groups.md, "The broker
dispatches"): whatever share members, a Pulsar application beside them and gateway restarts
do, in any order, on a memory Shared subscription (harness/share_feed_memory.py), no record
is consumed twice where the rules promise it (single-record entries always; batches without
a restart, which may hand a partly settled batch to the application: the documented at
least once), and once everyone settles what they get, every entry is acknowledged on the
subscription and every record was consumed, rejected, or delivered up to the limit (to
share members and the Pulsar application together), and none past it to share members."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from harness.share_feed_memory import GATEWAY, MemoryShareFeed, MemorySubscription
from pulsar_gateway.gateway.messages import RECORDS, LogEntry, StoredMessage
from pulsar_gateway.handlers.kafka.share_broker import BrokerHold
from pulsar_gateway.handlers.kafka.share_partition import (
    ACCEPT,
    ACQUIRED,
    REJECT,
    RELEASE,
    SharePartition,
)

LOCK, LIMIT, WINDOW = 10.0, 4, 100
OUT = "pulsar-app"


class Log:
    topic = "t-partition-0"

    def __init__(self, sizes: list[int]) -> None:
        self.entries: list[LogEntry] = []
        offset = 0
        for index, size in enumerate(sizes):
            message = StoredMessage((1, index, -1), b"", "", {RECORDS: str(size)}, 0, 0)
            self.entries.append(LogEntry(offset, message))
            offset += size
        self.next_offset = offset

    def data_future(self) -> asyncio.Future[None]:
        raise NotImplementedError


class Model:
    def __init__(self, sizes: list[int]) -> None:
        self.log = Log(sizes)
        self.sub = MemorySubscription(self.log, earliest=True)  # type: ignore[arg-type]
        self.partition = SharePartition(0, 0, LOCK, LIMIT, WINDOW)
        self.partition.disown()  # as `ShareGroups` makes every partition the broker feeds
        self.hold = BrokerHold(MemoryShareFeed(self.sub))
        self.stored = self.partition.state()
        self.now = 0.0
        self.consumed: Counter[int] = Counter()
        self.rejected: set[int] = set()
        self.delivered: Counter[int] = Counter()
        # deliveries to the Pulsar application, which count toward a record's limit as the
        # broker's redelivery count does (docs/share-groups.md, "What the share partition
        # keeps")
        self.delivered_outside: Counter[int] = Counter()
        self.outside: list[int] = []  # entry indexes the application holds
        self.restarted = False

    def records_of(self, index: int) -> range:
        entry = self.log.entries[index]
        return range(entry.offset, entry.offset + int(entry.message.properties[RECORDS]))

    def save(self) -> None:
        """As `ShareGroups.save`: stored, then the entries reconciled."""
        self.stored = self.partition.state()
        self.hold.reconcile(self.partition)

    def fetch(self, member: str, count: int) -> None:
        self.partition.expire(self.now)
        self.hold.reconcile(self.partition, settle=False)
        self.hold.take(self.partition, count, WINDOW)
        offsets = self.partition.available_in(self.hold.ranges())
        for run in self.partition.acquire(offsets, 0, member, self.now, count):
            for offset in range(run.first, run.last + 1):
                self.delivered[offset] += 1
        self.save()

    def acknowledge(self, member: str, kind: int) -> None:
        held = [
            offset
            for offset, record in sorted(self.partition.records.items())
            if record.state == ACQUIRED and record.member == member
        ]
        if not held:
            return
        assert self.partition.acknowledge(member, held[0], held[0], [kind]) == 0
        self.save()
        if kind == ACCEPT:
            self.consumed[held[0]] += 1
        elif kind == REJECT:
            self.rejected.add(held[0])

    def tick(self, seconds: float) -> None:
        self.now += seconds
        if self.partition.expire(self.now):
            self.save()

    def outside_take(self) -> None:
        taken = self.sub.take(OUT)
        if taken is not None:
            self.outside.append(taken[0])
            for offset in self.records_of(taken[0]):
                self.delivered_outside[offset] += 1

    def outside_settle(self, ack: bool) -> None:
        if not self.outside:
            return
        index = self.outside.pop(0)
        if ack:
            self.sub.ack(index)
            for offset in self.records_of(index):
                self.consumed[offset] += 1
        else:
            self.sub.give_back(index)

    def restart(self) -> None:
        """The gateway dies: its consumer's entries go back; a new one reads the store."""
        self.restarted = True
        self.sub.close_consumer(GATEWAY)
        self.partition = SharePartition.restore(self.stored, LOCK, LIMIT, WINDOW, disowned=True)
        self.partition.disown()
        self.hold = BrokerHold(MemoryShareFeed(self.sub))

    def drain(self) -> None:
        """Everyone settles: the application gives back what it holds, a member takes and
        accepts everything, time passes, until the subscription is empty."""
        while self.outside:
            self.outside_settle(ack=False)
        for _ in range(4 * len(self.log.entries) + 10):
            self.tick(LOCK * 2)
            self.fetch("z", WINDOW)
            while any(
                r.state == ACQUIRED and r.member == "z" for r in self.partition.records.values()
            ):
                self.acknowledge("z", ACCEPT)
            if len(self.sub.acked) == len(self.log.entries):
                return


OPS = st.one_of(
    st.tuples(st.just("fetch"), st.sampled_from("ab"), st.integers(1, 4)),
    st.tuples(st.just("ack"), st.sampled_from("ab"), st.sampled_from([ACCEPT, RELEASE, REJECT])),
    st.tuples(st.just("tick"), st.sampled_from([1.0, LOCK])),
    st.tuples(st.just("out_take")),
    st.tuples(st.just("out_settle"), st.booleans()),
    st.tuples(st.just("restart")),
)


def run(sizes: list[int], ops: list[tuple[Any, ...]]) -> Model:
    model = Model(sizes)
    for op in ops:
        kind, *args = op
        if kind == "fetch":
            model.fetch(args[0], args[1])
        elif kind == "ack":
            model.acknowledge(args[0], args[1])
        elif kind == "tick":
            model.tick(args[0])
        elif kind == "out_take":
            model.outside_take()
        elif kind == "out_settle":
            model.outside_settle(args[0])
        else:
            model.restart()
    model.drain()
    return model


def check(model: Model, batches: bool) -> None:
    total = model.log.next_offset
    assert len(model.sub.acked) == len(model.log.entries), "an entry was never settled"
    if not (batches and model.restarted):
        twice = [offset for offset, count in model.consumed.items() if count > 1]
        assert not twice, f"consumed twice: {twice}"
    for offset in range(total):
        index = max(i for i, e in enumerate(model.log.entries) if e.offset <= offset)
        handed = model.sub.redeliveries.get(index, 0) + 1
        done = model.consumed[offset] or offset in model.rejected
        delivered = model.delivered[offset] + model.delivered_outside[offset]
        assert done or max(handed, delivered) >= LIMIT, f"record {offset} lost"
    assert all(count <= LIMIT for count in model.delivered.values()), model.delivered


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.just(1), min_size=1, max_size=6), st.lists(OPS, max_size=40))
def test_single_record_entries_are_consumed_once_and_none_is_lost(
    sizes: list[int], ops: list[tuple[Any, ...]]
) -> None:
    check(run(sizes, ops), batches=False)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=5), st.lists(OPS, max_size=40))
# a batch partly accepted and partly released must not go back to the application
@example(
    [2],
    [
        ("fetch", "a", 2),
        ("ack", "a", ACCEPT),
        ("ack", "a", RELEASE),
        ("out_take",),
        ("out_settle", True),
    ],
)
# records held at a restart with their deliveries used up come back from the broker with a
# lower redelivery count: they stay returning (archived when handed), not passed and taken
# again as another's (a busy-loop run of the suite found it: delivered 5 times, limit 4)
@example(
    [1, 1, 1, 2],
    [
        ("out_take",),
        ("fetch", "a", 3),
        ("restart",),
        ("out_take",),
        ("fetch", "a", 1),
        ("fetch", "a", 1),
        ("fetch", "b", 1),
        ("ack", "b", ACCEPT),
        ("restart",),
        ("fetch", "a", 1),
        ("fetch", "a", 1),
        ("tick", LOCK),
        ("fetch", "a", 1),
        ("fetch", "a", 1),
        ("restart",),
    ],
)
# the broker counts the gateway's own giving back (a restart) as a redelivery, which
# delivered the record to no one: counted, record 1 was archived after 3 deliveries (B);
# added to the record's own count instead of taken as a bound, after 3 again (D) (deep fuzz)
@example(
    [2],
    [
        ("out_take",),
        ("out_settle", False),
        ("fetch", "a", 1),
        ("ack", "a", ACCEPT),
        ("restart",),
        ("fetch", "b", 1),
        ("ack", "b", RELEASE),
        ("fetch", "a", 1),
    ],
)
@example(
    [2],
    [
        ("fetch", "a", 2),
        ("ack", "a", RELEASE),
        ("fetch", "a", 1),
        ("restart",),
        ("out_take",),
        ("out_settle", False),
        ("fetch", "a", 1),
    ],
)
# record 1, held at a restart, was not handed back within a lock duration: the start
# passed it as another's and, when its entry came, it was taken with the broker's count
# alone: delivered 5 times (deep fuzz; its counts are now kept while passed)
@example(
    [2, 1],
    [
        ("fetch", "a", 1),
        ("fetch", "a", 1),
        ("ack", "a", ACCEPT),
        ("tick", LOCK),
        ("fetch", "a", 1),
        ("tick", LOCK),
        ("fetch", "a", 2),
        ("restart",),
        ("fetch", "a", 1),
        ("restart",),
        ("fetch", "a", 1),
    ],
)
# record 1, accepted, came again with its entry (at least once, after restarts): the start
# had passed it and forgot its count, taken again from the broker's: delivered 5 times
@example(
    [1, 2],
    [
        ("out_take",),
        ("fetch", "b", 2),
        ("ack", "b", RELEASE),
        ("fetch", "b", 1),
        ("ack", "b", ACCEPT),
        ("restart",),
        ("tick", 1.0),
        ("tick", LOCK),
        ("fetch", "a", 1),
        ("restart",),
        ("fetch", "a", 1),
    ],
)
# record 1 went to the Pulsar application once and to share consumers three times: its
# fourth delivery used up the limit (the application's counts, as the broker's count does)
@example(
    [2],
    [
        ("out_take",),
        ("out_settle", False),
        ("fetch", "a", 1),
        ("fetch", "a", 1),
        ("ack", "a", ACCEPT),
        ("restart",),
        ("fetch", "a", 1),
        ("tick", LOCK),
        ("fetch", "a", 1),
    ],
)
def test_batches_are_consumed_once_without_restarts_and_none_is_lost(
    sizes: list[int], ops: list[tuple[Any, ...]]
) -> None:
    check(run(sizes, ops), batches=True)
