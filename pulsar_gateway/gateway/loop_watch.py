"""A thread that notices the event loop not running, and logs where it is stuck.

Everything a gateway process does runs on one event loop: a call that blocks it (a
synchronous client call waiting out its operation timeout, a runaway computation) stops
every connection, tailer and cluster heartbeat at once, and nothing on the loop can say
so. A restarted cluster worker once showed nothing for 53 s after joining, not even a
heartbeat warning, then failed its start-up (docs/cluster.md, "Limits").
The loop touches a timestamp every `interval` seconds; this thread logs the loop
thread's stack when the timestamp is older than `threshold`, once per stall, and a line
when the loop runs again.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger("gateway.loop")


class LoopWatch:
    def __init__(self, threshold: float = 5.0, interval: float = 0.5) -> None:
        self.threshold = threshold
        self.interval = interval
        self.stalls = 0  # stalls reported so far
        self._last = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._timer: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Watch the running loop (call from it)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._touch()
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None:
            self._thread.join(2 * self.interval + 1)

    def _touch(self) -> None:
        self._last = time.monotonic()
        assert self._loop is not None
        self._timer = self._loop.call_later(self.interval, self._touch)

    def _watch(self) -> None:
        stalled_since: float | None = None
        while not self._stop.wait(self.interval):
            last = self._last
            age = time.monotonic() - last
            if age > self.threshold and stalled_since != last:
                stalled_since = last
                self.stalls += 1
                frame = sys._current_frames().get(self._loop_thread)
                where = "".join(traceback.format_stack(frame)) if frame else "(no frame)\n"
                log.warning(
                    "event loop blocked for %.1f s (nothing runs meanwhile: connections, "
                    "heartbeats, tailers); its thread is at:\n%s",
                    age,
                    where.rstrip(),
                )
            elif stalled_since is not None and last != stalled_since:
                log.warning("event loop runs again after %.1f s blocked", last - stalled_since)
                stalled_since = None
