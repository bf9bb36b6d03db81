"""The embedded broker and the defences of docs/backend.md, against real pulsar-lite."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.waiting import async_wait_until
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.pulsar_backend import BackendError, PulsarBackend
from pulsar_gateway.gateway.messages import OutMessage


def _listening_ports(pid: int) -> set[int]:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    ports = set()
    for line in out.splitlines():
        if f"pid={pid}," in line:
            ports.add(int(line.split()[3].rsplit(":", 1)[1]))
    return ports


def run(coro):
    return asyncio.run(coro)


def test_embedded_broker_config_ports_and_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        fatal: list[str] = []
        broker = EmbeddedBroker(tmp_path / "b", restart_limit=1, on_fatal=fatal.append)
        await broker.start()
        config = (tmp_path / "b" / "pulsar-lite.toml").read_text()
        assert "default_partitions = 0" in config
        # its own port and its metrics (topic sizes) on loopback: none on 0.0.0.0:8080
        assert f'addr = "127.0.0.1:{broker.metrics_port}"' in config
        assert _listening_ports(broker.pid) == {broker.port, broker.metrics_port}
        first_pid = broker.pid
        os.kill(first_pid, signal.SIGKILL)
        await async_wait_until(lambda: broker.generation == 2, 5, message="a restart")
        assert broker.restarts == 1 and broker.pid != first_pid
        assert fatal == []
        # past the restart limit the gateway is told to give up instead of hanging
        os.kill(broker.pid, signal.SIGKILL)
        await async_wait_until(lambda: fatal, 5, message="the broker to be declared dead")
        assert "crashed" in fatal[0]
        await broker.stop()

    run(scenario())


def test_one_callback_stands_for_a_group(broker_url) -> None:
    """Pulsar acknowledges one producer's messages in order, so the last message's
    completion means the whole group is stored: every message is read back, in order."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        topic = f"persistent://public/default/group-{time.time_ns()}"
        groups = [
            [OutMessage(f"{g}:{i}".encode(), key=f"k{i % 5}") for i in range(500)]
            for g in range(20)
        ]
        results = await asyncio.gather(*(backend.send(topic, group) for group in groups))
        for first, last in results:
            assert first < last
        stream = await backend.open_reader(topic)
        got = []
        while len(got) < 10_000:
            got += await stream.read_batch(2000, timeout=10)
        expected = [m.payload for group in groups for m in group]
        assert sorted(m.payload for m in got) == sorted(expected)
        per_group: dict[bytes, list[int]] = {}
        for message in got:
            g, i = message.payload.split(b":")
            per_group.setdefault(g, []).append(int(i))
        assert all(v == list(range(500)) for v in per_group.values())
        await stream.close()
        await backend.close()

    run(scenario())


def test_group_fails_as_a_whole_when_the_broker_is_gone(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = EmbeddedBroker(tmp_path / "b", restart_limit=0)
        await broker.start()
        backend = PulsarBackend(
            broker.service_url, operation_timeout_seconds=3, send_timeout_ms=3000
        )
        await backend.start()
        topic = f"persistent://public/default/gone-{time.time_ns()}"
        await backend.send(topic, [OutMessage(b"warm-up")])
        await broker.stop()
        # a send timeout fails every message queued behind it, so the group fails as one
        with pytest.raises(BackendError):
            await asyncio.wait_for(backend.send(topic, [OutMessage(b"x")] * 50), 60)
        await backend.close()

    run(scenario())


def test_empty_topic_is_empty_not_an_error(broker_url) -> None:
    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        assert await backend.is_empty(f"persistent://public/default/empty-{time.time_ns()}")
        await backend.close()

    run(scenario())


def test_reader_is_complete_and_in_order_under_load(broker_url) -> None:
    """pulsar-lite readers replay delivered messages under load; the stream drops them."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        topic = f"persistent://public/default/replay-{time.time_ns()}"
        for queue in (20, 100, 1000):
            stream = await backend.open_reader(topic, receiver_queue_size=queue)
            sender = asyncio.ensure_future(
                asyncio.gather(
                    *(
                        backend.send(
                            topic, [OutMessage(f"{queue}:{g}:{i}".encode()) for i in range(250)]
                        )
                        for g in range(20)
                    )
                )
            )
            got = []
            while len(got) < 5000:
                got += [
                    m
                    for m in await stream.read_batch(1000, timeout=10)
                    if m.payload.startswith(f"{queue}:".encode())
                ]
            await sender
            ids = [m.id for m in got]
            assert ids == sorted(set(ids)), f"queue {queue}: duplicates or disorder"
            await stream.close()
        await backend.close()

    run(scenario())


def test_chunked_message_is_never_skipped(broker_url) -> None:
    """A 6 MiB message needs chunking; a reader that loses it is detected and reopened."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        topic = f"persistent://public/default/chunks-{time.time_ns()}"
        stream = await backend.open_reader(topic)
        big = b"B" * (6 * 1024 * 1024)
        for _ in range(3):
            await backend.send(topic, [OutMessage(b"a"), OutMessage(big), OutMessage(b"c")])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 9 and time.monotonic() < deadline:
            got += await stream.read_batch(100, timeout=2, expect_more=True)
        assert [len(m.payload) for m in got] == [1, len(big), 1] * 3
        await stream.close()
        await backend.close()

    run(scenario())


def test_a_reader_opened_inside_the_last_batch_sees_the_rest_of_it(broker_url) -> None:
    """pulsar-lite reports the last message of a topic without its batch index, so a
    reader positioned inside the last batched entry was told nothing is left (and a
    partition reopened at a checkpoint there was ready before it had numbered the rest).
    docs/backend.md, 'A reader inside the last batch'."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        topic = f"persistent://public/default/last-batch-{time.time_ns()}"
        await backend.send(topic, [OutMessage(b"lone")], batching=True)  # opens the ledger
        await backend.send(topic, [OutMessage(b"%d" % i) for i in range(50)], batching=True)
        everything = await backend.open_reader(topic)
        stored = []
        while len(stored) < 51:
            stored += await everything.read_batch(100, timeout=10)
        await everything.close()
        batched = [m for m in stored if m.id[2] > 0]
        assert batched, "the 50 records were not batched: nothing to test"
        for middle in (batched[0], batched[len(batched) // 2], stored[-1]):
            stream = await backend.open_reader(topic, middle.id)
            assert await stream.has_more(), f"nothing left seen from {middle.id}"
            first = await stream.read_batch(100, timeout=10)
            assert first and first[0].id == middle.id and first[0].payload == middle.payload
            rest = [m.id for m in first]
            while rest[-1] != stored[-1].id:
                rest += [m.id for m in await stream.read_batch(100, timeout=10)]
            assert rest == [m.id for m in stored if m.id >= middle.id]
            await stream.close()
        await backend.close()

    run(scenario())
