"""Every thread of the gateway runs with a 1 ns timer slack.

pulsar-client's zero-timeout reads overrun by the calling thread's timer slack (50 µs by
default), which held the event loop about 80 µs per empty read (gateway/timer_slack.py).
The slack is set before any thread starts, so pulsar-client's threads inherit it too.
"""

from __future__ import annotations

from pathlib import Path

from harness.gateway_process import GatewayProcess
from pulsar_gateway.gateway.timer_slack import TIMER_SLACK_NS


def test_every_gateway_thread_has_the_tight_timer_slack(gateway: GatewayProcess) -> None:
    assert gateway.process is not None
    tasks = sorted(Path(f"/proc/{gateway.process.pid}/task").iterdir())
    # the event loop and pulsar-client's threads at least (its I/O and listener threads)
    assert len(tasks) > 3
    # only /proc/<tid> shows a thread's slack (/proc/<pid>/task/<tid> has no such file)
    slacks = {t.name: int(Path(f"/proc/{t.name}/timerslack_ns").read_text()) for t in tasks}
    assert set(slacks.values()) == {TIMER_SLACK_NS}, slacks
