"""`pulsar-gateway run` makes worker threads give up the GIL every millisecond before its
event loop starts (gateway/thread_switching.py): with the interpreter's default 5 ms, the
loop thread waited for the GIL up to 43% of a well-behaved client's worst wait in the
hostile-clients test while a worker decoded or encoded a 99,999-topic Metadata."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import pytest
import uvloop

from pulsar_gateway import cli
from pulsar_gateway.gateway.full_collections import THRESHOLDS
from pulsar_gateway.gateway.thread_switching import SWITCH_INTERVAL_SECONDS


def test_the_loop_starts_with_the_short_switch_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float] = []
    thresholds: list[tuple[int, int, int]] = []

    def runner(main: Any) -> int:  # stands in for uvloop.run: the loop would start here
        main.close()
        seen.append(sys.getswitchinterval())
        thresholds.append(gc.get_threshold())
        return 0

    def exit_now(code: int) -> None:
        raise SystemExit(code)

    default = sys.getswitchinterval()
    default_thresholds = gc.get_threshold()
    monkeypatch.setattr(uvloop, "run", runner)
    monkeypatch.setattr(cli, "_exit_now", exit_now)
    try:
        with pytest.raises(SystemExit):
            cli.main(["run", "--data-dir", str(tmp_path)])
    finally:
        sys.setswitchinterval(default)
        gc.set_threshold(*default_thresholds)
    assert seen == [SWITCH_INTERVAL_SECONDS] and SWITCH_INTERVAL_SECONDS < default
    assert thresholds == [THRESHOLDS]  # full collections made rarer (full_collections.py)
