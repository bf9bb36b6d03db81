"""Kafka consumer groups' durable state: committed offsets and the last generation.

Kept in the metadata store, so it survives gateway and broker restarts:
- `kafka-group/<group>/offsets/<pulsar partition topic>` -> offset, metadata, commit time;
- `kafka-group-state/<group>` -> the last generation and protocol type (generations
  never go backwards after a restart).
Group ids and topic names are percent-quoted in keys (both may hold "/"), so one
group's offsets are a single folder of the store. `on_commit` (the subscription
mirror) hears of every stored offset, `on_forget` of partitions whose topic is deleted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, unquote

from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.handlers.kafka.port import CommittedOffset

OFFSETS_PREFIX = "kafka-group/"
STATE_PREFIX = "kafka-group-state/"
QUOTE_CACHE_SIZE = 10_000  # partition topics whose quoted key part is kept


def offset_record(entry: CommittedOffset) -> dict[str, Any]:
    """The stored form: `dataclasses.asdict` without its deep copy (all fields are plain)."""
    return {
        "offset": entry.offset,
        "metadata": entry.metadata,
        "commit_time": entry.commit_time,
        "leader_epoch": entry.leader_epoch,
    }


def _same_position(old: CommittedOffset, new: CommittedOffset) -> bool:
    """Everything but the commit time is equal."""
    return (old.offset, old.metadata, old.leader_epoch) == (
        new.offset,
        new.metadata,
        new.leader_epoch,
    )


def _offsets_folder(group_id: str) -> str:
    return f"{OFFSETS_PREFIX}{quote(group_id, safe='')}/offsets/"


class GroupOffsetStore:
    def __init__(
        self,
        metadata: MetadataStore,
        on_commit: Callable[[str, str, int], None] | None = None,
        on_forget: Callable[[list[str]], Awaitable[None]] | None = None,
    ) -> None:
        self.metadata = metadata
        self.on_commit = on_commit  # (pulsar partition topic, group id, offset)
        self.on_forget = on_forget  # (pulsar partition topics)
        self._offsets: dict[str, dict[str, CommittedOffset]] = {}
        self._states: dict[str, tuple[int, str]] = {}
        self._quotes: dict[str, str] = {}  # partition topic -> its key part; bounded

    def _quoted(self, topic: str) -> str:
        """The topic's part of a key: quoting costs more than the rest of a commit."""
        quoted = self._quotes.get(topic)
        if quoted is None:
            if len(self._quotes) >= QUOTE_CACHE_SIZE:
                self._quotes.clear()
            quoted = self._quotes[topic] = quote(topic, safe="")
        return quoted

    def load(self) -> None:
        """Index what the (already loaded) metadata store holds."""
        for key, value in self.metadata.items(OFFSETS_PREFIX):
            self.apply_change(key, value)
        for key, value in self.metadata.items(STATE_PREFIX):
            self.apply_change(key, value)

    def apply_change(self, key: str, value: Any) -> None:
        """One key of the metadata store as it now is (None: deleted): at load, and as
        another cluster member's commits are followed (MetadataStore.watch)."""
        if key.startswith(OFFSETS_PREFIX):
            group_part, _, rest = key[len(OFFSETS_PREFIX) :].partition("/offsets/")
            if not rest:
                return
            group_id, topic = unquote(group_part), unquote(rest)
            if isinstance(value, dict):
                self._offsets.setdefault(group_id, {})[topic] = CommittedOffset(**value)
            elif value is None:
                stored = self._offsets.get(group_id, {})
                stored.pop(topic, None)
                if not stored:
                    self._offsets.pop(group_id, None)
        elif key.startswith(STATE_PREFIX):
            group_id = unquote(key[len(STATE_PREFIX) :])
            if isinstance(value, dict):
                self._states[group_id] = (int(value["generation"]), value.get("protocol_type", ""))
            elif value is None:
                self._states.pop(group_id, None)

    # ---- offsets ---------------------------------------------------------------------------

    def get(self, group_id: str, topic: str) -> CommittedOffset | None:
        return self._offsets.get(group_id, {}).get(topic)

    def offsets(self, group_id: str) -> dict[str, CommittedOffset]:
        return dict(self._offsets.get(group_id, {}))

    async def commit(self, group_id: str, entries: dict[str, CommittedOffset]) -> None:
        """Durable once this returns. The partitions' records go into one metadata write,
        which shares its durable append with the other commits of the same loop turn (the
        metadata store's group commit)."""
        now = int(time.time() * 1000)
        folder = _offsets_folder(group_id)
        writes = {}
        stored = self._offsets.setdefault(group_id, {})
        for topic, entry in entries.items():
            if entry.commit_time <= 0:
                # the same position committed again keeps its time, so the metadata store
                # writes nothing (an idle consumer commits every few seconds)
                old = stored.get(topic)
                if old is not None and _same_position(old, entry):
                    entry.commit_time = old.commit_time
                else:
                    entry.commit_time = now
            stored[topic] = entry
            writes[folder + self._quoted(topic)] = offset_record(entry)
        await self.metadata.put_many(writes)
        if self.on_commit is not None:
            for topic, entry in entries.items():
                self.on_commit(topic, group_id, entry.offset)

    async def delete(self, group_id: str, topics: list[str]) -> None:
        stored = self._offsets.get(group_id, {})
        folder = _offsets_folder(group_id)
        removed = [topic for topic in topics if stored.pop(topic, None) is not None]
        await asyncio.gather(*(self.metadata.delete(folder + quote(t, safe="")) for t in removed))
        if not stored:
            self._offsets.pop(group_id, None)

    async def forget_partitions(self, topics: list[str]) -> None:
        """Every group's offsets on these partition topics go, because their topic is deleted:
        as Kafka drops a deleted partition's offsets, so that a topic re-created under the
        name starts with no committed offsets (and no lag) from its predecessor."""
        if self.on_forget is not None:
            await self.on_forget(topics)
        await asyncio.gather(*(self.delete(group_id, topics) for group_id in list(self._offsets)))

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._offsets.get(group_id))

    def groups_with_offsets(self) -> list[str]:
        return [group_id for group_id, offsets in self._offsets.items() if offsets]

    # ---- group state -----------------------------------------------------------------------

    def group_state(self, group_id: str) -> tuple[int, str]:
        return self._states.get(group_id, (0, ""))

    async def save_group_state(self, group_id: str, generation: int, protocol_type: str) -> None:
        self._states[group_id] = (generation, protocol_type)
        await self.metadata.put(
            STATE_PREFIX + quote(group_id, safe=""),
            {"generation": generation, "protocol_type": protocol_type},
        )

    async def delete_group(self, group_id: str) -> None:
        """Offsets go; the generation stays, so a re-created group still counts upwards."""
        await self.delete(group_id, list(self._offsets.get(group_id, {})))
