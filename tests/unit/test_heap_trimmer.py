"""The heap trimmer's schedule: soon after the gateway goes idle, then at most once a minute
while idleness lasts; with clients connected, at most once every `busy_seconds` (their
connections may never all close, and a read-back's freed peak would stay for good)."""

from __future__ import annotations

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


def test_while_busy_a_grown_heap_is_trimmed_sooner_than_the_busy_interval() -> None:
    """Clients that leave big freed buffers behind while others stay connected: once the
    resident memory has grown by `grown_bytes` since the last trim, the next trim comes
    `grown_seconds` after it, not `busy_seconds`; and a trim resets what counts as grown
    (memory really in use does not make it trim every time)."""
    resident = [100 << 20]
    calls: list[int] = []
    trimmer = HeapTrimmer(
        lambda: True,
        busy_seconds=60,
        resident=lambda: resident[0],
        grown_bytes=32 << 20,
        grown_seconds=10,
    )
    trimmer._trim = lambda pad: calls.append(pad) or 1  # type: ignore[assignment]
    assert trimmer.due(0)
    trimmer.trim()
    resident[0] += 31 << 20
    assert not trimmer.due(20)  # not grown enough
    resident[0] += 2 << 20
    assert not trimmer.due(5)  # grown, but too soon after the last trim
    assert trimmer.due(20)
    trimmer.trim()  # nothing freed: 133 MiB is what is in use now
    assert not trimmer.due(40) and not trimmer.due(79)
    assert trimmer.due(80)  # the busy interval still applies


def test_while_busy_a_fall_from_the_peak_is_trimmed_sooner_than_the_busy_interval() -> None:
    """A trim at an attack's peak made the peak the level to grow from, and what the
    attackers' leaving freed stayed in the heap: a fall of `fallen_bytes` from the highest
    resident memory since the last trim (their big buffers unmapped) brings the next trim
    `grown_seconds` after the last, not `busy_seconds`."""
    resident = [100 << 20]
    calls: list[int] = []
    trimmer = HeapTrimmer(
        lambda: True,
        busy_seconds=60,
        resident=lambda: resident[0],
        grown_bytes=32 << 20,
        grown_seconds=10,
        fallen_bytes=16 << 20,
    )
    trimmer._trim = lambda pad: calls.append(pad) or 1  # type: ignore[assignment]
    assert trimmer.due(0)
    resident[0] += 40 << 20  # the attack
    trimmer.trim()  # at its peak: 140 MiB is where growth now counts from
    resident[0] -= 15 << 20  # the attackers leave, their buffers unmapped
    assert not trimmer.due(20)  # not fallen enough
    resident[0] -= 2 << 20
    assert not trimmer.due(5)  # fallen, but too soon after the last trim
    assert trimmer.due(20)
    trimmer.trim()
    assert not trimmer.due(40) and not trimmer.due(79)  # a steady level trims no more
    assert trimmer.due(80)
