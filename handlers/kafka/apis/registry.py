"""API key -> the coroutine that answers it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from handlers.kafka.apis import (
    api_versions,
    cluster,
    configs,
    fetch,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
    topic_admin,
)

Handler = Callable[[Any, Any, dict[str, Any]], Awaitable[dict[str, Any] | None]]

API_HANDLERS: dict[int, Handler] = {
    0: produce.handle,
    1: fetch.handle,
    2: list_offsets.handle,
    3: metadata.handle,
    18: api_versions.handle,
    19: topic_admin.create_topics,
    22: init_producer_id.handle,
    20: topic_admin.delete_topics,
    32: configs.describe_configs,
    37: topic_admin.create_partitions,
    60: cluster.describe_cluster,
}
