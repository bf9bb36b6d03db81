"""What goes with a deleted topic besides its partitions.

A topic deleted and created again under its name starts afresh: the consumer groups'
committed offsets and the share groups' state on its partitions go with it (docs/offsets.md).
The topic service calls the function made here once the partitions are gone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pulsar_gateway.storage.kafka.group_offsets import GroupOffsetStore
from pulsar_gateway.storage.kafka.share_states import ShareStateStore
from pulsar_gateway.storage.kafka.topics import TopicService


def forget_with_topic(
    topics: TopicService, offsets: GroupOffsetStore, shares: ShareStateStore
) -> Callable[[list[str]], Awaitable[None]]:
    """The `TopicService.forget_partitions` hook: offsets are kept by partition name, share
    state by stored Pulsar partition (a new incarnation's differs)."""

    async def forget(partitions: list[str]) -> None:
        stored = [topics.stored_partition(name) for name in partitions]
        await offsets.forget_partitions(partitions)
        await shares.forget_partitions(stored)

    return forget
