"""The partition logs' tail caches share one byte budget (`kafka.tail_cache_bytes`): past it,
the least recently used partitions give up their oldest cached messages; a closed partition
gives its share back. Before, each open partition could hold 64 MiB with no cap at all."""

from __future__ import annotations

import asyncio
from typing import Any

from harness.tail_sizes import held
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from pulsar_gateway.storage.kafka.topics import TailCache


class _Metadata:
    async def put(self, key: str, value: Any) -> None:
        pass


def _messages(first: int, count: int) -> list[StoredMessage]:
    # 100-byte payloads, EACH bytes apiece in a tail
    return [
        StoredMessage((1, i, -1), b"m" * 100, "", {}, 0, 1) for i in range(first, first + count)
    ]


EACH = held(_messages(0, 1)[0])


def test_the_least_recently_used_tails_shrink_to_stay_under_the_shared_limit() -> None:
    async def scenario() -> None:
        logs: list[PartitionLog] = []
        limit = EACH * 86 // 10  # 8.6 messages; eviction goes down to 90% of it
        cache = TailCache(limit, lambda: logs)
        for name in ("a", "b", "c"):
            logs.append(
                PartitionLog(None, _Metadata(), name, tail_bytes=EACH * 7, tail_budget=cache)  # type: ignore[arg-type]
            )
        a, b, c = logs
        a._index(_messages(0, 5))
        a.last_used, b.last_used, c.last_used = 1.0, 2.0, 3.0
        assert cache.used == 5 * EACH and a.tail_start == 0
        b._index(_messages(100, 5))  # 10 in all: over, down to 90% from the oldest user
        assert cache.used <= limit - limit // 10
        assert a.tail_start == 3 and b.tail_start == 0  # a lost its three oldest
        assert cache.used == sum(log._tail.size for log in logs)
        c._index(_messages(200, 6))  # 6 more: over again; a empties first, then b shrinks
        assert cache.used <= limit - limit // 10 and a.tail_start == a.next_offset == 5
        assert c.tail_start == 0
        assert cache.used == sum(log._tail.size for log in logs)
        await c.close()
        assert cache.used == sum(log._tail.size for log in (a, b))

    asyncio.run(scenario())


def test_each_partition_still_keeps_to_its_own_limit() -> None:
    async def scenario() -> None:
        cache = TailCache(1 << 30, list)
        limit = EACH * 45 // 10  # room for four and a half messages
        log = PartitionLog(None, _Metadata(), "p", tail_bytes=limit, tail_budget=cache)  # type: ignore[arg-type]
        log._index(_messages(0, 10))
        assert log._tail.size <= limit and cache.used == log._tail.size
        assert log.tail_start == 6

    asyncio.run(scenario())


def test_by_default_a_lag_of_100k_small_records_is_served_from_memory() -> None:
    """With the default settings a partition keeps its newest 100,000 records of 100 bytes
    (about 17 MB as held) for fetches at the tail: a consumer that far behind reads memory,
    not Pulsar. At the old 20,000-record cap a consumer a third of a second behind a busy
    partition fell to history reads, several times slower, and could not catch up."""
    kafka = KafkaSection()

    async def scenario() -> None:
        cache = TailCache(kafka.tail_cache_bytes, list)
        log = PartitionLog(
            None,  # type: ignore[arg-type]
            _Metadata(),  # type: ignore[arg-type]
            "p",
            index_interval=1 << 40,
            tail_records=kafka.tail_cache_records,
            tail_bytes=kafka.tail_cache_partition_bytes,
            tail_budget=cache,
        )
        log._index(_messages(0, 100_000))
        assert log.next_offset == 100_000 and log.tail_start == 0
        await log.close()

    asyncio.run(scenario())
