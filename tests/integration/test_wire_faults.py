"""The wire client through broker faults, against the real embedded broker: a reader resumes
after a broker SIGKILL and restart with nothing lost or duplicated; a producer's pending
sends survive a SIGKILL and a SIGSTOP (found by the keepalive) and are sent again, so every
acknowledged entry is stored, and any copy a resend leaves is recognisable by its producer
name and sequence id (pulsar-lite has no deduplication)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

from harness.waiting import async_wait_until
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.wire import EARLIEST, BatchBuilder, Client, MessageId

ENTRIES = 300
PER_ENTRY = 10


def _topic() -> str:
    return f"persistent://public/default/fault-{uuid.uuid4().hex[:12]}"


def _entry(number: int) -> BatchBuilder:
    builder = BatchBuilder()
    for index in range(PER_ENTRY):
        builder.add_message(b"%d:%d" % (number, index), f"k{index}", {"n": str(number)})
    return builder


def _all_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is stopped ("T" in /proc). kill(SIGSTOP) returns once
    the signal is queued; one thread takes it and only then tells the others to stop, so on
    a loaded machine the broker's threads ran on for up to 34 ms after it (measured), long
    enough to store and acknowledge sends made meanwhile."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        states.append(stat.rpartition(")")[2].split()[0])
    return bool(states) and all(state == "T" for state in states)


def _outcome(future: asyncio.Future[MessageId]) -> str:
    """What a finished future holds, for an assertion's message."""
    error = future.exception()
    return repr(error) if error is not None else f"receipt {future.result()}"


async def _broker(where: Path) -> EmbeddedBroker:
    broker = EmbeddedBroker(where, heal_resets=False, restart_limit=10)
    await broker.start()
    return broker


async def _kill_and_wait_restart(broker: EmbeddedBroker) -> None:
    generation = broker.generation
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGKILL)
    await async_wait_until(lambda: broker.generation > generation, 20, message="the restart")


async def _read_all(client: Client, topic: str, count: int) -> list[tuple[MessageId, bytes]]:
    reader = await client.create_reader(topic, EARLIEST, receiver_queue_size=50)
    out = []
    while len(out) < count:
        entry = await reader.receive(20)
        out += [(entry.id, m.payload) for m in entry.messages()]
    await reader.close()
    return out


def test_a_reader_resumes_after_a_broker_restart_with_nothing_lost_or_twice(tmp_path) -> None:
    async def scenario() -> None:
        broker = await _broker(tmp_path / "b")
        client = Client(broker.service_url, operation_timeout=10, connect_timeout=2)
        try:
            topic = _topic()
            producer = await client.create_producer(topic)
            for number in range(ENTRIES):
                await producer.enqueue(_entry(number).build())
            await producer.flush()
            await producer.close()
            reader = await client.create_reader(topic, EARLIEST, receiver_queue_size=10)
            ids: list[MessageId] = []
            payloads: list[bytes] = []
            while len(ids) < ENTRIES:
                if len(ids) == ENTRIES // 3:
                    await _kill_and_wait_restart(broker)
                entry = await reader.receive(30)
                ids.append(entry.id)
                payloads += [m.payload for m in entry.messages()]
            assert reader.reconnects >= 1
            assert ids == sorted(set(ids))  # in order, none twice
            expected = [b"%d:%d" % (n, i) for n in range(ENTRIES) for i in range(PER_ENTRY)]
            assert payloads == expected
            await reader.close()
        finally:
            await client.close()
            await broker.stop()

    asyncio.run(scenario())


def _unique_in_order(copies: list[tuple[str, int, bytes]]) -> tuple[list[bytes], int]:
    """The payloads with resent copies removed (a copy has the (producer, sequence id) of an
    entry already seen), and how many copies there were."""
    seen: set[tuple[str, int]] = set()
    out: list[bytes] = []
    for producer, sequence, payload in copies:
        if (producer, sequence) not in seen:
            seen.add((producer, sequence))
            out.append(payload)
    return out, len(copies) - len(out)


async def _stored(client: Client, topic: str, count: int) -> list[tuple[str, int, bytes]]:
    reader = await client.create_reader(topic, EARLIEST, receiver_queue_size=100)
    out: list[tuple[str, int, bytes]] = []
    while True:
        try:
            entry = await reader.receive(2 if len(out) >= count else 30)
        except TimeoutError:
            break
        metadata = entry.metadata
        out.append((metadata.producer_name, metadata.sequence_id, entry.payload))
    await reader.close()
    return out


def _payload(number: int) -> bytes:
    builder = BatchBuilder()
    builder.add_message(b"%d" % number)
    return builder.build().payload


def test_pending_sends_survive_a_broker_sigkill(tmp_path) -> None:
    async def scenario() -> None:
        broker = await _broker(tmp_path / "b")
        client = Client(broker.service_url, operation_timeout=10, connect_timeout=2)
        try:
            topic = _topic()
            producer = await client.create_producer(
                topic, max_pending_messages=50, send_timeout=None
            )
            receipts = []
            for number in range(1000):
                if number == 400:
                    await _kill_and_wait_restart(broker)
                builder = BatchBuilder()
                builder.add_message(b"%d" % number)
                receipts.append(await producer.enqueue(builder.build()))
            ids = await asyncio.gather(*receipts)  # every send acknowledged
            assert producer.reconnects >= 1
            assert ids == sorted(ids)
            copies = await _stored(client, topic, 1000)
            payloads, duplicates = _unique_in_order(copies)
            assert payloads == [_payload(n) for n in range(1000)]
            print(f"sigkill: resent {producer.resent}, copies stored twice: {duplicates}")
        finally:
            await client.close()
            await broker.stop()

    asyncio.run(scenario())


def test_a_stopped_broker_is_found_by_the_keepalive_and_sends_resume(tmp_path) -> None:
    async def scenario() -> None:
        broker = await _broker(tmp_path / "b")
        client = Client(
            broker.service_url,
            operation_timeout=10,
            connect_timeout=1,
            keepalive_interval=0.5,
            keepalive_timeout=1.0,
        )
        try:
            topic = _topic()
            producer = await client.create_producer(
                topic, max_pending_messages=20, send_timeout=None
            )
            receipts = [await producer.enqueue(_entry(n).build()) for n in range(50)]
            await asyncio.gather(*receipts)
            assert broker.pid is not None
            os.kill(broker.pid, signal.SIGSTOP)
            try:
                await async_wait_until(
                    lambda: _all_stopped(broker.pid), 10, 0.001, "every broker thread to stop"
                )
                stalled = [await producer.enqueue(_entry(n).build()) for n in range(50, 60)]
                connection = producer._connection
                await async_wait_until(
                    lambda: connection is None or connection.closed,
                    10,
                    message="the keepalive to close the stalled connection",
                )
                await asyncio.sleep(2)  # reconnects fail while it stays stopped
                done = [_outcome(f) for f in stalled if f.done()]
                assert not done, f"sends finished while the broker was stopped: {done}"
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            later = [await producer.enqueue(_entry(n).build()) for n in range(60, 100)]
            await asyncio.wait_for(asyncio.gather(*stalled, *later), 30)
            copies = await _stored(client, topic, 100)
            payloads, duplicates = _unique_in_order(copies)
            assert payloads == [_entry(n).build().payload for n in range(100)]
            print(f"sigstop: resent {producer.resent}, copies stored twice: {duplicates}")
        finally:
            await client.close()
            await broker.stop()

    asyncio.run(scenario())
