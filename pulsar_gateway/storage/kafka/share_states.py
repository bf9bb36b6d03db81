"""Share groups' per-partition delivery state (KIP-932), kept in the metadata store.

One key per share group and partition, `kafka-share/<group>/<pulsar partition topic>`
(both percent-quoted), holding `{"start", "end", "runs": [[first, last, state, count(, returns)]]}`:
the share partition's bounds and its in-flight records as runs of equal state and delivery
count, so a window of records delivered alike is one run however long. The store is
written through Pulsar, so the state survives a gateway kill -9 and every cluster member
reads the same (docs/share-groups.md says what is kept and what is not). `on_save` hears
each partition's settled start, which the composition root hands to the subscription
mirror: the share group's durable subscription `__kafka.group.<group>` then sits at the
first record the group has not settled, so Pulsar's backlog is the group's and retention
keeps what it still has to deliver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.handlers.kafka.port import ShareRun, ShareState

PREFIX = "kafka-share/"
GROUPS = "kafka-share-groups/"  # one key per share group with state: listed without a scan


def _folder(group_id: str) -> str:
    return f"{PREFIX}{quote(group_id, safe='')}/"


def state_record(state: ShareState) -> dict[str, Any]:
    record: dict[str, Any] = {
        "start": state.start,
        "end": state.end,
        "runs": [_run(run) for run in state.runs],
    }
    if state.floor:  # only where the offsets admin set one (broker dispatch)
        record["floor"] = state.floor
    return record


def _run(run: ShareRun) -> list[int]:
    """A run's four numbers, and the gateway's own returns of its entry to the broker
    (`ShareRun.returns`) only where there are some: state written without the broker's
    dispatch stays readable by a gateway that knows four."""
    kept = [run.first, run.last, run.state, run.delivery_count]
    return [*kept, run.returns] if run.returns else kept


def state_from(record: Any) -> ShareState | None:
    """The stored form read back; None for anything unreadable (started afresh)."""
    try:
        runs = tuple(ShareRun(*(int(value) for value in run)) for run in record["runs"])
        floor = int(record.get("floor", 0))
        return ShareState(int(record["start"]), int(record["end"]), runs, floor)
    except (KeyError, TypeError, ValueError):
        return None


class ShareStateStore:
    """The Pulsar implementation of the port's ShareStateStore."""

    def __init__(
        self,
        metadata: MetadataStore,
        on_save: Callable[[str, str, int], None] | None = None,
    ) -> None:
        self.metadata = metadata
        # (partition topic, group id, start): the subscription mirror moves the share
        # group's Pulsar subscription to the first record not yet settled
        self.on_save = on_save

    def load(self, group_id: str, partition_topic: str) -> ShareState | None:
        record = self.metadata.get(_folder(group_id) + quote(partition_topic, safe=""))
        return None if record is None else state_from(record)

    async def save(self, group_id: str, partition_topic: str, state: ShareState) -> None:
        key = _folder(group_id) + quote(partition_topic, safe="")
        changes: dict[str, Any] = {key: state_record(state)}
        listed = GROUPS + quote(group_id, safe="")
        if self.metadata.get(listed) is None:
            changes[listed] = 1
        await self.metadata.put_many(changes)
        if self.on_save is not None:
            self.on_save(partition_topic, group_id, state.start)

    def groups(self) -> list[str]:
        return sorted(unquote(key[len(GROUPS) :]) for key, _value in self.metadata.children(GROUPS))

    async def delete_group(self, group_id: str) -> None:
        for key, _value in self.metadata.children(_folder(group_id)):
            await self.metadata.delete(key)
        listed = GROUPS + quote(group_id, safe="")
        if self.metadata.get(listed) is not None:
            await self.metadata.delete(listed)

    async def delete(self, group_id: str, partition_topic: str) -> None:
        key = _folder(group_id) + quote(partition_topic, safe="")
        if self.metadata.get(key) is not None:
            await self.metadata.delete(key)

    async def forget_partitions(self, partition_topics: list[str]) -> None:
        """A deleted topic's partitions, for every share group: else the state of a topic's
        old incarnation would stay for ever (the store growing with every delete/create
        cycle), and where a backend deletes for real, a topic created again on the same
        Pulsar topics would find its predecessor's start offset."""
        await asyncio.gather(
            *(
                self.delete(group_id, topic)
                for group_id in self.groups()
                for topic in partition_topics
            )
        )
