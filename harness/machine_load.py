"""How much of a core each runnable process gets: what a latency bound must stretch by.

A bound on how long a client may wait beside a hostile or expensive one holds as written
whenever the machine has a core for each runnable process. On an oversubscribed machine
(CI beside other jobs, `make stress`, other work on a shared 2-core host) the gateway's loop
thread gets only a share of a core for the same work, so the same wait takes that many times
longer without anything being wrong in the gateway.
"""

from __future__ import annotations

import os


def load_per_core() -> float:
    """The 1-minute load average per core, at least 1: how many times slower than on an idle
    machine work on one thread may run now (1 whenever each runnable process has a core)."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
