"""The idle heap trimmer: trims only after the gateway has been idle a while, once,
then at most once a minute while idleness lasts; never with clients connected."""

from __future__ import annotations

from pulsar_gateway.gateway.memory import HeapTrimmer


def _trimmer(busy: list[bool]) -> tuple[HeapTrimmer, list[int]]:
    calls: list[int] = []
    trimmer = HeapTrimmer(lambda: busy[0], idle_seconds=30)
    trimmer._trim = lambda pad: calls.append(pad) or 1  # type: ignore[assignment]
    return trimmer, calls


def test_trims_once_idle_long_enough_then_at_most_once_a_minute() -> None:
    busy = [False]
    trimmer, calls = _trimmer(busy)
    assert not trimmer.tick(0) and not trimmer.tick(29)
    assert trimmer.tick(30) and calls == [0]
    assert not trimmer.tick(60)
    assert trimmer.tick(91) and trimmer.trims == 2


def test_never_trims_while_clients_are_connected_and_idleness_restarts() -> None:
    busy = [True]
    trimmer, calls = _trimmer(busy)
    assert not trimmer.tick(0) and not trimmer.tick(100)
    busy[0] = False
    assert not trimmer.tick(101) and not trimmer.tick(130)
    assert trimmer.tick(131) and calls == [0]


def test_the_real_malloc_trim_can_be_called() -> None:
    trimmer = HeapTrimmer(lambda: False, idle_seconds=0)
    trimmer.tick(0)  # glibc here; elsewhere a no-op
