"""The metadata-store implementation of the share state port (storage/kafka/share_states.py):
what it writes reads back, the group index lists share groups without a scan, deleting a
group removes every key of it, and the mirror hears each partition's settled start. The
store's table runs in memory here (its Pulsar log is the integration tests' business:
tests/integration/test_share_groups.py kills a gateway and reads the state back)."""

from __future__ import annotations

import asyncio
from typing import Any

from pulsar_gateway.gateway.metadata_store import GONE, MetadataStore
from pulsar_gateway.handlers.kafka.port import ShareRun, ShareState
from pulsar_gateway.storage.kafka.share_states import ShareStateStore, state_from, state_record


class TableOnly(MetadataStore):
    """The metadata store's table and folder index, without its Pulsar log."""

    def __init__(self) -> None:
        super().__init__(None, "ns")  # type: ignore[arg-type] - the table only

    async def _write(self, changes: dict[str, Any]) -> None:
        for key, value in changes.items():
            if value is GONE:
                self._unset(key)
            else:
                self._set(key, value)


def test_state_round_trip_group_index_and_delete() -> None:
    async def scenario() -> None:
        heard: list[tuple[str, str, int]] = []
        store = ShareStateStore(TableOnly(), lambda *args: heard.append(args))
        state = ShareState(3, 9, (ShareRun(3, 5, 1, 2), ShareRun(6, 8, 2, 1)))
        await store.save("a/b", "persistent://public/default/t-partition-0", state)
        await store.save("a/b", "persistent://public/default/t-partition-1", ShareState(0, 0))
        await store.save("other", "persistent://public/default/t-partition-0", state)
        assert store.load("a/b", "persistent://public/default/t-partition-0") == state
        assert store.load("a/b", "persistent://public/default/nope-partition-0") is None
        assert store.groups() == ["a/b", "other"]
        assert heard[0] == ("persistent://public/default/t-partition-0", "a/b", 3)
        await store.delete_group("a/b")
        assert store.groups() == ["other"]
        assert store.load("a/b", "persistent://public/default/t-partition-1") is None

    asyncio.run(scenario())


def test_unreadable_state_starts_afresh() -> None:
    assert state_from({"start": 1}) is None
    assert state_from({"start": 1, "end": 2, "runs": [["x"]]}) is None
    assert state_from("junk") is None


def test_a_run_keeps_the_gateways_own_returns_and_four_numbers_stay_readable() -> None:
    """A returning record's count of the broker's redeliveries that were the gateway's own
    (broker dispatch) survives a restart; a run without any is written, and read, as four
    numbers, as before."""
    state = ShareState(0, 4, (ShareRun(0, 1, 6, 3, 2), ShareRun(2, 3, 1, 1)))
    record = state_record(state)
    assert record["runs"] == [[0, 1, 6, 3, 2], [2, 3, 1, 1]]
    assert state_from(record) == state
    assert state_from({"start": 0, "end": 2, "runs": [[0, 1, 6, 3]]}) == ShareState(
        0, 2, (ShareRun(0, 1, 6, 3, 0),)
    )
