"""What every part of the soak shares: one clock, per-second counters, the fault log, and a
record per client of its acknowledgements, errors and dropped connections.

Everything is appended from many threads (librdkafka callbacks, an asyncio loop, the fault
injector); list appends and dict increments are atomic under the GIL, so the records stay
lock-free and the hot paths cheap. Times are seconds since the soak's start on the
monotonic clock, which is system-wide on Linux, so the victim subprocess's times convert too.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

PAD = b"." * 64  # a value is about 100 bytes: a realistic small record, cheap at this rate


def kafka_value(producer: str, key: str, seq: int) -> bytes:
    """`soak|producer|key|seq|pad`: enough to identify a record without the delivery report."""
    return f"soak|{producer}|{key}|{seq}|".encode() + PAD


def parse_value(value: bytes | None) -> tuple[str, str, int] | None:
    """(client, key or queue, seq) of a soak record, None for anything else (foreign)."""
    if not value or not value.startswith(b"soak|"):
        return None
    parts = value.split(b"|", 4)
    try:
        return parts[1].decode(), parts[2].decode(), int(parts[3])
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


@dataclass
class Fault:
    """One injected fault: when it ran and what the gateway did about it."""

    number: int
    kind: str
    start: float
    end: float | None = None  # when the disruption ended (SIGCONT, the broker back...)
    detail: str = ""
    outcome: str = ""

    def describe(self) -> str:
        return f"#{self.number} {self.kind} at {self.start:.1f} s ({self.detail})"


class Timeline:
    """The soak's clock, its per-second counters (the throughput chart) and the fault log."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.series: dict[str, Counter[int]] = defaultdict(Counter)
        self.faults: list[Fault] = []
        self.samples: list[dict[str, Any]] = []  # once a second: rss, health (the monitor)
        self.phases: dict[str, float] = {}
        self._lock = threading.Lock()  # `+=` on a Counter is not atomic across threads

    def now(self) -> float:
        return time.monotonic() - self.t0

    def from_monotonic(self, stamp: float) -> float:
        return stamp - self.t0

    def count(self, series: str, amount: int = 1, at: float | None = None) -> None:
        second = int(self.now() if at is None else at)
        with self._lock:
            self.series[series][second] += amount

    def phase(self, name: str) -> None:
        """Mark a phase boundary (load start, load end...) for the charts and the report."""
        self.phases[name] = self.now()

    def begin_fault(self, kind: str, detail: str = "") -> Fault:
        fault = Fault(len(self.faults) + 1, kind, self.now(), detail=detail)
        self.faults.append(fault)
        return fault

    def fault_before(self, at: float) -> Fault | None:
        """The last fault that started at or before `at` (what a stall or a loss followed)."""
        found = None
        for fault in self.faults:
            if fault.start <= at:
                found = fault
        return found

    def explain(self, at: float) -> str:
        """`at` in words with the fault that preceded it, for failure listings."""
        fault = self.fault_before(at)
        if fault is None:
            return f"t={at:.1f} s, before any fault"
        return f"t={at:.1f} s, {at - fault.start:.1f} s after {fault.describe()}"


@dataclass
class ClientRecord:
    """One client's life: acknowledgement times (producers), errors, dropped connections.

    `healthy` clients are never touched by the fault injector, so any drop of theirs is the
    gateway's doing; victims' drops are expected and only listed."""

    name: str
    protocol: str
    role: str
    healthy: bool = True
    ack_times: list[float] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)
    drops: list[tuple[float, str]] = field(default_factory=list)
    produced: int = 0
    notes: dict[str, int] = field(default_factory=dict)  # plain dict: asdict() breaks Counter

    def error(self, at: float, text: str) -> None:
        self.errors.append((at, text))

    def drop(self, at: float, text: str) -> None:
        self.drops.append((at, text))

    def note(self, what: str) -> None:
        self.notes[what] = self.notes.get(what, 0) + 1

    def longest_gap(self, until: float | None = None) -> tuple[float, float]:
        """(gap seconds, start of the gap) between successive acknowledgements, and from
        the last one to `until` (a producer that stopped being acknowledged at all)."""
        times = sorted(self.ack_times)
        if until is not None and times:
            times.append(until)
        best, start = 0.0, 0.0
        for before, after in zip(times, times[1:], strict=False):
            if after - before > best:
                best, start = after - before, before
        return best, start

    def gaps(self) -> list[float]:
        times = sorted(self.ack_times)
        return [after - before for before, after in zip(times, times[1:], strict=False)]


@dataclass
class KafkaAck:
    """A record a Kafka producer was told is stored, and where."""

    client: str
    key: str
    seq: int
    topic: str
    partition: int
    offset: int
    at: float


@dataclass
class KafkaFailure:
    """A record whose delivery failed (or never resolved): it may be absent, or a ghost."""

    client: str
    key: str
    seq: int
    topic: str
    error: str
    at: float


@dataclass
class QueueLedger:
    """One AMQP queue's publisher side (confirmed, nacked, in doubt) and consumer side."""

    queue: str
    publisher: str
    confirmed: dict[int, float] = field(default_factory=dict)  # seq -> confirm time
    nacked: dict[int, float] = field(default_factory=dict)
    in_doubt: dict[int, float] = field(default_factory=dict)  # connection lost unconfirmed
    published: int = 0
    # (seq, redelivered, time, source): consumed during the run, then drained at the end
    received: list[tuple[int, bool, float, str]] = field(default_factory=list)
    foreign: int = 0
