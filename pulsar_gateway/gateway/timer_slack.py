"""A tight timer slack for the gateway's threads (Linux).

pulsar-client's non-blocking reads (`read_next(0)`, `receive(0)`, a `read_next_async` that
finds nothing queued) still wait on a condition variable with a zero timeout, and the
kernel lets such a timed wait run over by the calling thread's timer slack: 50 µs by
default. An empty read held the event loop for about 80 µs of wall time, once per drain of
every reader, which a producer waiting for its offset waits out too. With a slack of 1 ns
the same read takes about 22 µs. Threads inherit the slack of the thread that starts them,
so setting it first thing covers pulsar-client's threads too. docs/backend.md, "Empty reads
wait out the timer slack".
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger("gateway")

PR_SET_TIMERSLACK = 29  # <linux/prctl.h>
TIMER_SLACK_NS = 1


def tighten_timer_slack() -> bool:
    """Set this thread's timer slack to TIMER_SLACK_NS; False where that is not possible
    (not Linux, or the call failed), which only costs speed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done = libc.prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0) == 0
    except (OSError, AttributeError) as exc:
        log.debug("timer slack left as it was: %s", exc)
        return False
    if not done:
        log.debug("timer slack left as it was: errno %d", ctypes.get_errno())
    return done
