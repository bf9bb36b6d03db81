"""migrate --max-records-per-second: the copy never goes over the rate, and 0 is no bound."""

from __future__ import annotations

import asyncio
import time

import pytest

from pulsar_gateway.cli import _parser
from pulsar_gateway.tools.migration.pace import Pace


def test_batches_wait_for_their_share_of_time_over_all_partitions() -> None:
    async def copy() -> float:
        pace = Pace(2000)  # records a second
        started = time.monotonic()
        # two partitions' copies sharing the bound: 6 x 200 records = 1,200 records
        await asyncio.gather(*(pace.take(200) for _ in range(6)))
        await pace.take(1)  # the next record waits until the 1,200 had their 0.6 s
        return time.monotonic() - started

    # a lower bound only: a loaded machine makes the copy slower, never faster
    assert asyncio.run(copy()) >= 0.59


def test_no_bound_waits_for_nothing() -> None:
    async def copy() -> None:
        pace = Pace(0)
        for _ in range(1000):
            await pace.take(1_000_000)

    # any wait at all would be for seconds on end: the deadline catches it
    asyncio.run(asyncio.wait_for(copy(), 5))


@pytest.mark.parametrize("text", ["-1", "nan", "fast"])
def test_a_wrong_rate_stops_the_command_naming_the_flag(text, capsys) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["migrate", "--source", "s:9092", "--max-records-per-second", text])
    assert "--max-records-per-second" in capsys.readouterr().err


def test_the_rate_reaches_the_plan() -> None:
    args = _parser().parse_args(
        ["migrate", "--source", "s:9092", "--max-records-per-second", "2500"]
    )
    assert args.max_records_per_second == 2500.0
