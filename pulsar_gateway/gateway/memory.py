"""Giving freed memory back to the system once the gateway goes quiet.

A busy gateway frees most of what it allocated (tail caches, batches, queue
buffers) when its clients leave, but glibc keeps freed chunks in its arenas
(pulsar-client's C++ threads allocate in arenas of their own) instead of
returning them. `malloc_trim(0)` hands every whole free page of every arena
back. It walks the heaps under their locks, so it runs only when the gateway
has been idle.

Trimming cannot reach Python's own small-object allocator (pymalloc): it takes
1 MiB arenas from the system and returns one only when every object in it is
gone, and a busy period leaves each of its arenas pinned by a few long-lived
objects (a dict entry, a cached name) allocated among the transient ones. In
issue 10's rounds of load (60,000 Kafka records and 3,000 AMQP messages each)
pymalloc grew from 24 to 55 arenas holding the same 24 MB of live objects, and
that, not live data, was most of what the gateway kept after its clients left.
So `pulsar-gateway run` re-executes itself once with `PYTHONMALLOC=malloc`
(`use_c_allocator`): small objects then come from glibc, whose free chunks
coalesce and whose whole free pages the trim returns (docs/architecture.md,
"Memory"). A `PYTHONMALLOC` the user set is left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger("gateway.memory")
ALLOCATOR_ENV = "PYTHONMALLOC"


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


def c_allocator_command(
    environ: Mapping[str, str], orig_argv: Sequence[str], executable: str, has_trim: bool
) -> tuple[list[str], dict[str, str]] | None:
    """The command line and environment that run this same command again with Python's
    small objects on the C allocator, or None: when the user chose an allocator
    (PYTHONMALLOC set, even to pymalloc), or when the C library cannot trim (musl, macOS:
    there pymalloc, which does return empty arenas, is the better of the two)."""
    if ALLOCATOR_ENV in environ or not has_trim or not executable or not orig_argv:
        return None
    return [executable, *orig_argv[1:]], {**environ, ALLOCATOR_ENV: "malloc"}


def use_c_allocator() -> None:
    """Re-execute the process (same pid, same arguments, same descriptors) on the C
    allocator unless it already is or should not be (`c_allocator_command`); returns
    only when nothing was done. Call it before any thread or connection exists."""
    found = c_allocator_command(os.environ, sys.orig_argv, sys.executable, _load_trim() is not None)
    if found is None:
        return
    argv, environ = found
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, environ)
