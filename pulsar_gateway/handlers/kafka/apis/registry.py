"""API key -> the coroutine that answers it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pulsar_gateway.handlers.kafka.apis import (
    api_versions,
    cluster,
    configs,
    fetch,
    group_offsets,
    groups,
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
    8: group_offsets.offset_commit,
    9: group_offsets.offset_fetch,
    10: groups.find_coordinator,
    11: groups.join_group,
    12: groups.heartbeat,
    13: groups.leave_group,
    14: groups.sync_group,
    15: groups.describe_groups,
    16: groups.list_groups,
    18: api_versions.handle,
    19: topic_admin.create_topics,
    22: init_producer_id.handle,
    20: topic_admin.delete_topics,
    32: configs.describe_configs,
    37: topic_admin.create_partitions,
    42: groups.delete_groups,
    47: group_offsets.offset_delete,
    60: cluster.describe_cluster,
}
