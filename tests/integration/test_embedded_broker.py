"""The embedded pulsar-lite process: its crash window, private files, and `make run`'s layout.

Against the real broker binary and a real `pulsar-gateway run` process.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

from harness.gateway_process import GatewayProcess
from harness.waiting import async_wait_until, wait_until
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker, broker_binary, process_alive
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.loopback_ports import free_port
from pulsar_gateway.gateway.messages import OutMessage

TOPIC = "persistent://public/default/layout-check"


def test_only_crashes_within_the_window_count(tmp_path: Path) -> None:
    """One crash a minute is restarted forever; more than restart_limit inside
    restart_window seconds is fatal. The clock is the broker's own, moved by the test."""

    async def scenario() -> None:
        now = [1000.0]
        fatal: list[str] = []
        broker = EmbeddedBroker(
            tmp_path / "b",
            restart_limit=1,
            restart_window=60,
            on_fatal=fatal.append,
            clock=lambda: now[0],
        )
        await broker.start()
        try:
            for crash in range(1, 4):
                os.kill(broker.pid, signal.SIGKILL)
                await async_wait_until(
                    lambda c=crash: broker.generation == c + 1, 20, message="a restart"
                )
                now[0] += 61
            assert fatal == [] and broker.restarts == 3
            os.kill(broker.pid, signal.SIGKILL)
            await async_wait_until(lambda: broker.generation == 5, 20, message="a restart")
            os.kill(broker.pid, signal.SIGKILL)  # the second crash within 60 s: give up
            await async_wait_until(lambda: fatal, 20, message="the broker to be declared dead")
            assert "2 times within 60s" in fatal[0]
        finally:
            await broker.stop()

    asyncio.run(scenario())


def _modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


async def _write_and_read(service_url: str, payload: bytes | None) -> list[bytes]:
    """Append `payload` (if any) to TOPIC, then everything TOPIC holds."""
    backend = PulsarBackend(service_url)
    await backend.start()
    try:
        if payload is not None:
            await backend.send(TOPIC, [OutMessage(payload)], batching=False)
        stream = await backend.open_reader(TOPIC)
        found = [m.payload for m in await stream.read_batch(100, timeout=5, expect_more=True)]
        await stream.close()
        return found
    finally:
        await backend.close()


def _read_url(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as page:
        return page.read().decode()


def test_ports_picked_and_taken_before_the_broker_binds_them_are_picked_again(
    tmp_path: Path,
) -> None:
    """A port picked free can be taken before the broker binds it (a full test run once
    failed so): the broker is started again on fresh ports, and reached on them. The
    ports are taken here by listening sockets, the service port in one broker, the
    metrics port (the broker runs on without metrics then) in another."""

    async def scenario() -> None:
        for taken_setting in ("port", "metrics_port"):
            broker = EmbeddedBroker(tmp_path / taken_setting, start_timeout=60)
            with socket.socket() as squatter:
                squatter.bind(("127.0.0.1", getattr(broker, taken_setting)))
                squatter.listen()
                taken = squatter.getsockname()[1]
                await broker.start()
                try:
                    assert getattr(broker, taken_setting) != taken
                    assert (
                        b"already in use" in (tmp_path / taken_setting / "broker.log").read_bytes()
                    )
                    assert await _write_and_read(broker.service_url, b"x") == [b"x"]
                    page = await asyncio.to_thread(_read_url, broker.metrics_url)
                    assert "pulsar" in page
                finally:
                    await broker.stop()

    asyncio.run(scenario())


def test_broker_files_are_private(tmp_path: Path) -> None:
    """A new data directory (with its parents) is 0700 and the broker's files 0600; a
    directory an older version left readable is tightened at start."""
    loose = tmp_path / "old" / "pulsar"
    loose.mkdir(parents=True, mode=0o755)
    os.chmod(loose, 0o755)
    (loose / "broker.log").write_text("from an older version\n")
    os.chmod(loose / "broker.log", 0o644)

    async def scenario() -> None:
        for data_dir in (tmp_path / "new" / "data" / "pulsar", loose):
            broker = EmbeddedBroker(data_dir)
            await broker.start()
            try:
                await _write_and_read(broker.service_url, b"private")
            finally:
                await broker.stop()

    asyncio.run(scenario())
    assert stat.S_IMODE((tmp_path / "new" / "data").stat().st_mode) == 0o700
    for root in (tmp_path / "new" / "data" / "pulsar", loose):
        modes = _modes(root)
        assert any(name.startswith("db.rocksdb/") for name in modes), modes
        wrong = {
            name: oct(mode)
            for name, mode in modes.items()
            if mode != (0o700 if (root / name).is_dir() else 0o600)
        }
        assert wrong == {}, f"not private in {root}: {wrong}"


class MakeRunGateway(GatewayProcess):
    """`make run`'s layout: started in `home` without --data-dir, so gateway.data_dir is its
    default, the relative "data", and the broker's directory is home/data/pulsar."""

    def __init__(self, home: Path) -> None:
        super().__init__(home / "data")
        self.home = self.cwd = home
        self.log_path = home / "gateway.log"

    def _command(self) -> list[str]:
        """Started in `home`, on the ports picked, with no --data-dir (`GatewayProcess.start`
        picks them again when one was taken meanwhile: cc57)."""
        return [
            *(sys.executable, "-m", "pulsar_gateway.cli", "run"),
            *("--kafka-port", str(self.kafka_port), "--amqp-port", str(self.amqp_port)),
            *("--metrics-port", str(self.metrics_port)),
            *("--set", f"embedded.port={self.broker_port}"),
        ]


def _listeners(pid: int) -> set[str]:
    """host:port of every TCP socket `pid` listens on."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3] for line in out.splitlines() if f"pid={pid}," in line}


def test_make_run_layout_listens_on_loopback_only(tmp_path: Path) -> None:
    """With the relative default data_dir the broker still reads its config (its metrics
    listener where the config puts it, on loopback, not on 0.0.0.0:8080; nothing beyond
    its two loopback ports) and keeps its database in data/pulsar, not
    data/pulsar/data/pulsar."""
    gateway = MakeRunGateway(tmp_path).start()
    try:
        broker = gateway.broker_pid()
        config = (tmp_path / "data" / "pulsar" / "pulsar-lite.toml").read_text()
        metrics = re.search(r'addr = "(127\.0\.0\.1:[0-9]+)"', config)
        assert metrics is not None, config
        assert _listeners(broker) == {f"127.0.0.1:{gateway.broker_port}", metrics[1]}
        service_url = f"pulsar://127.0.0.1:{gateway.broker_port}"
        assert asyncio.run(_write_and_read(service_url, b"in place")) == [b"in place"]
    finally:
        assert gateway.stop() == 0, gateway.log_tail()
    pulsar_dir = tmp_path / "data" / "pulsar"
    assert (pulsar_dir / "db.rocksdb").is_dir()
    assert not (pulsar_dir / "data").exists()
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700


def test_database_misplaced_by_an_old_start_is_moved_into_place(tmp_path: Path) -> None:
    """Older versions started the broker in data/pulsar with --db-path data/pulsar/db, so
    its database is in data/pulsar/data/pulsar: the next start moves it, keeping the data."""
    pulsar_dir = tmp_path / "data" / "pulsar"
    pulsar_dir.mkdir(parents=True)
    config = tmp_path / "no-metrics.toml"  # not the old relative one: that would take :8080
    config.write_text("default_partitions = 0\n\n[metrics]\nenabled = false\n")
    port = free_port()
    old = subprocess.Popen(
        [str(broker_binary()), "--addr", f"127.0.0.1:{port}"]
        + ["--db-path", "data/pulsar/db", "--config", str(config)],
        cwd=pulsar_dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: f"127.0.0.1:{port}" in _listeners(old.pid), 20, message="the old broker")
        asyncio.run(_write_and_read(f"pulsar://127.0.0.1:{port}", b"written before"))
    finally:
        old.terminate()
        old.wait(30)
    assert (pulsar_dir / "data" / "pulsar" / "db.rocksdb").is_dir()

    gateway = MakeRunGateway(tmp_path).start()
    try:
        service_url = f"pulsar://127.0.0.1:{gateway.broker_port}"
        assert asyncio.run(_write_and_read(service_url, None)) == [b"written before"]
        assert "moved the embedded broker database" in gateway.log_path.read_text()
    finally:
        assert gateway.stop() == 0, gateway.log_tail()
    assert (pulsar_dir / "db.rocksdb").is_dir()
    assert not (pulsar_dir / "data").exists()


def test_a_killed_gateways_broker_is_stopped_before_the_next_one_starts(tmp_path: Path) -> None:
    """The broker runs in its own session, so kill -9 of the gateway leaves it running on the
    database; the next gateway on that data directory stops it before starting its own, and
    what was acknowledged before the kill is all there."""
    from confluent_kafka import Consumer, Producer

    first = GatewayProcess(tmp_path / "gw").start()
    producer = Producer({"bootstrap.servers": first.bootstrap, "acks": "all"})
    for index in range(10):
        producer.produce("orphan-check", str(index).encode())
    assert producer.flush(30) == 0
    orphan = first.broker_pid()
    first.process.kill()
    first.process.wait()
    assert process_alive(orphan), "the killed gateway's broker should outlive it"
    second = GatewayProcess(tmp_path / "gw").start()
    try:
        assert not process_alive(orphan)
        assert second.broker_pid() != orphan
        consumer = Consumer(
            {
                "bootstrap.servers": second.bootstrap,
                "group.id": "orphan-check",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["orphan-check"])
        values: list[bytes] = []

        def read_all() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            return len(values) >= 10

        wait_until(read_all, 60, 0, "the records acknowledged before the kill")
        consumer.close()
        assert values == [str(index).encode() for index in range(10)]
    finally:
        second.stop()
