"""The embedded broker is restarted after it drops a connection on an I/O error.

pulsar-lite keeps the consumers of such a connection registered, and a Shared subscription
then hands nothing to anyone (docs/backend.md, "A reset connection leaves its consumers
behind"). Against the real broker binary, with a real pulsar-client in a child process that
is stopped and then killed with messages unread in its socket, so that the kernel resets
its connection.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pulsar

from harness.waiting import async_wait_until
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker

# A Shared consumer that takes one message without acknowledging it, then idles.
CHILD = """
import sys, time
import pulsar
client = pulsar.Client(sys.argv[1], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
consumer = client.subscribe(sys.argv[2], "sub", consumer_type=pulsar.ConsumerType.Shared)
print("ready", flush=True)
consumer.receive(30000)
print("received", flush=True)
time.sleep(600)
"""
MESSAGES = 50


def unread_bytes_from(pid: int, port: int) -> int:
    """Bytes waiting unread in the sockets of process `pid` that come from `port`."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    unread = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port = int(fields[2].split(":")[1], 16)
        if fields[9] in inodes and remote_port == port:
            unread += int(fields[4].split(":")[1], 16)
    return unread


def client(url: str) -> pulsar.Client:
    return pulsar.Client(
        url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def test_a_subscription_held_by_a_killed_consumer_delivers_again(tmp_path: Path) -> None:
    """A consumer process stopped with messages in flight and then killed leaves its
    consumer registered in pulsar-lite; a new consumer of the subscription gets nothing
    until the broker restarts. The gateway's broker restarts by itself (planned, not a
    crash) and the new consumer receives every unacknowledged message."""

    async def scenario() -> None:
        broker = EmbeddedBroker(tmp_path / "broker", heal_quiet=0.2, heal_interval=1.0)
        await broker.start()
        topic = f"persistent://public/default/heal-{uuid.uuid4().hex[:8]}"
        owner = await asyncio.to_thread(client, broker.service_url)
        child = None
        try:
            await asyncio.to_thread(
                lambda: owner.subscribe(
                    topic, "sub", consumer_type=pulsar.ConsumerType.Shared
                ).close()
            )
            producer = await asyncio.to_thread(owner.create_producer, topic, batching_enabled=False)
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, broker.service_url, topic],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None
            assert "ready" in await asyncio.to_thread(child.stdout.readline)
            await asyncio.to_thread(producer.send, b"0")
            assert "received" in await asyncio.to_thread(child.stdout.readline)
            # stopped, its client reads nothing more: what the broker sends it stays unread
            os.kill(child.pid, signal.SIGSTOP)
            for n in range(1, MESSAGES):
                await asyncio.to_thread(producer.send, str(n).encode())
            await async_wait_until(
                lambda: unread_bytes_from(child.pid, broker.port) > 0,
                10,
                message="messages unread in the stopped consumer's socket",
            )
            child.kill()  # with unread data: the kernel resets the connection
            await asyncio.to_thread(child.wait)

            reader = await asyncio.to_thread(client, broker.service_url)
            # a consumer elsewhere first: this client's queue consumer then has another id
            # than the killed one's, so it joins; what it receives is the question
            await asyncio.to_thread(reader.subscribe, topic + "-other", "other")
            consumer = await asyncio.to_thread(
                reader.subscribe, topic, "sub", consumer_type=pulsar.ConsumerType.Shared
            )
            received: set[int] = set()

            def receive_some() -> bool:
                try:
                    message = consumer.receive(200)
                except pulsar.Timeout:
                    return len(received) == MESSAGES
                received.add(int(message.data()))
                consumer.acknowledge(message)
                return len(received) == MESSAGES

            await async_wait_until(
                lambda: asyncio.to_thread(receive_some),
                60,
                interval=0,
                message=lambda: f"every message; received {len(received)} of {MESSAGES}",
            )
            assert received == set(range(MESSAGES))
            assert broker.heal_restarts == 1 and broker.restarts == 0
            await asyncio.to_thread(reader.close)
        finally:
            if child is not None and child.poll() is None:
                child.kill()
            await asyncio.to_thread(owner.close)
            await broker.stop()

    asyncio.run(scenario())
