"""Bytes stored per Pulsar topic, for the console's topic sizes (docs/console.md).

Pulsar's binary protocol has no call for a topic's size, so it comes from the side doors:

- The embedded pulsar-lite exports `pulsar_storage_size{namespace,topic,partition}` on its
  Prometheus endpoint, which the gateway has it serve on a loopback port of its own
  (embedded.py). The broker refreshes the numbers every few seconds, and only for the
  topics it has loaded (the ones being written or read since it started); a partition it
  does not list has no size here. One scrape answers every topic; it is kept for
  CACHE_SECONDS and then read again in the background while the old one is answered, so
  pages refreshing every five seconds cost a scrape every ten seconds at most, and wait
  for none but the first.
- An Apache Pulsar cluster answers `storageSize` in each topic's admin stats (admin.py),
  one call per partition: asked only for a topic page's partitions (at most
  MAX_ADMIN_CALLS), never for the list of every topic.
- An external Pulsar without `pulsar.admin_url`: no sizes (the page says so).

Names are the Kafka partitions' Pulsar names (`<topic>-partition-<i>`); `stored_name` maps
each to the topic that stores it now (a topic created again after a deletion is stored
under a new name, storage/kafka/topics.py) and the answer is keyed by the asked names.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import urllib.request
from collections.abc import Callable

from pulsar_gateway.gateway.backend.admin import AdminError, PulsarAdmin

log = logging.getLogger("gateway.backend")

CACHE_SECONDS = 10.0
SCRAPE_TIMEOUT = 2.0
MAX_SCRAPE_BYTES = 64 * 1024 * 1024
MAX_ADMIN_CALLS = 256
ADMIN_CALLS_AT_ONCE = 8
_LINE = re.compile(r"^pulsar_storage_size\{(?P<labels>.*)\}\s+(?P<value>[0-9.eE+-]+)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_storage_sizes(text: str) -> dict[str, int]:
    """`pulsar_storage_size` samples of a Prometheus text page -> bytes per full topic
    name (`partition` -1: the topic itself, else `<topic>-partition-<n>`)."""
    sizes: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("pulsar_storage_size{"):
            continue
        found = _LINE.match(line)
        if found is None:
            continue
        labels = {
            key: value.replace('\\"', '"').replace("\\\\", "\\")
            for key, value in _LABEL.findall(found["labels"])
        }
        namespace, topic = labels.get("namespace"), labels.get("topic")
        if not namespace or not topic:
            continue
        partition = labels.get("partition", "-1")
        name = f"persistent://{namespace}/{topic}"
        if partition not in ("", "-1"):
            name += f"-partition-{partition}"
        try:
            sizes[name] = int(float(found["value"]))
        except ValueError:
            continue
    return sizes


class StorageSizes:
    """`await sizes(names)` -> bytes stored per name, for the names the backend can tell."""

    def __init__(
        self,
        stored_name: Callable[[str], str],
        metrics_url: str | None = None,
        admin: PulsarAdmin | None = None,
    ) -> None:
        self.stored_name = stored_name
        self.metrics_url = metrics_url
        self.admin = admin
        self._scraped: tuple[float, dict[str, int]] = (0.0, {})  # (monotonic time, sizes)
        self._refresh: asyncio.Future[None] | None = None

    @property
    def available(self) -> bool:
        return self.metrics_url is not None or self.admin is not None

    async def __call__(self, names: list[str]) -> dict[str, int]:
        stored = {name: self.stored_name(name) for name in names}
        if self.metrics_url is not None:
            every = await self._scrape()
            return {name: every[s] for name, s in stored.items() if s in every}
        if self.admin is not None and len(names) <= MAX_ADMIN_CALLS:
            return await self._from_admin(stored)
        return {}

    async def _scrape(self) -> dict[str, int]:
        """The last scrape; a stale one is answered at once while the next is read in
        the background (a thousand topics make a page of megabytes, read in ~0.1-0.5 s),
        so only the very first call waits."""
        if self._refresh is None or (
            self._refresh.done() and time.monotonic() - self._scraped[0] >= CACHE_SECONDS
        ):
            self._refresh = asyncio.ensure_future(self._read_in_background())
        if self._scraped[0] == 0.0:
            await asyncio.shield(self._refresh)
        return self._scraped[1]

    async def _read_in_background(self) -> None:
        try:
            sizes = await asyncio.to_thread(self._read_metrics)
        except (OSError, ValueError) as exc:
            log.info("topic sizes: the embedded broker's metrics cannot be read: %s", exc)
            sizes = {}
        self._scraped = (time.monotonic(), sizes)

    def _read_metrics(self) -> dict[str, int]:
        assert self.metrics_url is not None
        with urllib.request.urlopen(self.metrics_url, timeout=SCRAPE_TIMEOUT) as response:  # noqa: S310
            return parse_storage_sizes(response.read(MAX_SCRAPE_BYTES).decode(errors="replace"))

    async def _from_admin(self, stored: dict[str, str]) -> dict[str, int]:
        assert self.admin is not None
        admin = self.admin
        gate = asyncio.Semaphore(ADMIN_CALLS_AT_ONCE)
        sizes: dict[str, int] = {}

        async def one(name: str, topic: str) -> None:
            async with gate:
                try:
                    sizes[name] = await admin.storage_size(topic)
                except (AdminError, ValueError, TypeError) as exc:
                    log.debug("topic sizes: no admin stats for %s: %s", topic, exc)

        await asyncio.gather(*(one(name, topic) for name, topic in stored.items()))
        return sizes
