"""AMQP throughput through the gateway with pika, and memory per connection.

    python -m bench.amqp_throughput [--messages 5000] [--size 100] [--connections 200]

Python AMQP clients are the limit here (TOOLS.md: 2.7-7k msg/s against RabbitMQ
itself), so these numbers bound what one client process sees, not the server.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import aio_pika
import pika

from tests.support.gateway_process import GatewayProcess


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pika_confirmed_publish(url: str, queue: str, count: int, body: bytes) -> float:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    ch = connection.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)
    started = time.perf_counter()
    for _ in range(count):
        ch.basic_publish("", queue, body, props)
    elapsed = time.perf_counter() - started
    connection.close()
    return count / elapsed


def pika_consume(url: str, queue: str, count: int) -> float:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    ch = connection.channel()
    ch.basic_qos(prefetch_count=1000)
    got = 0
    started = time.perf_counter()
    for method, _, _ in ch.consume(queue, inactivity_timeout=10):
        if method is None:
            break
        got += 1
        if got % 100 == 0 or got == count:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if got == count:
            break
    elapsed = time.perf_counter() - started
    ch.cancel()
    connection.close()
    return got / elapsed


async def aio_pika_pipelined(url: str, queue: str, count: int, body: bytes) -> float:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue, durable=True)
        started = time.perf_counter()
        window = 1000
        for start in range(0, count, window):
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue)
                    for _ in range(min(window, count - start))
                )
            )
        return count / (time.perf_counter() - started)


def memory_per_connection(gw: GatewayProcess, connections: int) -> float:
    assert gw.process is not None
    before = rss_mib(gw.process.pid)
    opened = []
    for _ in range(connections):
        connection = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        connection.channel()
        opened.append(connection)
    time.sleep(1)
    after = rss_mib(gw.process.pid)
    for connection in opened:
        connection.close()
    return (after - before) * 1024 / connections


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--connections", type=int, default=200)
    args = parser.parse_args()
    body = b"x" * args.size
    with tempfile.TemporaryDirectory() as tmp:
        gw = GatewayProcess(Path(tmp) / "gw").start()
        try:
            per_connection = memory_per_connection(gw, args.connections)
            print(f"gateway RSS per idle connection + channel: {per_connection:,.1f} KiB")
            publish = pika_confirmed_publish(gw.amqp_url, "bench", args.messages, body)
            print(f"pika publish, confirm per message (sync): {publish:,.0f} msg/s")
            consume = pika_consume(gw.amqp_url, "bench", args.messages)
            print(f"pika consume, manual ack, prefetch 1000:  {consume:,.0f} msg/s")
            pipelined = asyncio.run(
                aio_pika_pipelined(gw.amqp_url, "bench2", args.messages, body)
            )
            print(f"aio-pika publish, confirms pipelined:     {pipelined:,.0f} msg/s")
            consume2 = pika_consume(gw.amqp_url, "bench2", args.messages)
            print(f"pika consume of those:                    {consume2:,.0f} msg/s")
        finally:
            gw.stop()


if __name__ == "__main__":
    main()
