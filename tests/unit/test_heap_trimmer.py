"""The idle heap trimmer: trims only after the gateway has been idle a while, once,
then at most once a minute while idleness lasts; never with clients connected."""

from __future__ import annotations

from pulsar_gateway.gateway.memory import HeapTrimmer, c_allocator_command


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


def test_the_c_allocator_command_is_the_same_command_with_pythonmalloc() -> None:
    argv = ["/venv/bin/python", "-m", "pulsar_gateway.cli", "run", "--kafka-port", "9"]
    found = c_allocator_command({"HOME": "/h"}, argv, "/venv/bin/python3", has_trim=True)
    assert found == (
        ["/venv/bin/python3", "-m", "pulsar_gateway.cli", "run", "--kafka-port", "9"],
        {"HOME": "/h", "PYTHONMALLOC": "malloc"},
    )


def test_no_re_execution_when_chosen_already_or_without_trim() -> None:
    argv = ["python", "-m", "pulsar_gateway.cli", "run"]
    assert c_allocator_command({"PYTHONMALLOC": "malloc"}, argv, "python", True) is None
    assert c_allocator_command({"PYTHONMALLOC": "pymalloc"}, argv, "python", True) is None
    assert c_allocator_command({}, argv, "python", has_trim=False) is None
    assert c_allocator_command({}, argv, "", has_trim=True) is None
