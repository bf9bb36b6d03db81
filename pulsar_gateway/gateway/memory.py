"""Giving freed heap back to the system.

A busy gateway frees most of what it allocated (tail caches, batches, queue
buffers, the messages pulsar-client builds for a read-back) once the work is
done, but glibc keeps freed chunks in its arenas (pulsar-client's C++ threads
allocate in arenas of their own) instead of returning them. `malloc_trim(0)`
hands every whole free page of every arena back. It walks the heaps under their
locks, so it runs rarely: soon after the gateway goes idle, and otherwise once a
minute, in a worker thread.

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
import gc
import logging
import os
from collections.abc import Callable
from typing import Any

from pulsar_gateway.gateway import metrics

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


def resident_bytes() -> int:
    """The process's resident set size (Linux's /proc/self/statm), 0 where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def set_mmap_threshold(size: int) -> bool:
    """Blocks of `size` bytes or more are mapped on their own and unmapped when freed
    (glibc's mallopt M_MMAP_THRESHOLD); False where there is no such call. Setting it also
    stops glibc from raising it to the largest mapped block freed so far, which it does
    by default: after one 4 MiB answer was freed, every buffer under 4 MiB came from the
    main heap, and small blocks allocated among them kept the heap from shrinking. In the
    hostile-clients test with SASL, the heap grew 22 MiB over the attack and the trim gave
    back 7; RSS ended 26-28% up, and 3% with 512 KiB set here."""
    name = ctypes.util.find_library("c")
    if name is None or size <= 0:
        return False
    try:
        mallopt: Any = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, size))


class HeapTrimmer:
    """Decides when to trim the C heap: once the gateway has been idle (no client
    connections) for `idle_seconds` (5 s: with 30 s, the memory attackers freed stayed
    resident for half a minute after they left, and nobody waits on an idle gateway's
    trim), then at most once a minute while idleness lasts; and
    with clients connected at most once every `busy_seconds`, since a gateway whose clients
    never all leave would otherwise keep the peak of its busiest minute (a read-back: 440
    MiB, 160 after a trim) for good. A trim of such a heap took 7-32 ms here, so `trim`
    is meant for a worker thread (ctypes lets go of the GIL around the call).

    Also while busy: once the resident memory (`resident`) has grown by `grown_bytes`
    since the last trim, a trim after `grown_seconds`. Clients that never read their
    answers and left (issue 33's hostile-clients test) left 60-70 MiB of freed buffers in
    the heap with the well-behaved clients still connected: 23 MiB of it went back at the
    next trim, which came up to a minute later.

    A trim for growth is followed by one more `grown_seconds` later: it comes at a peak,
    while what grew is still in use, and what is freed after it stays in the heap (the
    next growth counts from the peak). In the hostile-clients test without SASL, a trim
    came 2 s before the attackers left; 10-15 s later the main heap still held 8 MiB of
    free pages (a trim by hand then: RSS +18% to +12%, and +11% to +5% in another run).
    A rule on the resident memory falling from its peak missed it: freed small blocks do
    not lower it."""

    def __init__(
        self,
        busy: Callable[[], bool],
        idle_seconds: float = 5.0,
        busy_seconds: float = 60.0,
        resident: Callable[[], int] = resident_bytes,
        grown_bytes: int = 32 << 20,
        grown_seconds: float = 10.0,
    ) -> None:
        self.busy = busy
        self.idle_seconds = idle_seconds
        self.busy_seconds = busy_seconds
        self.resident = resident
        self.grown_bytes = grown_bytes
        self.grown_seconds = grown_seconds
        self._trim = _load_trim()
        self._idle_since: float | None = None
        self._last_trim: float | None = None
        self._resident_after = resident()  # after the last trim (or at start)
        self._follow_up = False  # the last trim was for growth: one more is owed
        self.idle = False  # the trim last found due is for idleness
        self.trims = 0

    def due(self, now: float) -> bool:
        """Called now and then (every few seconds): True when a trim is due now, which it
        then counts as done."""
        if self._trim is None:
            return False
        last = self._last_trim
        for_growth = False  # then one more trim is owed, grown_seconds later
        if self.busy():
            self._idle_since = None
            if last is not None and now - last < self.busy_seconds:
                if now - last < self.grown_seconds:
                    return False
                if not self._follow_up:
                    for_growth = self._grown()
                    if not for_growth:
                        return False
        else:
            if self._idle_since is None:
                self._idle_since = now
            if now - self._idle_since < self.idle_seconds:
                return False
            # once the idle period began, and then at most once a minute: closing idle
            # partitions and readers frees more over the next minutes
            if last is not None and last >= self._idle_since and now - last < 60.0:
                return False
        self._last_trim = now
        self._follow_up = for_growth
        self.idle = not self.busy()
        return True

    def _grown(self) -> bool:
        """The resident memory grew by `grown_bytes` since the last trim."""
        return self.resident() - self._resident_after >= self.grown_bytes

    def before_trim(self) -> None:
        """On the event loop, before `trim` goes to its thread: `collect` if the trim is
        for idleness (a collection in the worker thread would run finalizers of asyncio
        objects off the loop)."""
        if self.idle:
            self.collect()

    def collect(self) -> None:
        """Before an idle trim, on the event loop (nobody is waiting on it then): a full
        collection of the cyclic garbage. Connections that ended leave cycles (transport,
        protocol, handler, their buffers, an exception's traceback) that only a collection
        of the oldest generation frees, and that comes rarely: until then their objects
        pin pymalloc's arenas and their buffers the C heap, out of the trim's reach. In the
        hostile-clients test with SASL, RSS after the idle trim ended +15-17% in four runs
        of seven without it (-1% to 0% in the others), -4% to -2% in nine runs with it."""
        gc.collect()

    def trim(self) -> None:
        """Hand every whole free page of every glibc arena back to the system."""
        if self._trim is not None:
            self._trim(0)
            self.trims += 1
            metrics.HEAP_TRIMS.labels(when="idle" if self.idle else "busy").inc()
            self._resident_after = self.resident()
            log.debug("free heap returned to the system")
