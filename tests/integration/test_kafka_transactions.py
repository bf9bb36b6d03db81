"""Kafka transactions with real clients on a real gateway (issue 14): confluent-kafka,
kafka-python and aiokafka transactional producers, read_committed consumers seeing exactly
the committed records, fenced zombies, timeouts, offsets committed inside a transaction, and
a gateway killed mid-transaction. Both entry formats, chosen per topic."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from harness.gateway_process import GatewayProcess
from harness.partition_records import read_to_end
from harness.waiting import wait_until

FORMATS = ["pulsar", "kafka"]


def _create(bootstrap: str, topic: str, entry_format: str = "pulsar") -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, 1, 1, config={"pulsar.entry.format": entry_format})
    admin.create_topics([new])[topic].result(30)


def _producer(bootstrap: str, transactional_id: str, **extra: object) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **extra}
    )
    producer.init_transactions(60)
    return producer


def _send(producer: Producer, topic: str, values: list[bytes]) -> None:
    """Produce inside the open transaction, and wait until the gateway stored them."""
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(60) == 0


def _committed(bootstrap: str, topic: str) -> list[bytes]:
    return [value for _, value in read_to_end(bootstrap, topic, isolation_level="read_committed")]


def _everything(bootstrap: str, topic: str) -> list[bytes]:
    return [value for _, value in read_to_end(bootstrap, topic)]


def _stable_offset(bootstrap: str, topic: str) -> int:
    """ListOffsets latest under read_committed: the last stable offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partition = TopicPartition(topic, 0)
    futures = admin.list_offsets(
        {partition: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED
    )
    return futures[partition].result(30).offset


@pytest.mark.parametrize("entry_format", FORMATS)
def test_confluent_commit_and_abort(gateway, topic_name, entry_format) -> None:
    _create(gateway.bootstrap, topic_name, entry_format)
    producer = _producer(gateway.bootstrap, f"tx-{topic_name}")
    for outcome, tag in ((True, b"c1"), (False, b"a"), (True, b"c2")):
        producer.begin_transaction()
        _send(producer, topic_name, [b"%s-%d" % (tag, i) for i in range(5)])
        if outcome:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    committed = [b"c1-%d" % i for i in range(5)] + [b"c2-%d" % i for i in range(5)]
    assert _committed(gateway.bootstrap, topic_name) == committed
    everything = _everything(gateway.bootstrap, topic_name)
    assert everything == committed[:5] + [b"a-%d" % i for i in range(5)] + committed[5:]
    # 15 records and 3 markers; nothing open, so the LSO is the end of the log
    assert _stable_offset(gateway.bootstrap, topic_name) == 18


def test_an_open_transaction_holds_read_committed_at_its_first_offset(gateway, topic_name) -> None:
    _create(gateway.bootstrap, topic_name)
    before = Producer({"bootstrap.servers": gateway.bootstrap})
    before.produce(topic_name, b"plain")
    before.flush(30)
    producer = _producer(gateway.bootstrap, f"tx-{topic_name}")
    producer.begin_transaction()
    _send(producer, topic_name, [b"pending"])
    assert _stable_offset(gateway.bootstrap, topic_name) == 1
    assert _committed(gateway.bootstrap, topic_name) == [b"plain"]
    assert _everything(gateway.bootstrap, topic_name) == [b"plain", b"pending"]
    producer.commit_transaction(60)
    assert _committed(gateway.bootstrap, topic_name) == [b"plain", b"pending"]


def test_a_zombie_producer_is_fenced(gateway, topic_name) -> None:
    _create(gateway.bootstrap, topic_name)
    transactional_id = f"tx-{topic_name}"
    zombie = _producer(gateway.bootstrap, transactional_id)
    zombie.begin_transaction()
    _send(zombie, topic_name, [b"zombie"])
    successor = _producer(gateway.bootstrap, transactional_id)  # aborts the zombie's
    successor.begin_transaction()
    _send(successor, topic_name, [b"successor"])
    successor.commit_transaction(60)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert "fenced" in error.str().lower(), error
    assert _committed(gateway.bootstrap, topic_name) == [b"successor"]


def test_a_transaction_past_its_timeout_is_aborted(gateway, topic_name) -> None:
    _create(gateway.bootstrap, topic_name)
    producer = _producer(gateway.bootstrap, f"tx-{topic_name}", **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    _send(producer, topic_name, [b"slow-0", b"slow-1"])
    # the timer writes the abort marker: the LSO passes both records and the marker
    wait_until(lambda: _stable_offset(gateway.bootstrap, topic_name) == 3, 30, 0.2, "the abort")
    assert _committed(gateway.bootstrap, topic_name) == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)


def test_offsets_sent_to_the_transaction_are_committed_only_with_it(gateway, topic_name) -> None:
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"g-{topic_name}"
    _create(gateway.bootstrap, source)
    _create(gateway.bootstrap, sink)
    plain = Producer({"bootstrap.servers": gateway.bootstrap})
    for i in range(10):
        plain.produce(source, b"%d" % i)
    plain.flush(30)
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    producer = _producer(gateway.bootstrap, f"tx-{topic_name}")
    try:
        values: list[bytes] = []

        def read_all() -> bool:
            message = consumer.poll(1)
            if message is not None and not message.error():
                values.append(message.value())
            return len(values) == 10

        wait_until(read_all, 60, 0, "the input")
        for commit in (False, True):
            producer.begin_transaction()
            _send(producer, sink, [value.upper() + b"!" for value in values])
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            stored = consumer.committed([TopicPartition(source, 0)], 30)[0].offset
            assert stored < 0, "offsets inside an open transaction must not reach the group"
            if commit:
                producer.commit_transaction(60)
            else:
                producer.abort_transaction(60)
                stored = consumer.committed([TopicPartition(source, 0)], 30)[0].offset
                assert stored < 0, "an aborted transaction's offsets reached the group"
        assert consumer.committed([TopicPartition(source, 0)], 30)[0].offset == 10
        assert _committed(gateway.bootstrap, sink) == [value + b"!" for value in values]
    finally:
        consumer.close()


def test_kafka_python_transactional_producer(gateway, topic_name) -> None:
    from kafka import KafkaProducer

    _create(gateway.bootstrap, topic_name)
    producer = KafkaProducer(
        bootstrap_servers=gateway.bootstrap, transactional_id=f"tx-{topic_name}"
    )
    try:
        producer.init_transactions()
        for commit, tag in ((True, b"c"), (False, b"a"), (True, b"d")):
            producer.begin_transaction()
            for i in range(3):
                producer.send(topic_name, b"%s%d" % (tag, i))
            producer.flush()
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=10)
    assert _committed(gateway.bootstrap, topic_name) == [
        b"c0", b"c1", b"c2", b"d0", b"d1", b"d2"
    ]  # fmt: skip
    assert len(_everything(gateway.bootstrap, topic_name)) == 9


def test_aiokafka_transactional_producer(gateway, topic_name) -> None:
    from aiokafka import AIOKafkaProducer

    _create(gateway.bootstrap, topic_name)

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=gateway.bootstrap, transactional_id=f"tx-{topic_name}"
        )
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(3):
                    await producer.send_and_wait(topic_name, b"c%d" % i)
            await producer.begin_transaction()
            await producer.send_and_wait(topic_name, b"aborted")
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait(topic_name, b"last")
        finally:
            await producer.stop()

    asyncio.run(run())
    assert _committed(gateway.bootstrap, topic_name) == [b"c0", b"c1", b"c2", b"last"]
    assert b"aborted" in _everything(gateway.bootstrap, topic_name)


@pytest.mark.parametrize("entry_format", FORMATS)
def test_gateway_killed_mid_transaction(tmp_path, topic_name, entry_format) -> None:
    """kill -9 with a transaction open: after the restart the LSO is still held at it (from
    the checkpoint and the replayed log), the timer aborts it, and read_committed consumers
    then read on past it; a committed transaction from before the kill stays committed and
    an aborted one aborted."""
    gw = GatewayProcess(
        tmp_path / "gw",
        extra=["--set", f"kafka.entry_format={entry_format}", "--set", "kafka.index_interval=4"],
    ).start()
    try:
        _create(gw.bootstrap, topic_name, entry_format)
        producer = _producer(gw.bootstrap, f"tx-{topic_name}", **{"transaction.timeout.ms": 15000})
        producer.begin_transaction()
        _send(producer, topic_name, [b"kept-%d" % i for i in range(6)])
        producer.commit_transaction(60)  # offsets 0-5, marker 6
        producer.begin_transaction()
        _send(producer, topic_name, [b"gone-%d" % i for i in range(3)])
        producer.abort_transaction(60)  # 7-9, marker 10: below the last checkpoint
        producer.begin_transaction()
        opened = time.monotonic()
        _send(producer, topic_name, [b"lost-%d" % i for i in range(3)])  # 11-13, left open
        gw.kill()
        gw.start()
        assert _everything(gw.bootstrap, topic_name)[-1] == b"lost-2"
        # the open transaction came back from the checkpoint and the replay (LSO at its
        # start), the aborted one from its saved entry; on a machine so loaded that the
        # restart took longer than the transaction's timeout, its timer has aborted it already
        stable = _stable_offset(gw.bootstrap, topic_name)
        assert stable == 11 or (stable == 15 and time.monotonic() - opened > 15), stable
        kept = [b"kept-%d" % i for i in range(6)]
        assert _committed(gw.bootstrap, topic_name) == kept
        wait_until(lambda: _stable_offset(gw.bootstrap, topic_name) == 15, 60, 0.3, "the abort")
        assert _committed(gw.bootstrap, topic_name) == kept
        # a new producer with the id goes on where the old one stopped
        successor = _producer(gw.bootstrap, f"tx-{topic_name}")
        successor.begin_transaction()
        _send(successor, topic_name, [b"after"])
        successor.commit_transaction(60)
        assert _committed(gw.bootstrap, topic_name)[-1] == b"after"
    finally:
        gw.stop()


# input records of the exactly-once loop (the issue asks for 100k: about 60 s here)
EOS_RECORDS = int(os.environ.get("EOS_RECORDS", "100000"))


def test_exactly_once_pipeline_survives_a_killed_worker(gateway, topic_name) -> None:
    """A consume-transform-produce worker (harness/eos_worker.py) killed with SIGKILL
    mid-way and replaced: every input record is in the output exactly once, because output
    and input offsets commit in one transaction and the replacement's InitProducerId aborts
    what the killed one left open."""
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"g-{topic_name}"
    _create(gateway.bootstrap, source, "kafka")
    _create(gateway.bootstrap, sink, "pulsar")
    feeder = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 20})
    for i in range(EOS_RECORDS):
        feeder.produce(source, b"%06d" % i)
        if i % 10000 == 0:
            feeder.poll(0)
    assert feeder.flush(120) == 0
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group})
    source_partition = TopicPartition(source, 0)

    def progress() -> int:
        return max(consumer.committed([source_partition], 30)[0].offset, 0)

    def worker(pause: float) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "harness.eos_worker", gateway.bootstrap]
        return subprocess.Popen(
            [*command, source, sink, group, f"tx-{topic_name}", str(pause)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    first = worker(1.0)
    try:
        assert first.stdout is not None
        for line in first.stdout:  # "open <offset>": its output is stored, not committed
            if int(line.split()[1]) >= EOS_RECORDS // 3:
                first.kill()
                break
        first.wait(30)
        assert progress() < EOS_RECORDS
        second = worker(0)
        try:
            wait_until(lambda: progress() == EOS_RECORDS, 600, 0.5, "all of the input")
        finally:
            second.kill()
            second.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
        consumer.close()
    output = _committed(gateway.bootstrap, sink)
    assert sorted(output) == [b"out-%06d" % i for i in range(EOS_RECORDS)]
    aborted = len(_everything(gateway.bootstrap, sink)) - len(output)
    assert aborted > 0, "the worker was to be killed with a transaction open"
    print(f"{EOS_RECORDS} records exactly once; {aborted} aborted copies left out")


def test_a_streams_like_repartition_and_changelog_round(gateway, topic_name) -> None:
    """What Kafka Streams does with exactly_once_v2, done with confluent-kafka: a
    repartition stage and a counting stage, each a consume-transform-produce transaction, the
    counts written to a compacted changelog topic. The changelog ends with each key's count
    once, whatever the stages saw more than once."""
    words, repartition, changelog = (f"{topic_name}-{n}" for n in ("words", "rep", "counts"))
    _create(gateway.bootstrap, words)
    _create(gateway.bootstrap, repartition, "kafka")
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    compacted = NewTopic(changelog, 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([compacted])[changelog].result(30)
    feeder = Producer({"bootstrap.servers": gateway.bootstrap})
    sentence = [b"to", b"be", b"or", b"not", b"to", b"be"] * 20
    for word in sentence:
        feeder.produce(words, b"", key=word)
    feeder.flush(30)

    def stage(
        source: str, group: str, transform: Callable[[Any], tuple[str, bytes, bytes]]
    ) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": gateway.bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        consumer.subscribe([source])
        producer = _producer(gateway.bootstrap, f"tx-{group}")
        seen = 0
        try:
            while seen < len(sentence):
                messages = [m for m in consumer.consume(100, timeout=1) if not m.error()]
                if not messages:
                    continue
                producer.begin_transaction()
                for message in messages:
                    topic, key, value = transform(message)
                    producer.produce(topic, value, key=key)
                positions = consumer.position(consumer.assignment())
                metadata = consumer.consumer_group_metadata()
                producer.send_offsets_to_transaction(positions, metadata, 30)
                producer.commit_transaction(60)
                seen += len(messages)
        finally:
            consumer.close()

    counts: dict[bytes, int] = {}

    def count(message: Any) -> tuple[str, bytes, bytes]:
        counts[message.key()] = counts.get(message.key(), 0) + 1
        return changelog, message.key(), b"%d" % counts[message.key()]

    stage(words, f"rep-{topic_name}", lambda m: (repartition, m.key(), m.key().upper()))
    stage(repartition, f"count-{topic_name}", count)
    latest: dict[bytes, bytes] = {}
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": f"check-{topic_name}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(changelog, 0, 0)])
    try:

        def at_end() -> bool:
            message = consumer.poll(1)
            if message is None:
                return False
            if message.error():
                return True
            latest[message.key()] = message.value()
            return False

        wait_until(at_end, 60, 0, "the end of the changelog")
    finally:
        consumer.close()
    assert latest == {b"to": b"40", b"be": b"40", b"or": b"20", b"not": b"20"}
