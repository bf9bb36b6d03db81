"""The heap trimmer's schedule: soon after the gateway goes idle, then at most once a minute
while idleness lasts; with clients connected, at most once every `busy_seconds` (their
connections may never all close, and a read-back's freed peak would stay for good)."""

from __future__ import annotations

import gc
import weakref

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.memory import HeapTrimmer


def _trimmer(busy: list[bool]) -> tuple[HeapTrimmer, list[int]]:
    calls: list[int] = []
    trimmer = HeapTrimmer(lambda: busy[0], idle_seconds=30, busy_seconds=60, resident=lambda: 0)
    trimmer._trim = lambda pad: calls.append(pad) or 1  # type: ignore[assignment]
    return trimmer, calls


def test_trims_once_idle_long_enough_then_at_most_once_a_minute() -> None:
    busy = [False]
    trimmer, _ = _trimmer(busy)
    assert not trimmer.due(0) and not trimmer.due(29)
    assert trimmer.due(30)
    assert not trimmer.due(60)
    assert trimmer.due(91)


def test_with_clients_connected_trims_at_most_once_per_busy_interval() -> None:
    busy = [True]
    trimmer, _ = _trimmer(busy)
    assert trimmer.due(0)  # a gateway may start busy and stay so
    assert not trimmer.due(10) and not trimmer.due(59)
    assert trimmer.due(60)
    assert not trimmer.due(100)


def test_going_idle_right_after_a_busy_trim_still_trims_once_idle() -> None:
    """What the clients' leaving freed is returned after the idle wait, not a minute after
    the last busy trim."""
    busy = [True]
    trimmer, _ = _trimmer(busy)
    assert trimmer.due(0)
    busy[0] = False
    assert not trimmer.due(5) and not trimmer.due(34)
    assert trimmer.due(35)
    assert not trimmer.due(60)


def test_trim_calls_malloc_trim_and_counts() -> None:
    trimmer, calls = _trimmer([False])
    trimmer.trim()
    assert calls == [0] and trimmer.trims == 1


def test_the_real_malloc_trim_can_be_called() -> None:
    trimmer = HeapTrimmer(lambda: False, idle_seconds=0)
    if trimmer.due(0):  # glibc here; elsewhere never due
        trimmer.trim()
        assert trimmer.trims == 1


def _busy_trimmer(resident: list[int]) -> HeapTrimmer:
    """Clients always connected, a busy interval of 60 s, growth of 32 MiB trimmed 10 s
    after the last trim; the resident size is `resident[0]`."""
    return HeapTrimmer(
        lambda: True,
        busy_seconds=60,
        resident=lambda: resident[0],
        grown_bytes=32 << 20,
        grown_seconds=10,
    )


def test_while_busy_a_grown_heap_is_trimmed_sooner_than_the_busy_interval() -> None:
    """Clients that leave big freed buffers behind while others stay connected: once the
    resident memory has grown by `grown_bytes` since the last trim, the next trim comes
    `grown_seconds` after it, not `busy_seconds`; and a trim resets what counts as grown
    (memory really in use does not make it trim every time)."""
    resident = [100 << 20]
    calls: list[int] = []
    trimmer = _busy_trimmer(resident)
    trimmer._trim = lambda pad: calls.append(pad) or 1  # type: ignore[assignment]
    assert trimmer.due(0)
    trimmer.trim()
    resident[0] += 31 << 20
    assert not trimmer.due(20)  # not grown enough
    resident[0] += 2 << 20
    assert not trimmer.due(5)  # grown, but too soon after the last trim
    assert trimmer.due(20)
    trimmer.trim()  # nothing freed: 133 MiB is what is in use now
    assert not trimmer.due(29)
    assert trimmer.due(30)  # the follow-up of a trim for growth (see the next test)
    trimmer.trim()
    assert not trimmer.due(40) and not trimmer.due(89)  # one follow-up, not a series
    assert trimmer.due(90)  # the busy interval still applies


def test_a_trim_for_growth_is_followed_by_one_more() -> None:
    """A trim for growth comes at a peak, while what grew is in use (an attack under way);
    what its clients free when they leave stayed in the heap, and the next growth counted
    from the peak: one more trim follows `grown_seconds` later."""
    resident = [100 << 20]
    trimmer = _busy_trimmer(resident)
    trimmer._trim = lambda pad: 1  # type: ignore[assignment]
    assert trimmer.due(0)
    trimmer.trim()
    resident[0] += 40 << 20  # the attack
    assert trimmer.due(12)
    trimmer.trim()  # at its peak
    resident[0] -= 2 << 20  # the attackers leave: their small blocks freed, RSS barely moves
    assert not trimmer.due(21)
    assert trimmer.due(22)
    trimmer.trim()
    assert not trimmer.due(33) and not trimmer.due(81)


def test_an_idle_gateway_is_trimmed_within_seconds_by_default() -> None:
    """What attackers freed stayed resident for the 30 s the idle wait was: after the
    hostile-clients test the gateway had no client left, and RSS stayed 17-31% up."""
    trimmer = HeapTrimmer(lambda: False, resident=lambda: 0)
    trimmer._trim = lambda pad: 1  # type: ignore[assignment]
    assert not trimmer.due(0) and not trimmer.due(4.9)
    assert trimmer.due(5.0)


def test_an_idle_trim_is_marked_and_collects_cycles_first() -> None:
    """What ended connections leave in reference cycles is freed before an idle trim."""
    busy = [True]
    trimmer, _ = _trimmer(busy)
    assert trimmer.due(0) and not trimmer.idle
    busy[0] = False
    assert not trimmer.due(30)  # idle from now
    assert trimmer.due(60) and trimmer.idle

    class Node:
        other: Node

    gc.disable()
    try:
        node = Node()
        node.other = node
        freed = weakref.ref(node)
        del node
        assert freed() is not None  # only a collection frees a cycle
        busy[0] = True
        trimmer.before_trim()  # the trim found due was for idleness: collects
        assert freed() is None
    finally:
        gc.enable()
    idle = metrics.HEAP_TRIMS.labels(when="idle")  # the hostile-clients test waits on it
    before = idle._value.get()
    trimmer.trim()
    assert idle._value.get() == before + 1
