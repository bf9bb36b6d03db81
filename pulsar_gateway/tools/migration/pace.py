"""An upper bound on how fast a migration copies, over all its partitions together.

A copy reads the old cluster as fast as it answers: on a cluster still serving its
applications that can be too much, the reason Kafka's own reassignment tool takes a
throttle. `migrate --max-records-per-second N` keeps the whole copy at or below N records
a second: each batch waits, before it is written, until the records before it have had
their share of time. 0 means no bound.
"""

from __future__ import annotations

import asyncio
import time


class Pace:
    """At most `rate` records a second, shared by every partition's copy (0: no bound)."""

    def __init__(self, rate: float) -> None:
        if rate < 0:
            raise ValueError(f"a rate of {rate} records a second")
        self.rate = rate
        self._free_at = 0.0  # monotonic time from which the next records may go

    async def take(self, records: int) -> None:
        """Wait until `records` more may be written without going over the rate."""
        if not self.rate:
            return
        now = time.monotonic()
        start = max(now, self._free_at)
        self._free_at = start + records / self.rate
        if start > now:
            await asyncio.sleep(start - now)
