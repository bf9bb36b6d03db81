"""The wire client beside pulsar-client, on the same embedded broker, in one run.

Writes the same records (200 B values, a key, two properties, an event time) with:
- ours: one batched entry per `--batch` records, built in one pass (BatchBuilder, every
  record's fields encoded from Python values), pipelined through `Producer.enqueue`;
- pulsar-client: its batching producer (`send_async` without a callback, as the gateway's
  direct peer in bench/kafka_throughput.py), then `flush`.
Then reads each topic back from its start: ours entry by entry (`receive_many`, each batch
split into its messages), pulsar-client with a reader (`read_next` and the message's data,
key, properties and event time: what the gateway needs of every record).

Then the same for one record per entry (as AMQP queues write): our producer sending
`single_entry`s beside pulsar-client without batching, and a Shared subscription reading
and acknowledging each (ours `receive_many` + `ack`, pulsar-client `receive` +
`acknowledge`).

Reports records/s, the client process's CPU per record (user+sys of this process, so
pulsar-client's own threads count) and the broker's CPU per record, per phase; and the
per-record cost of building and splitting a batch alone (no I/O).

    python -m bench.pulsar_wire [--records 200000] [--batch 500] [--size 200] [--single 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.proc import cpu_seconds
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.wire import (
    EARLIEST,
    BatchBuilder,
    Client,
    SubscriptionType,
    batch_entry,
    message_fields,
    single_entry,
    split_batch,
)


def records(count: int, size: int) -> list[tuple[bytes, str, dict[str, str], int]]:
    base = int(time.time() * 1000)
    value = b"v" * size
    return [
        (value, f"key-{i:07d}", {"trace": f"t-{i}", "app": "bench"}, base + i // 100)
        for i in range(count)
    ]


class Phase:
    """Wall time, this process's CPU and the broker's CPU over a block."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid

    def __enter__(self) -> Phase:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.broker = cpu_seconds([self.broker_pid])
        return self

    def __exit__(self, *_exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        self.broker = cpu_seconds([self.broker_pid]) - self.broker

    def row(self, name: str, count: int) -> dict[str, Any]:
        print(f"  {name}: {self.wall:.2f} s", flush=True)
        return {
            "phase": name,
            "records/s": count / self.wall,
            "client us/rec": self.cpu / count * 1e6,
            "broker us/rec": self.broker / count * 1e6,
        }


async def ours_produce(url: str, topic: str, data: list[Any], batch: int) -> None:
    client = Client(url, operation_timeout=30)
    producer = await client.create_producer(topic, max_pending_messages=64)
    receipts = []
    for start in range(0, len(data), batch):
        builder = BatchBuilder()
        for value, key, properties, event_time in data[start : start + batch]:
            builder.add_message(value, key, properties, event_time)
        receipts.append(await producer.enqueue(builder.build()))
    await asyncio.gather(*receipts)
    await client.close()


async def ours_produce_single(url: str, topic: str, data: list[Any]) -> None:
    """One unbatched entry per record (as AMQP queues write), pipelined."""
    client = Client(url, operation_timeout=30)
    producer = await client.create_producer(topic, max_pending_messages=1000)
    receipts = []
    for value, key, properties, event_time in data:
        entry = single_entry(value, key=key, properties=properties, event_time=event_time)
        receipts.append(await producer.enqueue(entry))
    await asyncio.gather(*receipts)
    await client.close()


async def ours_consume_shared(url: str, topic: str, count: int) -> int:
    """A Shared subscription from the start, every entry acknowledged (as AMQP does)."""
    client = Client(url, operation_timeout=30)
    consumer = await client.subscribe(
        topic, "bench", subscription_type=SubscriptionType.SHARED, initial_position=1
    )
    seen = 0
    while seen < count:
        entries = await consumer.receive_many(500, timeout=30)
        for entry in entries:
            entry.messages()
        consumer.ack(entries)
        seen += len(entries)
    await client.close()
    return seen


async def ours_read(url: str, topic: str, count: int) -> int:
    client = Client(url, operation_timeout=30)
    reader = await client.create_reader(topic, EARLIEST, receiver_queue_size=200)
    seen = 0
    while seen < count:
        for entry in await reader.receive_many(200, timeout=30):
            for message in entry.messages():
                seen += message.payload is not None
    await client.close()
    return seen


def pulsar_client_produce(url: str, topic: str, data: list[Any], batch: int) -> None:
    import pulsar

    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=batch,
        batching_max_allowed_size_in_bytes=4 << 20,
        batching_max_publish_delay_ms=5,
        block_if_queue_full=True,
        max_pending_messages=50_000,
    )
    # a lone first message: a batch as a ledger's entry 0 breaks pulsar-client readers on
    # pulsar-lite (docs/backend.md, "A batch must not open a ledger")
    producer.send(b"first")
    for value, key, properties, event_time in data:
        producer.send_async(
            value, None, partition_key=key, properties=properties, event_timestamp=event_time
        )
    producer.flush()
    client.close()


def pulsar_client_produce_single(url: str, topic: str, data: list[Any]) -> None:
    import pulsar

    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(
        topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=1000
    )
    for value, key, properties, event_time in data:
        producer.send_async(
            value, None, partition_key=key, properties=properties, event_timestamp=event_time
        )
    producer.flush()
    client.close()


def pulsar_client_consume_shared(url: str, topic: str, count: int) -> int:
    import pulsar

    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(
        topic,
        "bench",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=1000,
    )
    for _ in range(count):
        message = consumer.receive(30_000)
        message.data(), message.partition_key(), message.properties()
        consumer.acknowledge(message)
    client.close()
    return count


def pulsar_client_read(url: str, topic: str, count: int) -> int:
    import pulsar

    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=5000)
    reader.read_next(30_000)  # the lone first message
    seen = 0
    while seen < count:
        message = reader.read_next(30_000)
        message.data(), message.partition_key(), message.properties()
        message.event_timestamp()
        seen += 1
    client.close()
    return seen


def codec_costs(data: list[Any], batch: int) -> dict[str, float]:
    """Microseconds per record of building and splitting batches, no I/O."""
    chunk = data[:batch]

    def build() -> None:
        builder = BatchBuilder()
        for value, key, properties, event_time in chunk:
            builder.add_message(value, key, properties, event_time)
        builder.build()

    encoded = [(message_fields(k, p, t), v) for v, k, p, t in chunk]
    payload = batch_entry(encoded).payload

    def timed(fn: Callable[[], Any]) -> float:
        runs = timeit.repeat(fn, number=20, repeat=7, timer=time.process_time)
        return min(runs) / 20 / len(chunk) * 1e6

    return {
        "build from values": timed(build),
        "build from encoded fields": timed(lambda: batch_entry(encoded)),
        "split": timed(lambda: split_batch(payload, len(chunk))),
    }


def table(rows: list[dict[str, Any]]) -> str:
    out = [f"{'phase':32} {'records/s':>12} {'client us/rec':>14} {'broker us/rec':>14}"]
    for row in rows:
        out.append(
            f"{row['phase']:32} {row['records/s']:12,.0f} {row['client us/rec']:14.2f} "
            f"{row['broker us/rec']:14.2f}"
        )
    return "\n".join(out)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--single", type=int, default=20_000, help="records sent 1/entry")
    args = parser.parse_args()
    data = records(args.records, args.size)
    with tempfile.TemporaryDirectory(prefix="wire-bench-") as where:
        broker = EmbeddedBroker(Path(where) / "broker", heal_resets=False)
        await broker.start()
        assert broker.pid is not None
        url = broker.service_url
        stamp = time.time_ns()
        ours_topic = f"persistent://public/default/wire-bench-ours-{stamp}"
        theirs_topic = f"persistent://public/default/wire-bench-pc-{stamp}"
        rows = []
        try:
            with Phase(broker.pid) as phase:
                await ours_produce(url, ours_topic, data, args.batch)
            rows.append(phase.row("produce: ours (wire)", args.records))
            with Phase(broker.pid) as phase:
                await asyncio.to_thread(pulsar_client_produce, url, theirs_topic, data, args.batch)
            rows.append(phase.row("produce: pulsar-client batched", args.records))
            with Phase(broker.pid) as phase:
                await ours_read(url, ours_topic, args.records)
            rows.append(phase.row("read: ours (wire)", args.records))
            with Phase(broker.pid) as phase:
                await asyncio.to_thread(pulsar_client_read, url, theirs_topic, args.records)
            rows.append(phase.row("read: pulsar-client reader", args.records))
            singles = data[: args.single]
            ours_single = f"{ours_topic}-single"
            theirs_single = f"{theirs_topic}-single"
            with Phase(broker.pid) as phase:
                await ours_produce_single(url, ours_single, singles)
            rows.append(phase.row("produce 1/entry: ours (wire)", len(singles)))
            with Phase(broker.pid) as phase:
                await asyncio.to_thread(pulsar_client_produce_single, url, theirs_single, singles)
            rows.append(phase.row("produce 1/entry: pulsar-client", len(singles)))
            with Phase(broker.pid) as phase:
                await ours_consume_shared(url, ours_single, len(singles))
            rows.append(phase.row("Shared + ack 1/entry: ours", len(singles)))
            with Phase(broker.pid) as phase:
                await asyncio.to_thread(
                    pulsar_client_consume_shared, url, theirs_single, len(singles)
                )
            rows.append(phase.row("Shared + ack 1/entry: pulsar-client", len(singles)))
        finally:
            await broker.stop()
    print(f"{args.records} records of {args.size} B, key + 2 properties + event time, "
          f"batches of {args.batch}; {os.cpu_count()} cores")  # fmt: skip
    print(table(rows))
    speed = [row["records/s"] for row in rows]
    print(
        f"ratios: produce {speed[0] / speed[1]:.2f}x, read {speed[2] / speed[3]:.2f}x, "
        f"produce 1/entry {speed[4] / speed[5]:.2f}x, Shared + ack {speed[6] / speed[7]:.2f}x"
    )
    for name, cost in codec_costs(data, args.batch).items():
        print(f"codec, {name}: {cost:.2f} us/record")


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
