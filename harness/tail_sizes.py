"""What one message weighs in a partition's tail cache, as the cache itself counts it."""

from __future__ import annotations

from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.storage.kafka.tail_store import TailStore


def held(message: StoredMessage) -> int:
    """The `size` a fresh tail reaches by caching `message` alone."""
    tail = TailStore()
    tail.append(message, 0)
    size = tail.size
    tail.clear()
    return size
