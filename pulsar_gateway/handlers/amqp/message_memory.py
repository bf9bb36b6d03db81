"""What a queue engine remembers about message ids across Pulsar's redeliveries.

Acks to Pulsar are sent in the background by pulsar-client, so a broker crash can lose
the last ones: Pulsar then delivers those messages again, and a restarted broker counts
them as never redelivered. The engine therefore remembers the ids it acknowledged lately
(`AckedIds`) and acks such a message again instead of delivering it twice, and remembers
what it delivered and is still unacked (`DeliveredIds`), so that a message coming back
from that set is marked `redelivered` whatever Pulsar says.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable

from pulsar_gateway.handlers.amqp.broker_model import StoredDelivery

# How long, and how many, acked ids are remembered: a lost ack shows up once the
# broker is back (a restart takes seconds; the soak freezes it for up to ~15 s).
ACKED_REMEMBER_SECONDS = 120.0
ACKED_REMEMBER_MAX = 100_000
DELIVERED_REMEMBER_MAX = 100_000


class _Generation:
    """Ids acknowledged within one stretch of time, and when that stretch began and ended."""

    __slots__ = ("ids", "last", "started")

    def __init__(self, now: float) -> None:
        self.started = self.last = now
        self.ids: dict[Hashable, None] = {}  # a dictionary's table is a third of a set's


class AckedIds:
    """Ids of messages acknowledged to the store lately, bounded by age and count: a
    message whose ack the store lost comes back within seconds of the broker's return,
    so recent ids are all that is needed to recognise it.

    Kept as a few generations of plain dictionaries, each covering a quarter of the age or count
    bound, and forgotten a generation at a time: a generation holds only the id (which the
    delivery already built), where an ordered dictionary of ids and times added a node and
    a float per id on the small-object heap, pinning its arenas after a busy stretch
    (docs/architecture.md, "Memory"). An id lives between `max_age` and 1.25 times that,
    and at least the `max_ids` * 3/4 newest are kept."""

    def __init__(
        self, max_age: float = ACKED_REMEMBER_SECONDS, max_ids: int = ACKED_REMEMBER_MAX
    ) -> None:
        self.max_age = max_age
        self.max_ids = max_ids
        self._per_generation = max(1, max_ids // 4)
        self._generations: deque[_Generation] = deque()  # oldest first
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, message_id: Hashable) -> bool:
        for generation in self._generations:  # a handful
            if message_id in generation.ids:
                return True
        return False

    def add(self, ids: Iterable[Hashable]) -> None:
        """Remember `ids` (an ack's, 100 at a time from a client acking multiple: the
        generation is chosen once for the lot, not once an id)."""
        now = time.monotonic()
        generations = self._generations
        current = generations[-1] if generations else None
        if current is None or now - current.started >= self.max_age / 4:
            current = _Generation(now)
            generations.append(current)
        known = current.ids
        room = self._per_generation - len(known)
        added = 0
        for message_id in ids:
            if message_id in known:
                continue
            if room <= 0:
                current.last = now
                current = _Generation(now)
                generations.append(current)
                known = current.ids
                room = self._per_generation
            known[message_id] = None
            room -= 1
            added += 1
        if added:
            current.last = now
            self._count += added
        self.forget_old(now)

    def forget_old(self, now: float | None = None) -> None:
        """Drop the generations whose newest id is older than `max_age`, and the oldest
        ones while more than `max_ids` are kept."""
        horizon = (time.monotonic() if now is None else now) - self.max_age
        generations = self._generations
        while generations and (self._count > self.max_ids or generations[0].last < horizon):
            self._count -= len(generations.popleft().ids)


class DeliveredIds:
    """Whether a message going to a client was delivered before (AMQP's `redelivered`)."""

    def __init__(self, max_ids: int = DELIVERED_REMEMBER_MAX) -> None:
        self.max_ids = max_ids
        self._requeued: set[Hashable] = set()
        # fetched, never delivered, handed back to Pulsar by `release_reader`: Pulsar
        # counts them as redelivered when they come back, AMQP must not
        self._never_delivered: set[Hashable] = set()
        # delivered to a client and not settled yet (insertion order, bounded): if one
        # comes back from the store (its Pulsar count restarted), it is redelivered
        self._delivered: OrderedDict[Hashable, None] = OrderedDict()

    def mark(self, delivery: StoredDelivery) -> bool:
        """A delivery goes to a client: whether it was delivered before."""
        delivered = self._delivered
        message_id = delivery.message_id
        if message_id in delivered or message_id in self._requeued:
            redelivered = True
        else:
            redelivered = self._was_delivered(delivery)
        delivered[message_id] = None
        if len(delivered) > self.max_ids:
            delivered.popitem(last=False)
        return redelivered

    def _was_delivered(self, delivery: StoredDelivery) -> bool:
        message_id = delivery.message_id
        if message_id in self._requeued or message_id in self._delivered:
            return True
        if message_id in self._never_delivered:
            self._never_delivered.discard(message_id)
            return False
        return delivery.redelivered

    def requeued(self, message_id: Hashable) -> None:
        """Delivered and put back in the queue."""
        self._requeued.add(message_id)

    def handed_back(self, message_id: Hashable) -> None:
        """Fetched and given back to Pulsar undelivered (the reader closed)."""
        if message_id not in self._requeued:
            self._never_delivered.add(message_id)

    def forget(self, message_id: Hashable) -> None:
        """Settled: gone from the queue for good."""
        self._requeued.discard(message_id)
        self._delivered.pop(message_id, None)
