"""One share group's view of one partition (KIP-932): which records are in flight, who holds
them, until when, and how often each was delivered. Pure: time is a value passed in, and
the caller (share_groups.py) reads the log and stores `state()` through the port.

Offsets below `start` are done (acknowledged or archived); offsets from `end` on were never
delivered; every offset in between has a record here. A record is acquired by one member
for the lock duration, counting one more delivery; ACCEPT acknowledges it, RELEASE makes it
available again, REJECT (and a gap) archives it. A record whose lock lapses is available
again, and one that was delivered `delivery_limit` times is archived instead of being
made available again (docs/share-groups.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pulsar_gateway.handlers.kafka.port import ShareRun, ShareState
from pulsar_gateway.kafka_codec.errors import ErrorCode

# Kafka's record states and acknowledge types
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
# not Kafka's, when the broker dispatches (docs/share-groups.md, "The broker dispatches"):
# OTHER, a record the broker did not hand the gateway (another consumer's); RETURNING, one
# the gateway gave back or held before a restart, which the broker hands out again: kept
# with its delivery count for a lock duration, then another's
OTHER, RETURNING = 5, 6
DONE = (ACKNOWLEDGED, ARCHIVED, OTHER)
SETTLED = (ACKNOWLEDGED, ARCHIVED)


@dataclass
class InFlight:
    state: int
    delivery_count: int
    member: str = ""
    deadline: float = 0.0
    returns: int = 0  # the broker's redeliveries of the entry that the gateway caused


@dataclass(frozen=True)
class Acquired:
    """A run of consecutive acquired offsets with one delivery count (ShareFetch's
    AcquiredRecords)."""

    first: int
    last: int
    delivery_count: int


class SharePartition:
    def __init__(
        self,
        start: int,
        end: int,
        lock_seconds: float,
        delivery_limit: int,
        max_in_flight: int,
    ) -> None:
        self.start = start
        self.end = end
        self.records: dict[int, InFlight] = {}
        self.lock_seconds = lock_seconds
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        # the broker dispatching: records below it were settled by the offsets admin
        # (AlterShareGroupOffsets), never taken again when the broker hands them
        self.floor = 0
        # the Kafka topic id it was read for: a topic deleted and created again on the same
        # Pulsar topics (a backend that deletes) is another topic (share_groups.py)
        self.topic_id = ""
        # the broker dispatching (`disown`): records the start passed (settled, or returning
        # and not handed back within a lock duration), by offset: their delivery counts and
        # the gateway's own returns, for when their entry comes back whole (`take_handed`);
        # the first passed dropped past `max_in_flight`
        self.broker = False
        self.passed: dict[int, tuple[int, int]] = {}

    # ---- the durable form ----------------------------------------------------------------

    @classmethod
    def restore(
        cls,
        state: ShareState,
        lock_seconds: float,
        delivery_limit: int,
        max_in_flight: int,
        disowned: bool = False,
    ) -> SharePartition:
        """From stored state: an acquired record's lock did not survive, so it is
        available again (archived if its deliveries are used up). `disowned` (the broker
        dispatches): every record held is returning instead, its deliveries used up or not,
        since its entry, not acknowledged on the subscription, comes back from the broker;
        archived here, the start passed it, and the entry handed again was taken as
        another's with the broker's lower redelivery count: delivered past the limit
        (docs/share-groups.md, "What the share partition keeps")."""
        partition = cls(state.start, state.end, lock_seconds, delivery_limit, max_in_flight)
        partition.floor = state.floor
        partition.broker = disowned
        for run in state.runs:
            status = run.state
            if run.last < state.start:  # passed (`passed`)
                for offset in range(run.first, run.last + 1):
                    partition.passed[offset] = (run.delivery_count, run.returns)
                continue
            if status in (ACQUIRED, RETURNING):
                limited = run.delivery_count >= delivery_limit
                status = RETURNING if disowned else ARCHIVED if limited else AVAILABLE
            for offset in range(max(run.first, state.start), min(run.last + 1, state.end)):
                partition.records[offset] = InFlight(
                    status, run.delivery_count, returns=run.returns
                )
        for offset in range(state.start, state.end):  # a hole in stored runs: deliver again
            partition.records.setdefault(offset, InFlight(AVAILABLE, 0))
        partition._advance_start()
        return partition

    def state(self) -> ShareState:
        runs: list[ShareRun] = []
        passed = (
            (offset, InFlight(OTHER, count, returns=returns))
            for offset, (count, returns) in sorted(self.passed.items())
        )
        in_window = ((offset, self.records[offset]) for offset in range(self.start, self.end))
        for offset, record in (*passed, *in_window):
            stored = (record.state, record.delivery_count, record.returns)
            last = runs[-1] if runs else None
            if last and last.last == offset - 1 and _kept(last) == stored:
                runs[-1] = ShareRun(last.first, offset, *stored)
            else:
                runs.append(ShareRun(offset, offset, *stored))
        return ShareState(self.start, self.end, tuple(runs), self.floor)

    # ---- time ---------------------------------------------------------------------------

    def expire(self, now: float) -> bool:
        """Release every record whose lock lapsed; whether any did. A record returning to
        the broker that did not come back to the gateway within a lock duration went to
        another consumer (its counts kept in `passed`, with the return that sent it)."""
        changed = False
        for record in self.records.values():
            if record.state == ACQUIRED and record.deadline <= now:
                self._release(record)
                changed = True
            elif record.state == RETURNING:
                if not record.deadline:
                    record.deadline = now + self.lock_seconds
                elif record.deadline <= now:
                    record.state = OTHER
                    record.returns += 1  # the return that sent it (`take_handed`)
                    changed = True
        if changed:
            self._advance_start()
        return changed

    def held(self) -> bool:
        """Whether some record is acquired."""
        return any(record.state == ACQUIRED for record in self.records.values())

    def next_deadline(self) -> float | None:
        deadlines = [r.deadline for r in self.records.values() if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    # ---- acquiring ----------------------------------------------------------------------

    def next_wanted(self) -> int | None:
        """The first offset a fetch could acquire: an available record, else `end` while the
        in-flight window has room; None when nothing can be acquired now."""
        for offset in range(self.start, self.end):
            if self.records[offset].state == AVAILABLE:
                return offset
        return self.end if self.end - self.start < self.max_in_flight else None

    def skip_to(self, log_start: int) -> None:
        """Records below the log start are gone (retention, DeleteRecords): done."""
        if log_start <= self.start:
            return
        for offset in range(self.start, min(log_start, self.end)):
            self.records.pop(offset, None)
        self.passed = {o: kept for o, kept in self.passed.items() if o >= log_start}
        self.start = log_start
        self.end = max(self.end, log_start)

    def acquire(
        self,
        present: Iterable[int],
        read_end: int,
        member: str,
        now: float,
        max_records: int,
    ) -> list[Acquired]:
        """Acquire for `member` the available records among `present` (the offsets of
        records the fetch read, ascending) and the new ones past `end`; offsets up to
        `read_end` that hold no record (control batches, compacted away) are archived as
        gaps. At most `max_records`, and never past the in-flight window."""
        taken: list[tuple[int, int]] = []
        for offset in present:
            if len(taken) >= max_records:
                break
            if offset < self.start:
                continue
            if offset >= self.end:
                if offset - self.start >= self.max_in_flight:
                    break
                for gap in range(self.end, offset):
                    self.records[gap] = InFlight(ARCHIVED, 0)
                self.records[offset] = InFlight(AVAILABLE, 0)
                self.end = offset + 1
            record = self.records[offset]
            if record.state != AVAILABLE:
                continue
            record.state, record.member = ACQUIRED, member
            record.delivery_count += 1
            record.deadline = now + self.lock_seconds
            taken.append((offset, record.delivery_count))
        if len(taken) < max_records:
            limit = min(read_end, self.start + self.max_in_flight)
            for gap in range(self.end, limit):
                self.records[gap] = InFlight(ARCHIVED, 0)
            self.end = max(self.end, limit)
        self._advance_start()
        return _runs(taken)

    # ---- acknowledging ------------------------------------------------------------------

    def acknowledge(self, member: str, first: int, last: int, types: list[int]) -> int:
        """Apply one acknowledgement batch of `member`; an error code (nothing applied when
        any record of the batch is not acquired by the member)."""
        count = last - first + 1
        if count <= 0 or not types or (len(types) != 1 and len(types) != count):
            return ErrorCode.INVALID_REQUEST
        if count > self.max_in_flight:  # more than can be in flight: not all held by one
            return ErrorCode.INVALID_RECORD_STATE
        if any(kind not in (GAP, ACCEPT, RELEASE, REJECT) for kind in types):
            return ErrorCode.INVALID_REQUEST
        for offset in range(first, last + 1):
            record = self.records.get(offset)
            kind = types[0] if len(types) == 1 else types[offset - first]
            if record is None or offset < self.start:
                if kind == GAP:
                    continue
                return ErrorCode.INVALID_RECORD_STATE
            if kind == GAP and record.state == ARCHIVED:
                continue
            if record.state != ACQUIRED or record.member != member:
                return ErrorCode.INVALID_RECORD_STATE
        for offset in range(first, last + 1):
            record = self.records.get(offset)
            if record is None or record.state != ACQUIRED:
                continue
            kind = types[0] if len(types) == 1 else types[offset - first]
            if kind == ACCEPT:
                record.state = ACKNOWLEDGED
            elif kind == RELEASE:
                self._release(record)
            else:
                record.state = ARCHIVED
            record.member = ""
        self._advance_start()
        return ErrorCode.NONE

    def release_member(self, member: str) -> bool:
        """The member left or closed its share session: what it holds is available again."""
        changed = False
        for record in self.records.values():
            if record.state == ACQUIRED and record.member == member:
                self._release(record)
                changed = True
        self._advance_start()
        return changed

    # ---- the broker dispatches (docs/share-groups.md) -------------------------------------

    def disown(self) -> None:
        """Nothing unsettled is the gateway's until the broker hands it over (a new consumer
        of the subscription: after a restart, or the partition coming here): what was in
        flight is returning, its delivery counts kept for when the broker hands it again."""
        self.broker = True
        for record in self.records.values():
            if record.state in (AVAILABLE, ACQUIRED):
                record.state, record.member, record.deadline = RETURNING, "", 0.0

    def take_handed(self, first: int, count: int, redelivery_count: int) -> bool:
        """The broker handed the gateway the records `first`..`first + count - 1`: each that
        was another's becomes available, its delivery count at least the broker's
        redelivery count (archived when that reached the limit). One the gateway holds or
        settled already stays as it is. Records below `start` came back from another
        consumer (or the gateway's acknowledgement was lost: at least once) and are taken
        again, except those below `floor` (the offsets admin settled them) and those of an
        entry whose later records the gateway knows (it settled the first ones itself:
        the entry came back whole). Whether anything changed."""
        last = first + count
        if count <= 0:
            return False
        known = any(
            self.records[o].state != OTHER
            for o in range(max(first, self.start), min(last, self.end))
        )
        if known or first < self.floor:
            first = max(first, self.start if known else self.floor)
        if first >= last:
            return False
        if first < self.start:
            for offset in range(first, self.start):
                count, returns = self.passed.pop(offset, (0, 0))
                self.records[offset] = InFlight(OTHER, count, returns=returns)
            self.start = first
        for offset in range(self.end, last):
            self.records[offset] = InFlight(OTHER, 0)
        self.end = max(self.end, last)
        changed = False
        for offset in range(first, last):
            record = self.records[offset]
            if record.state not in (OTHER, RETURNING):
                continue
            if record.state == RETURNING:
                record.returns += 1  # the gateway gave its entry back: one more redelivery
            # the broker counts each time the gateway gave the entry back (its consumer
            # closed, or the entry went back) as a redelivery, which delivered this record
            # to no one: counted, a record held and given back without being acquired was
            # archived one delivery early (docs/share-groups.md)
            others = redelivery_count - record.returns
            record.delivery_count = max(record.delivery_count, others)
            limited = record.delivery_count >= self.delivery_limit
            record.state = ARCHIVED if limited else AVAILABLE
            changed = True
        self._advance_start()
        return changed

    def entry_state(self, first: int, count: int) -> int:
        """Of an entry the gateway holds: SETTLED's first when every record is settled (it
        can be acknowledged), AVAILABLE when every record is (none held, none settled: it
        can go back whole), ACQUIRED else."""
        states = [
            self.records[o].state if o in self.records and o >= self.start else ACKNOWLEDGED
            for o in range(first, first + count)
        ]
        if all(state in DONE for state in states):
            return ACKNOWLEDGED
        if all(state == AVAILABLE for state in states):
            return AVAILABLE
        return ACQUIRED

    def give_back(self, first: int, count: int) -> None:
        """The entry went back to the broker: its records are returning to it."""
        for offset in range(max(first, self.start), min(first + count, self.end)):
            record = self.records[offset]
            if record.state == AVAILABLE:
                record.state, record.deadline = RETURNING, 0.0
        self._advance_start()

    def archive(self, offsets: Iterable[int]) -> bool:
        """Archive available offsets that hold no record to deliver (gaps); whether any."""
        changed = False
        for offset in offsets:
            record = self.records.get(offset)
            if record is not None and offset >= self.start and record.state == AVAILABLE:
                record.state = ARCHIVED
                changed = True
        self._advance_start()
        return changed

    def available_in(self, ranges: Iterable[tuple[int, int]]) -> list[int]:
        """The available offsets within the (first, count) ranges, ascending."""
        out = [
            offset
            for first, count in ranges
            for offset in range(max(first, self.start), min(first + count, self.end))
            if self.records[offset].state == AVAILABLE
        ]
        return sorted(out)

    # ---- inside -------------------------------------------------------------------------

    def _release(self, record: InFlight) -> None:
        record.state = ARCHIVED if record.delivery_count >= self.delivery_limit else AVAILABLE
        record.member = ""

    def _advance_start(self) -> None:
        passed = self.passed
        while self.start < self.end and self.records[self.start].state in DONE:
            record = self.records.pop(self.start)
            if self.broker and (record.delivery_count or record.returns):
                passed[self.start] = (record.delivery_count, record.returns)
                if len(passed) > self.max_in_flight:  # the first passed (the lowest, mostly)
                    del passed[next(iter(passed))]
            self.start += 1


def settled_within(state: ShareState) -> int:
    """How many offsets between the state's start and end are done (acknowledged or
    archived, gaps included): a share group's lag leaves them out."""
    return sum(
        min(run.last, state.end - 1) - max(run.first, state.start) + 1
        for run in state.runs
        if run.state in DONE and run.first < state.end and run.last >= state.start
    )


def _kept(run: ShareRun) -> tuple[int, int, int]:
    return run.state, run.delivery_count, run.returns


def _runs(taken: list[tuple[int, int]]) -> list[Acquired]:
    out: list[Acquired] = []
    for offset, count in taken:
        if out and out[-1].last == offset - 1 and out[-1].delivery_count == count:
            out[-1] = Acquired(out[-1].first, offset, count)
        else:
            out.append(Acquired(offset, offset, count))
    return out
