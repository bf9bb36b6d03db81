"""How long a thread may hold the interpreter while the event loop's thread waits for it.

Work that would hold the event loop for long runs in worker threads: decoding a request of
thousands of entries (handlers/kafka/requests.py), encoding its answer. They hold the GIL
while they run Python code, and the interpreter asks such a thread to let go only after
the switch interval (5 ms by default). uvloop releases the GIL while it polls and takes it
back for each callback it runs, so while a worker computes, the loop thread waits up to an
interval for every socket that is ready: a turn of the loop with dozens of ready sockets
took hundreds of ms. py-spy and the scheduler's counters (/proc/PID/task/TID/schedstat)
showed it during issue 33's hostile-clients test: during a 0.4 s wait of the well-behaved
clients, the loop thread ran 10-26% of the time and waited for a CPU 6-13%; for the rest
it waited for the GIL, held by the thread decoding or encoding a 99,999-topic Metadata.
An echo server on uvloop with 30 busy connections and a thread computing in Python half
the time (2 shared cores, load 9-10): the 99th percentile of an echo 41-59 ms with 5 ms,
27 ms with 1 ms, no better with 0.5 ms (docs/security.md, "Threat model").
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL_SECONDS = 0.001


def share_the_interpreter() -> None:
    """Make a thread running Python code give the GIL up every SWITCH_INTERVAL_SECONDS
    to a thread that waits for it."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
