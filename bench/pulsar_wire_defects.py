"""Which of pulsar-lite's known defects (docs/backend.md) the wire client still meets.

Each probe runs against a fresh embedded broker and prints what it measured; the results
are written up in docs/pulsar-protocol.md ("pulsar-lite's defects, measured").

    python -m bench.pulsar_wire_defects [--records 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import tempfile
import time
import uuid
from pathlib import Path

import pulsar

from bench.pulsar_wire import ours_produce, records
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.wire import (
    EARLIEST,
    BatchBuilder,
    Client,
    ConnectionClosed,
    PulsarError,
    SubscriptionType,
    single_entry,
)


def topic() -> str:
    return f"persistent://public/default/defect-{uuid.uuid4().hex[:10]}"


def batch(count: int, tag: bytes = b"m") -> BatchBuilder:
    builder = BatchBuilder()
    for index in range(count):
        builder.add_message(tag + b"%d" % index, f"k{index}")
    return builder


async def replays_and_memory(url: str, count: int) -> None:
    """Readers replay entries and, with permits per message, run ahead."""
    for per_entry, label in ((True, "permits per entry (default here)"), (False, "per message")):
        for batch_size in (500, 1):
            name = topic()
            await ours_produce(url, name, records(count if batch_size > 1 else count // 10, 200),
                               batch_size)  # fmt: skip
            client = Client(url, operation_timeout=30)
            reader = await client.create_reader(
                name, EARLIEST, receiver_queue_size=1000, permits_per_entry=per_entry
            )
            entries = (count // batch_size) if batch_size > 1 else count // 10
            seen = peak_queue = peak_bytes = 0
            started = time.perf_counter()
            while seen < entries:
                got = await reader.receive_many(1000, timeout=10)
                if not got:
                    print(f"    stalled at {seen} of {entries} entries")
                    break
                peak_queue = max(peak_queue, reader.queued + len(got))
                peak_bytes = max(peak_bytes, reader.queued_bytes + sum(e.size for e in got))
                seen += len(got)
            took = time.perf_counter() - started
            print(
                f"  reader, {label}, entries of {batch_size} records: {seen} entries in "
                f"{took:.2f} s, {reader.replays_dropped} replays dropped "
                f"({reader.replays_dropped / max(seen, 1):.2f} per entry), peak queue "
                f"{peak_queue} entries / {peak_bytes / 1e6:.1f} MB, empty FLOWs {reader.nudges}"
            )
            await client.close()


async def batch_as_entry_zero(url: str, broker_log: Path) -> None:
    """A batched entry 0 of a ledger: our reader reads it; pulsar-client's reader, paused
    after the batch's first message, acks entry -1 and pulsar-lite drops its connection."""
    name = topic()
    client = Client(url, operation_timeout=10)
    producer = await client.create_producer(name)
    await producer.send(batch(10).build())
    await producer.send(batch(10, b"n").build())
    reader = await client.create_reader(name, EARLIEST)
    ours = [await reader.receive(5) for _ in range(2)]
    await client.close()
    print(f"  our reader on a batch at entry 0: {sum(e.num_messages for e in ours)} of 20 messages")
    before = broker_log.read_text(errors="replace").count("out of range integral")
    theirs = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    got = 0
    try:
        reader_pc = theirs.create_reader(name, pulsar.MessageId.earliest)
        for _ in range(20):
            reader_pc.read_next(3000)
            got += 1
            if got == 1:
                # its cumulative ack of "the entry before" goes out while it waits
                await asyncio.sleep(0.5)
    except Exception as exc:  # noqa: BLE001 - measured, printed
        print(f"  pulsar-client reader stopped: {exc}")
    finally:
        theirs.close()
    await asyncio.sleep(0.5)
    after = broker_log.read_text(errors="replace").count("out of range integral")
    print(f"  pulsar-client reader on it: {got} of 20; broker conversion errors logged: "
          f"{after - before}")  # fmt: skip


async def last_message_id(url: str) -> None:
    client = Client(url, operation_timeout=5)
    name = topic()
    reader = await client.create_reader(name, EARLIEST)
    try:
        print(f"  get_last_message_id, empty topic: {await reader.get_last_message_id()}")
    except PulsarError as exc:
        print(f"  get_last_message_id, empty topic: {type(exc).__name__}: {exc}")
    producer = await client.create_producer(name)
    await producer.send(single_entry(b"x"))
    last = await producer.send(batch(5).build())
    reader2 = await client.create_reader(name, EARLIEST)
    print(
        f"  get_last_message_id after a batch of 5 stored at {last.entry}: "
        f"{(await reader2.get_last_message_id())[0]}"
    )
    await client.close()


async def seeks(url: str) -> None:
    client = Client(url, operation_timeout=5)
    name = topic()
    producer = await client.create_producer(name)
    ids = [await producer.send(single_entry(b"%d" % i)) for i in range(10)]
    for durable in (False, True):
        kind = "durable Exclusive" if durable else "reader"
        consumer = (
            await client.subscribe(
                name, f"seek-{uuid.uuid4().hex[:6]}", initial_position=1
            )  # fmt: skip
            if durable
            else await client.create_reader(name, EARLIEST)
        )
        for _ in range(10):
            await consumer.receive(5)
        await consumer.seek(ids[3])
        try:
            entry = await consumer.receive(2)
            print(f"  seek by id on a {kind}: next entry {entry.id} (wanted {ids[3]})")
        except TimeoutError:
            print(f"  seek by id on a {kind}: nothing within 2 s")
        await consumer.seek(int(time.time() * 1000) - 60_000)
        try:
            entry = await consumer.receive(2)
            print(f"  seek by time on a {kind}: next entry {entry.id}")
        except TimeoutError:
            print(f"  seek by time on a {kind}: nothing within 2 s")
        connection = consumer._connection
        try:
            await consumer.seek(EARLIEST)
            print(f"  seek to earliest on a {kind}: answered; connection closed: "
                  f"{connection.closed if connection else '?'}")  # fmt: skip
        except (PulsarError, ConnectionClosed) as exc:
            print(f"  seek to earliest on a {kind}: {type(exc).__name__}: {exc}")
        await asyncio.sleep(0.5)
        print(f"    reconnects after it: {consumer.reconnects}")
        await consumer.close()
    await client.close()


async def exclusive_twice_and_redeliver(url: str) -> None:
    client = Client(url, operation_timeout=5)
    other = Client(url, operation_timeout=5)
    name = topic()
    first = await client.subscribe(name, "only")
    producer = await client.create_producer(name)
    try:
        await other.subscribe(name, "only")
        print("  second Exclusive subscriber: accepted")
    except PulsarError as exc:
        print(f"  second Exclusive subscriber: {type(exc).__name__}: {exc}")
    await asyncio.sleep(0.3)
    print(f"  the first client's connection after it: closed={first._connection is None}, "
          f"reconnects={first.reconnects}")  # fmt: skip
    await producer.send(single_entry(b"a"))
    entry = await first.receive(5)
    first.redeliver()
    try:
        again = await first.receive(2)
        print(f"  redeliver on Exclusive: came back (redelivery count {again.redelivery_count})")
    except TimeoutError:
        print(f"  redeliver on Exclusive: nothing within 2 s (entry {entry.id})")
    await other.close()
    await client.close()


async def key_shared(url: str) -> None:
    client = Client(url, operation_timeout=5)
    name = topic()
    consumer = await client.subscribe(
        name, "ks", subscription_type=SubscriptionType.KEY_SHARED, initial_position=1
    )
    producer = await client.create_producer(name)
    futures = [await producer.enqueue(single_entry(b"%d" % i, key=f"k{i % 7}"))
               for i in range(2000)]  # fmt: skip
    await asyncio.gather(*futures)
    got = 0
    started = time.perf_counter()
    try:
        while got < 2000:
            entries = await consumer.receive_many(500, timeout=5)
            if not entries:
                break
            consumer.ack(entries)
            got += len(entries)
    finally:
        print(f"  Key_Shared, 2000 pipelined sends: {got} received in "
              f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        await client.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="wire-defects-") as where:
        broker = EmbeddedBroker(Path(where) / "b", heal_resets=False, log_level="info")
        await broker.start()
        url = broker.service_url
        try:
            print("readers: replays, run-ahead, stalls")
            await replays_and_memory(url, args.records)
            print("a batch as a ledger's entry 0")
            await batch_as_entry_zero(url, Path(where) / "b" / "broker.log")
            print("last message id")
            await last_message_id(url)
            print("seek")
            await seeks(url)
            print("exclusive subscriptions")
            await exclusive_twice_and_redeliver(url)
            print("Key_Shared")
            await key_shared(url)
        finally:
            await broker.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak:.0f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
