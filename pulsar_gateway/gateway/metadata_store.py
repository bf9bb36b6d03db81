"""Durable gateway metadata, kept in Pulsar itself.

A keyed changelog topic in a system namespace: loaded into memory at start
(table-view style, last write per key wins) and appended to on every change, so
the state survives a gateway restart and can be shared by several gateways.
Values are JSON; a delete is a message with the `deleted` property. Writes are not
batched: a commit or a declare waits for them, and the batching delay would be most
of that wait.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.messages import OutMessage

log = logging.getLogger("gateway.metadata")


class MetadataStore:
    def __init__(self, backend: PulsarBackend, namespace: str) -> None:
        self.backend = backend
        self.topic = f"persistent://{namespace}/metadata"
        self._table: dict[str, Any] = {}
        # keys grouped by everything up to their last "/", so that listing one partition's
        # checkpoints does not scan every key of every partition
        self._groups: dict[str, dict[str, Any]] = {}

    def _set(self, key: str, value: Any) -> None:
        self._table[key] = value
        self._groups.setdefault(key[: key.rfind("/") + 1], {})[key] = value

    def _unset(self, key: str) -> None:
        self._table.pop(key, None)
        group = self._groups.get(key[: key.rfind("/") + 1])
        if group is not None:
            group.pop(key, None)

    async def load(self) -> None:
        """Replay the changelog up to its current end."""
        if await self.backend.is_empty(self.topic):
            log.info("metadata store %s is empty", self.topic)
            return
        # Write a marker and read until it comes back: the end of the log, even on pulsar-lite
        # where "last message id" calls are unreliable.
        marker, _ = await self.backend.send(
            self.topic, [OutMessage(b"", key="__load_marker__", properties={"deleted": "1"})]
        )
        stream = await self.backend.open_reader(self.topic)
        count = 0
        try:
            while True:
                batch = await stream.read_batch(5000, timeout=10, expect_more=True)
                if not batch:
                    raise TimeoutError(f"metadata store {self.topic} did not reach its end")
                for message in batch:
                    count += 1
                    if message.properties.get("deleted"):
                        self._unset(message.key)
                    else:
                        self._set(message.key, json.loads(message.payload or b"null"))
                if batch[-1].id >= marker:
                    break
        finally:
            await stream.close()
        log.info("metadata store loaded: %d keys from %d records", len(self._table), count)

    def get(self, key: str, default: Any = None) -> Any:
        return self._table.get(key, default)

    def children(self, folder: str) -> list[tuple[str, Any]]:
        """Keys directly below `folder` (which ends with "/"), without scanning the rest."""
        return list(self._groups.get(folder, {}).items())

    def items(self, prefix: str) -> Iterator[tuple[str, Any]]:
        for key, value in list(self._table.items()):
            if key.startswith(prefix):
                yield key, value

    async def put(self, key: str, value: Any) -> None:
        """Durable once this returns."""
        self._set(key, value)
        payload = json.dumps(value, separators=(",", ":")).encode()
        await self.backend.send(self.topic, [OutMessage(payload, key=key)], batching=False)

    async def put_many(self, items: dict[str, Any]) -> None:
        """Several keys in one append (one round trip); durable once this returns."""
        if not items:
            return
        messages = []
        for key, value in items.items():
            self._set(key, value)
            payload = json.dumps(value, separators=(",", ":")).encode()
            messages.append(OutMessage(payload, key=key))
        await self.backend.send(self.topic, messages, batching=False)

    async def delete(self, key: str) -> None:
        self._unset(key)
        await self.backend.send(
            self.topic, [OutMessage(b"", key=key, properties={"deleted": "1"})], batching=False
        )
