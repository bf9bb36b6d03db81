"""The metadata log stays small: only changes are written, and snapshots bound what a load
reads whatever the history. Against the real embedded broker and a real gateway."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness.gateway_process import GatewayProcess, free_port
from harness.metadata_history import PARTITIONS, populate, settled, start_up
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE
from pulsar_gateway.gateway.messages import OutMessage
from pulsar_gateway.gateway.metadata_store import SNAPSHOT_EVERY, MetadataStore
from pulsar_gateway.handlers.kafka.port import CommittedOffset
from pulsar_gateway.storage.kafka.group_offsets import offset_record

END = "__test_end__"


def _namespace() -> str:
    return f"public/meta-{uuid.uuid4().hex[:8]}"


async def _data_records(backend: PulsarBackend, topic: str) -> list[list[str]]:
    """The keys of each data record of the log (a per-key record or a group commit's
    `changes` record; not the store's other control records), in order, read up to a record
    appended now."""
    end, _ = await backend.send(topic, [OutMessage(b"", key=END, properties={"deleted": "1"})])
    stream = await backend.open_reader(topic)
    records: list[list[str]] = []
    try:
        while True:
            batch = await stream.read_batch(5000, timeout=10, expect_more=True)
            assert batch, f"{topic} did not reach its end"
            for message in batch:
                if message.id >= end:
                    return records
                kind = message.properties.get("__gw.meta")
                if kind == "changes":
                    records.append(list(json.loads(message.payload or b"{}")))
                elif kind is None and message.key != END:
                    records.append([message.key])
    finally:
        await stream.close()


async def _keys_in_log(backend: PulsarBackend, topic: str) -> list[str]:
    """Keys of the log's data records, in order (a group record's keys in its order)."""
    return [key for record in await _data_records(backend, topic) for key in record]


async def _loaded(backend: PulsarBackend, namespace: str) -> MetadataStore:
    store = MetadataStore(backend, namespace)
    await store.load()
    return store


def test_unchanged_values_append_nothing(broker_url: str) -> None:
    """Queue counts saved every second and an idle consumer's commits store the same value
    again and again: the log gets a record only when a value changes."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        store = await _loaded(backend, namespace)
        offset = {"offset": 5, "metadata": "", "commit_time": 1, "leader_epoch": -1}
        for _ in range(20):
            await store.put("amqp/counts/q", 3)
            await store.put_many({"kafka-group/g/offsets/t": offset, "b": 1})
            await store.delete("never-there")
        # two identical puts at once: one record, and both are durable when they return
        await asyncio.gather(store.put("x", [1, 2]), store.put("x", [1, 2]))
        await store.put("b", True)  # == 1 in Python, not in JSON: written
        await store.delete("x")
        await store.delete("x")
        assert await _keys_in_log(backend, store.topic) == [
            "amqp/counts/q",
            "kafka-group/g/offsets/t",
            "b",
            "x",
            "b",
            "x",
        ]
        again = await _loaded(backend, namespace)
        assert dict(again.items("")) == {
            "amqp/counts/q": 3,
            "kafka-group/g/offsets/t": offset,
            "b": True,
        }
        await backend.close()

    asyncio.run(scenario())


def test_writes_of_one_loop_turn_share_one_durable_append(broker_url: str) -> None:
    """Group commit: the commits of many groups (and a delete, and a put of one key) made
    in one event-loop turn become one log record; each writer returns once it is stored,
    and a load sees every change. Writes in later turns get records of their own."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        store = await _loaded(backend, namespace)
        await store.put("gone", 1)
        writes = [store.put_many({f"g/{i}/a": i, f"g/{i}/b": -i}) for i in range(50)]
        writes += [store.delete("gone"), store.put("solo", "x"), store.put("g/0/a", 100)]
        await asyncio.gather(*writes)
        await store.put("after", 1)
        records = await _data_records(backend, store.topic)
        assert len(records) == 3, "one record for the first put, one group, one after"
        assert records[0] == ["gone"] and records[2] == ["after"]
        assert sorted(records[1]) == sorted(
            {f"g/{i}/{k}" for i in range(50) for k in "ab"}
            | {
                "gone",
                "solo",
            }
        )
        assert store.groups_appended == 1
        again = await _loaded(backend, namespace)
        assert dict(again.items("")) == dict(store.items(""))
        assert again.get("g/0/a") == 100, "the later write of a key in a group wins"
        assert again.get("gone") is None and again.get("solo") == "x"
        # a value JSON cannot hold fails its own write at once, stores nothing, and does
        # not hold up the group it would have joined
        with pytest.raises(TypeError):
            await asyncio.gather(store.put("bad", object()), store.put("fine", 1))
        await store.put("fine", 1)
        assert store.get("bad") is None and store.get("fine") == 1
        # a group bigger than a record's key limit spans several records, all applied
        await asyncio.gather(*(store.put(f"big/{i}", i) for i in range(2500)))
        again = await _loaded(backend, namespace)
        assert dict(again.items("")) == dict(store.items(""))
        await backend.close()

    asyncio.run(scenario())


def test_snapshots_bound_what_a_load_reads(broker_url: str) -> None:
    """After many changes (some of them deletes, some during a snapshot) a load reads one
    snapshot and the changes after it, and sees exactly the writer's table."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        store = MetadataStore(backend, namespace, snapshot_every=500, chunk_keys=40)
        await store.load()
        for round_ in range(60):
            await store.put_many({f"k/{i}": round_ * 1000 + i for i in range(100)})
            if round_ == 10:
                await asyncio.gather(*(store.delete(f"k/{i}") for i in range(0, 100, 3)))
        await settled(store)
        # changes racing a snapshot: each lands before its begin record (so it is in the
        # copy) or after it (so it is read again); either way the last write wins
        racing = [store.put(f"k/{i}", -i) for i in range(100)]
        racing += [store.delete(f"k/{i}") for i in range(0, 100, 7)]
        racing += [store.put(f"new/{i}", {"i": i}) for i in range(50)]
        await asyncio.gather(store.snapshot(), *racing)
        await store.put_many({f"k/{i}": i for i in range(90, 100)})
        await settled(store)
        assert store.appended > 6000

        again = await _loaded(backend, namespace)
        assert dict(again.items("")) == dict(store.items(""))
        assert len(again.children("new/")) == 50
        assert again.get("k/0") is None and again.get("k/7") is None
        assert again.loaded_records < 1000, "a load read more than a snapshot and its tail"
        await backend.close()

    asyncio.run(scenario())


def test_log_of_an_older_version_is_replayed_once_then_snapshotted(broker_url: str) -> None:
    """A log written before snapshots existed is read whole once; the snapshot taken after
    that load makes the next one short."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        topic = f"persistent://{namespace}/metadata"
        expected: dict[str, Any] = {}
        for round_ in range(30):
            messages = []
            for i in range(100):
                key = f"kafka-index/t/{i:04d}"
                if (round_ + i) % 11 == 0:
                    messages.append(OutMessage(b"", key=key, properties={"deleted": "1"}))
                    expected.pop(key, None)
                else:
                    messages.append(OutMessage(b'{"id":[%d,%d]}' % (round_, i), key=key))
                    expected[key] = {"id": [round_, i]}
            await backend.send(topic, messages, batching=False)

        first = MetadataStore(backend, namespace, snapshot_every=1000)
        await first.load()
        assert first.loaded_records > 3000 and dict(first.items("")) == expected
        await settled(first)
        second = await _loaded(backend, namespace)
        assert dict(second.items("")) == expected
        assert second.loaded_records < 50
        await backend.close()

    asyncio.run(scenario())


def test_a_pointer_to_no_complete_snapshot_falls_back_to_the_whole_log(broker_url: str) -> None:
    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = _namespace()
        store = await _loaded(backend, namespace)
        await store.put_many({f"a/{i}": i for i in range(10)})
        somewhere, _ = await backend.send(store.topic, [OutMessage(b"7", key="a/7")])
        await store.put("a/8", 80)
        # a pointer to a record that begins no snapshot (a damaged pointer topic)
        bogus = ":".join(str(part) for part in somewhere).encode()
        await backend.send(store.pointers, [OutMessage(bogus)], batching=False)
        again = await _loaded(backend, namespace)
        assert dict(again.items("")) == {**{f"a/{i}": i for i in range(10)}, "a/8": 80}
        await backend.close()

    asyncio.run(scenario())


# ---- a real gateway --------------------------------------------------------------------------


def test_an_idle_consumer_committing_again_writes_nothing(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw").start()
    try:
        topic = f"idle-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": gateway.bootstrap})
        for i in range(5):
            producer.produce(topic, b"v%d" % i)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "idle"})
        service_url = f"pulsar://127.0.0.1:{gateway.broker_port}"

        async def metadata_keys() -> list[str]:
            backend = PulsarBackend(service_url)
            await backend.start()
            try:
                topic = f"persistent://{DEFAULT_METADATA_NAMESPACE}/metadata"
                return await _keys_in_log(backend, topic)
            finally:
                await backend.close()

        consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        before = asyncio.run(metadata_keys())
        for _ in range(20):
            consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        after = asyncio.run(metadata_keys())
        consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
        moved = asyncio.run(metadata_keys())
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        consumer.close()
        assert after == before, f"{len(after) - len(before)} records for unchanged commits"
        assert len(moved) == len(after) + 1 and "offsets" in moved[-1]
        assert committed[0].offset == 4
    finally:
        assert gateway.stop() == 0, gateway.log_tail()


def test_start_up_after_a_long_history_reads_no_more_than_after_a_short_one(
    tmp_path: Path,
) -> None:
    """60,000 metadata writes (six of the gateway's snapshot intervals, SNAPSHOT_EVERY)
    versus 10: a start-up reads the last snapshot and what follows it, not the history, so
    both read a handful of records.

    Counted in log records, as the gateway's "loaded from N records" line counts them:
    populate writes PARTITIONS commits a record, so the history is 60 data records and
    more, and a correct load reads one snapshot (begin, a chunk, end), the changes since it
    began (under two intervals, the second from a snapshot racing the writes) and a marker
    or two. A load that replayed the history (79 records read, checked once by breaking
    the load) fails. The bound was 25,000 over 200,000 writes before: a full replay of
    those reads 261 records, so it could not fail.

    What that saves in time is measured by bench/metadata_startup.py (1,000,000 writes, and
    an older version's log), not asserted here: a full run beside busy loops once took 15.8 s
    and 21.1 s to start the two gateways (a 5 s difference from the machine alone), while
    the records read were 3 and 4."""
    long_history = 6 * SNAPSHOT_EVERY
    bound = 3 + 2 * SNAPSHOT_EVERY // PARTITIONS + 2  # records, as above
    assert long_history // PARTITIONS >= 2 * bound  # reading the history would fail
    timings = {}
    for records in (10, long_history):
        data_dir, port = tmp_path / str(records), free_port()
        populate(data_dir, port, records)
        timings[records] = start_up(data_dir, port)
    (short, short_read), (long, long_read) = timings[10], timings[long_history]
    print(
        f"start-up after 10 writes {short:.2f}s ({short_read} records read), "
        f"after {long_history:,} writes {long:.2f}s ({long_read} records read)"
    )
    assert short_read <= bound and long_read <= bound, (short_read, long_read)


def test_committed_offset_record_has_every_field() -> None:
    """The group offset store writes its records by hand (asdict's deep copy cost more than
    the rest of a commit): a field added to CommittedOffset must not be left out."""
    entry = CommittedOffset(7, "meta", 123, 4)
    assert offset_record(entry) == asdict(entry)
