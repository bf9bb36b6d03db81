"""The heap trimmer's schedule: soon after the gateway goes idle, then at most once a minute
while idleness lasts; with clients connected, at most once every `busy_seconds` (their
connections may never all close, and a read-back's freed peak would stay for good)."""

from __future__ import annotations

from pulsar_gateway.gateway.memory import HeapTrimmer


def _trimmer(busy: list[bool]) -> tuple[HeapTrimmer, list[int]]:
    calls: list[int] = []
    trimmer = HeapTrimmer(lambda: busy[0], idle_seconds=30, busy_seconds=60)
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
