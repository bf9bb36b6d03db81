"""Giving freed heap back to the system once the gateway goes quiet.

A busy gateway frees most of what it allocated (tail caches, batches, queue
buffers) when its clients leave, but glibc keeps freed chunks in its arenas
(pulsar-client's C++ threads allocate in arenas of their own) instead of
returning them. `malloc_trim(0)` hands every whole free page of every arena
back. It walks the heaps under their locks, so it runs only when the gateway
has been idle.

What it cannot reach is Python's small-object allocator (pymalloc): it takes
1 MiB arenas from the system and returns one only when every object in it is
gone, and a busy period leaves most of its arenas pinned by a few long-lived
objects allocated among the transient ones. In rounds of the same load
(`bench/soak_rounds.py`) pymalloc went from 24 to 55 to 61 arenas holding the
same 24 MB of live objects; that, and glibc's main heap fragmented the same
way, is most of what the gateway keeps after its clients leave. It settles:
the growth shrinks round after round instead of repeating. `PYTHONMALLOC=malloc`
puts small objects on glibc, where the trim does reach them (about 10 MiB less
kept after two rounds), but it cost about 20% more gateway CPU per message in
the same run, so it is the user's choice, not the default (docs/architecture.md,
"Memory").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gateway.memory")


def _load_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None on a C library without it (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc: Any = ctypes.CDLL(name)
        trim: Any = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class HeapTrimmer:
    """Trims the C heap after the gateway has been idle for `idle_seconds` (no client
    connections), once per idle period and again whenever more was freed since."""

    def __init__(self, busy: Callable[[], bool], idle_seconds: float = 30.0) -> None:
        self.busy = busy
        self.idle_seconds = idle_seconds
        self._trim = _load_trim()
        self._idle_since: float | None = None
        self._last_trim: float | None = None
        self.trims = 0

    def tick(self, now: float) -> bool:
        """Called now and then (the idle sweep); True when it trimmed."""
        if self._trim is None or self.busy():
            self._idle_since = None
            return False
        if self._idle_since is None:
            self._idle_since = now
        idle_for = now - self._idle_since
        if idle_for < self.idle_seconds:
            return False
        # once the idle period began, and then at most once a minute: closing idle
        # partitions and readers frees more over the next minutes
        if self._last_trim is not None and now - self._last_trim < 60.0:
            return False
        self._last_trim = now
        self._trim(0)
        self.trims += 1
        log.debug("idle for %.0f s: free heap returned to the system", idle_for)
        return True
