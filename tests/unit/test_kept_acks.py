"""storage/amqp/kept_acks.py: a queue's messages acknowledged inside batched entries go to
the metadata store within SAVE_SECONDS of a change and before a reader closes, the
entries acknowledged whole leave the record only after their ACKs were sent, and a load
gives back what was written. The store's table runs in memory here (its Pulsar log is the
integration tests' business: tests/integration/test_amqp_batched_queue_entries.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from harness.waiting import async_wait_until
from pulsar_gateway.gateway.backend.partial_acks import QueueAcks
from pulsar_gateway.gateway.metadata_store import GONE, MetadataStore
from pulsar_gateway.storage.amqp.kept_acks import (
    MAX_SAVE_SECONDS,
    SAVE_SECONDS,
    KeptAcks,
    save_delay,
)

KEY = "amqp/%2F/acked/q"


class TableOnly(MetadataStore):
    """The metadata store's table, without its Pulsar log; each write noted."""

    def __init__(self) -> None:
        super().__init__(None, "ns")  # type: ignore[arg-type] - the table only
        self.writes: list[Any] = []

    async def _write(self, changes: dict[str, Any]) -> None:
        for key, value in changes.items():
            self.writes.append(value)
            if value is GONE:
                self._unset(key)
            else:
                self._set(key, value)


def test_changes_are_written_soon_and_read_back() -> None:
    async def scenario() -> None:
        metadata = TableOnly()
        kept = KeptAcks(metadata, KEY, QueueAcks())
        kept.load()
        kept.acks.add(2, 7, 0, 10)
        kept.acks.add(2, 7, 5, 10)
        kept.changed()
        await async_wait_until(
            lambda: metadata.get(KEY) is not None, 20 * SAVE_SECONDS, message="the record"
        )
        assert metadata.get(KEY) == {"entries": [[2, 7, 10, "21"]]}
        again = KeptAcks(metadata, KEY, QueueAcks())
        again.load()
        assert again.acks.get(2, 7) == {0, 5}
        kept.close()
        again.close()

    asyncio.run(scenario())


def test_an_entry_done_leaves_the_record_once_its_ack_was_sent() -> None:
    async def scenario() -> None:
        metadata = TableOnly()
        kept = KeptAcks(metadata, KEY, QueueAcks())
        kept.load()
        order: list[str] = []
        kept.flushers.append(lambda: order.append("acks sent"))
        kept.acks.add(2, 7, 0, 2)
        await kept.flush()
        assert metadata.get(KEY) == {"entries": [[2, 7, 2, "1"]]}
        kept.acks.add(2, 7, 1, 2)  # done: acknowledged whole
        write = metadata._write

        async def noting(changes: dict[str, Any]) -> None:
            order.append("record written")
            await write(changes)

        metadata._write = noting  # type: ignore[method-assign]
        await kept.flush()
        assert order[-2:] == ["acks sent", "record written"]
        assert metadata.get(KEY) is None  # nothing acknowledged in part is left
        assert kept.acks.done(2, 7)  # kept in memory for an ACK lost on the way
        kept.close()

    asyncio.run(scenario())


def test_nothing_changed_writes_nothing() -> None:
    async def scenario() -> None:
        metadata = TableOnly()
        kept = KeptAcks(metadata, KEY, QueueAcks())
        kept.load()
        kept.changed()
        await kept.flush()
        assert metadata.writes == []
        kept.close()

    asyncio.run(scenario())


def test_a_large_record_is_written_less_often_within_a_bound() -> None:
    assert save_delay(0) == save_delay(100) == SAVE_SECONDS
    assert SAVE_SECONDS < save_delay(500) < MAX_SAVE_SECONDS
    assert save_delay(10_000) == MAX_SAVE_SECONDS
