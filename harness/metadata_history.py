"""A gateway data directory with a long metadata history, and how long the gateway then
takes to start: for tests/integration/test_metadata_log.py and bench/metadata_startup.py."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

from harness.gateway_process import GatewayProcess
from harness.waiting import async_wait_until, wait_until
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE
from pulsar_gateway.gateway.messages import OutMessage
from pulsar_gateway.gateway.metadata_store import MetadataStore

PARTITIONS = 1000
LOADED = re.compile(r"metadata store loaded: \d+ keys from (\d+) records")


def _commit(group: str, partition: int, offset: int) -> tuple[str, dict[str, object]]:
    key = f"kafka-group/{group}/offsets/t{partition}"
    return key, {"offset": offset, "metadata": "", "commit_time": 1, "leader_epoch": -1}


async def settled(store: MetadataStore) -> None:
    """Until a snapshot the store started in the background is written."""
    await async_wait_until(
        lambda: store._snapshot_task is None or store._snapshot_task.done(),
        120,
        message="the snapshot to be written",
    )


def populate(data_dir: Path, port: int, records: int, legacy: bool = False) -> None:
    """`records` group-offset commits over PARTITIONS partitions in the metadata log of the
    gateway whose data directory is `data_dir`: written by the metadata store, or, with
    `legacy`, as records of a version without snapshots."""

    async def scenario() -> None:
        broker = EmbeddedBroker(data_dir / "pulsar", port=port)
        await broker.start()
        backend = PulsarBackend(broker.service_url)
        await backend.start()
        store = MetadataStore(backend, DEFAULT_METADATA_NAMESPACE)
        for first in range(0, records, PARTITIONS):
            commits = dict(
                _commit("g", i % PARTITIONS, i) for i in range(first, min(first + 1000, records))
            )
            if legacy:
                messages = [OutMessage(json.dumps(v).encode(), key=k) for k, v in commits.items()]
                await backend.send(store.topic, messages, batching=False)
            else:
                if first == 0:
                    await store.load()
                await store.put_many(commits)
        await settled(store)
        await store.close()
        await backend.close()
        await broker.stop()

    asyncio.run(scenario())


def start_up(data_dir: Path, port: int) -> tuple[float, int]:
    """Seconds from `pulsar-gateway run` to a healthy gateway, and the metadata records its
    load read. The gateway is stopped again once any snapshot it started is written."""
    gateway = GatewayProcess(data_dir, broker_port=port)
    earlier = gateway.log_path.stat().st_size if gateway.log_path.exists() else 0

    def this_run() -> str:
        return gateway.log_path.read_bytes()[earlier:].decode(errors="replace")

    started = time.monotonic()
    gateway.start()
    seconds = time.monotonic() - started
    try:
        loaded = LOADED.search(this_run())
        assert loaded, gateway.log_tail()
        if int(loaded.group(1)) > 10_000:  # it replayed a long history: let it snapshot
            wait_until(
                lambda: "metadata snapshot at" in this_run(),
                300,
                message="the gateway to snapshot its metadata",
            )
        return seconds, int(loaded.group(1))
    finally:
        assert gateway.stop() == 0, gateway.log_tail()
