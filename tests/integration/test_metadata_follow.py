"""The metadata store seen live by every cluster member (docs/cluster.md, "The metadata
store in a cluster"): two stores on one broker, each following the other's writes."""

from __future__ import annotations

import asyncio
import uuid

from harness.waiting import async_wait_until
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.storage.kafka.producer_ids import NEXT_ID_KEY, NODE_ID_SPACE, NodeProducerIds


def _namespace() -> str:
    return f"public/follow-{uuid.uuid4().hex[:8]}"


async def _store(backend: PulsarBackend, namespace: str, **options: int) -> MetadataStore:
    store = MetadataStore(backend, namespace, **options)
    await store.load(follow=True)
    return store


def test_two_stores_see_each_others_writes(broker_url: str) -> None:
    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        a = await _store(backend, namespace)
        b = await _store(backend, namespace)
        seen: list[tuple[str, object]] = []
        b.watch(lambda key, value: seen.append((key, value)))
        try:
            await a.put("topic/t1", {"partitions": 3})
            await a.put_many({"group/g/p0": 5, "group/g/p1": 7})  # one group-commit record
            await async_wait_until(
                lambda: b.get("group/g/p1") == 7, 10, message="b to see a's group commit"
            )
            assert b.get("topic/t1") == {"partitions": 3} and b.get("group/g/p0") == 5
            await b.put("group/g/p0", 6)
            await a.delete("topic/t1")
            await async_wait_until(
                lambda: a.get("group/g/p0") == 6 and b.get("topic/t1") is None,
                10,
                message="each to see the other's latest change",
            )
            assert ("topic/t1", None) in seen  # a delete reaches the watchers as None
            # a store's own records are not applied again when read back
            assert a.followed_records == 1 and b.followed_records == 4
            # catch_up: what is stored before it is applied when it returns
            await a.put("group/g/p1", 8)
            await b.catch_up()
            assert b.get("group/g/p1") == 8
        finally:
            for store in (a, b):
                await store.close()
            await backend.close()

    asyncio.run(scenario())


def test_a_later_own_write_wins_over_an_earlier_foreign_one(broker_url: str) -> None:
    """Both write one key at once: each ends with the value last in the log, as a replay."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        a = await _store(backend, namespace)
        b = await _store(backend, namespace)
        try:
            for round_ in range(20):
                await asyncio.gather(a.put("k", f"a{round_}"), b.put("k", f"b{round_}"))
            await a.catch_up()
            await b.catch_up()
            fresh = await _store(backend, namespace)
            assert a.get("k") == b.get("k") == fresh.get("k")
            await fresh.close()
        finally:
            for store in (a, b):
                await store.close()
            await backend.close()

    asyncio.run(scenario())


def test_a_snapshot_taken_while_another_member_writes_loses_nothing(broker_url: str) -> None:
    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        writer = await _store(backend, namespace)
        snapshotter = await _store(backend, namespace, snapshot_every=1_000_000)
        try:
            expected: dict[str, int] = {}

            async def write_many() -> None:
                for i in range(300):
                    key = f"kafka-group/g{i % 7}/offsets/t-{i}"
                    expected[key] = i
                    await writer.put(key, i)

            async def snapshot_often() -> None:
                for _ in range(5):
                    await snapshotter.snapshot()

            await asyncio.gather(write_many(), snapshot_often())
            # right after the last write: its record may not be applied there yet
            await snapshotter.snapshot()  # the newest snapshot: a load starts from it
            loaded = MetadataStore(backend, namespace)
            await loaded.load()
            missing = {k: v for k, v in expected.items() if loaded.get(k) != v}
            assert not missing, f"{len(missing)} keys lost, e.g. {list(missing)[:3]}"
            await loaded.close()
        finally:
            for store in (writer, snapshotter):
                await store.close()
            await backend.close()

    asyncio.run(scenario())


def test_producer_ids_of_two_members_never_meet(broker_url: str) -> None:
    """Each member counts on its own key (docs/cluster.md, "Producer ids"), above every id
    the single-gateway counter gave, and goes on after a restart without repeating."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        earlier = await _store(backend, namespace)
        await earlier.put(NEXT_ID_KEY, 5000)  # a single gateway handed out ids below 5000
        await earlier.close()
        a, b = await _store(backend, namespace), await _store(backend, namespace)
        try:
            ids_a = [await NodeProducerIds(a, 1).next_id() for _ in range(20)]
            ids_b = [await NodeProducerIds(b, 2).next_id() for _ in range(20)]
            restarted = await _store(backend, namespace)
            ids_a += [await NodeProducerIds(restarted, 1).next_id() for _ in range(5)]
            await restarted.close()
            every = ids_a + ids_b
            assert len(set(every)) == len(every)
            assert min(every) >= 5000
            assert {i % NODE_ID_SPACE for i in ids_a} == {1}
            assert {i % NODE_ID_SPACE for i in ids_b} == {2}
        finally:
            for store in (a, b):
                await store.close()
            await backend.close()

    asyncio.run(scenario())


def test_racing_creates_of_a_key_agree_on_the_first_in_the_log(broker_url: str) -> None:
    """Two members create the same keys at the same instant, each before reading the other:
    both answer with the same winner, the first record of the key in the log, and so does a
    store that loads the log afresh (docs/cluster.md, "Creating topics")."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        a = await _store(backend, namespace)
        b = await _store(backend, namespace)
        keys = [f"kafka-topic/raced-{i}" for i in range(20)]
        try:
            answers = await asyncio.gather(
                *(a.create_if_absent(key, {"partitions": 12, "by": "a"}) for key in keys),
                *(b.create_if_absent(key, {"partitions": 1, "by": "b"}) for key in keys),
            )
            from_a, from_b = answers[: len(keys)], answers[len(keys) :]
            assert from_a == from_b
            assert [a.get(key) for key in keys] == from_a == [b.get(key) for key in keys]
            # a later create changes nothing, on either member
            assert await b.create_if_absent(keys[0], {"partitions": 3}) == from_a[0]
            await a.catch_up()
            assert a.get(keys[0]) == from_a[0]
            fresh = MetadataStore(backend, namespace)
            await fresh.load()
            assert [fresh.get(key) for key in keys] == from_a
            await fresh.close()
        finally:
            for store in (a, b):
                await store.close()
            await backend.close()

    asyncio.run(scenario())
