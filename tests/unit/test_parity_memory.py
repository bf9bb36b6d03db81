"""The parity job's memory report finds every process below the Spark JVM."""

from __future__ import annotations

import os
import subprocess
import threading

from pulsar_gateway.tools.parity.job import _descendants, _rss_mib


def test_children_started_by_any_thread_are_found() -> None:
    started: list[subprocess.Popen[bytes]] = []
    spawned, done = threading.Event(), threading.Event()

    def spawn() -> None:
        # the JVM forks Python workers from a live worker thread, not its main one
        started.append(subprocess.Popen(["sleep", "30"]))
        spawned.set()
        done.wait(30)

    thread = threading.Thread(target=spawn)
    thread.start()
    spawned.wait(10)
    child = started[0]
    try:
        assert child.pid in _descendants(os.getpid())
        assert _rss_mib(child.pid) > 0
    finally:
        done.set()
        thread.join()
        child.kill()
        child.wait()
