"""One embedded broker that several gateway processes share (a cluster's Pulsar)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker


class SharedBroker:
    """pulsar-lite on a free port, run from its own event loop; stop() when done."""

    def __init__(self, data_dir: Path) -> None:
        self._loop = asyncio.new_event_loop()
        self._broker = EmbeddedBroker(data_dir)

    def start(self) -> SharedBroker:
        self._loop.run_until_complete(self._broker.start())
        return self

    @property
    def service_url(self) -> str:
        return self._broker.service_url

    def stop(self) -> None:
        self._loop.run_until_complete(self._broker.stop())
        self._loop.close()
