"""What a consumer hands out: whole entries, and the reassembly of chunked messages.

A consumer delivers each entry as the broker stored it (`ReceivedEntry`): its id, metadata
and payload bytes, its redelivery count and the broker's entry metadata. A batched entry
is split into its messages only when the caller asks (`messages()`), in one pass
(`batch.split_batch`), so a reader that forwards entries never pays for it.

A message too large for one entry arrives as chunks, each an entry of its own, carrying
the same uuid and numbered from 0. `ChunkAssembler` joins them, in order, into one entry
with the last chunk's id; a chunk out of order drops the message being assembled (a
reconnect sends it again from its first chunk), and what is held is bounded in messages
and bytes (docs/pulsar-protocol.md, "Chunks").
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field

from pulsar_gateway.gateway.backend.wire.batch import (
    MessageTails,
    PropertyPairs,
    SingleMessage,
    entry_messages,
    entry_payload,
)
from pulsar_gateway.gateway.backend.wire.compression import DEFAULT_UNCOMPRESSED_LIMIT
from pulsar_gateway.gateway.backend.wire.ids import MessageId
from pulsar_gateway.gateway.backend.wire.messages import BrokerEntryMetadata, MessageMetadata

log = logging.getLogger("gateway.pulsar.wire")


@dataclass(slots=True)
class ReceivedEntry:
    """One entry as delivered: `id` has batch index -1 (a chunked message: its last
    chunk's id, the others in `chunk_ids`); `payload` is as stored, compressed or not, or
    b"" when `claimed` stands for it (`Consumer.claim`)."""

    id: MessageId
    metadata: MessageMetadata
    payload: bytes = field(repr=False)
    redelivery_count: int = 0
    broker_entry: BrokerEntryMetadata | None = None
    chunk_ids: tuple[MessageId, ...] = ()
    claimed: object = field(default=None, repr=False)

    @property
    def num_messages(self) -> int:
        count = self.metadata.num_messages_in_batch
        return 1 if count is None else count

    @property
    def batched(self) -> bool:
        return self.metadata.num_messages_in_batch is not None

    @property
    def size(self) -> int:
        return len(self.payload)

    def message_id(self, index: int) -> MessageId:
        """The id of the message at batch `index` (-1: the unbatched entry itself)."""
        return MessageId(self.id.ledger_id, self.id.entry_id, index)

    def data(self, limit: int = DEFAULT_UNCOMPRESSED_LIMIT) -> bytes:
        """The payload before compression (a batched entry's messages, still framed)."""
        return entry_payload(self.metadata, self.payload, limit)

    def messages(
        self,
        limit: int = DEFAULT_UNCOMPRESSED_LIMIT,
        pairs: PropertyPairs | None = None,
        tails: MessageTails | None = None,
    ) -> list[SingleMessage]:
        """The entry's messages: one (index -1) for an unbatched entry; `pairs` and `tails`
        as `batch.split_batch` takes them."""
        return entry_messages(self.metadata, self.payload, limit, pairs, tails)


class _Assembly:
    __slots__ = ("parts", "ids", "size", "total")

    def __init__(self, total: int) -> None:
        self.parts: list[bytes] = []
        self.ids: list[MessageId] = []
        self.size = 0
        self.total = total


class ChunkAssembler:
    """Joins chunks into whole entries; at most `max_messages` messages and `max_bytes`
    bytes are held at once (the oldest incomplete message is dropped to make room)."""

    def __init__(self, max_messages: int = 16, max_bytes: int = 128 * 1024 * 1024) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._assemblies: OrderedDict[str, _Assembly] = OrderedDict()
        self._held = 0
        self.dropped = 0

    def add(
        self, mid: MessageId, metadata: MessageMetadata, payload: bytes, redelivery_count: int
    ) -> ReceivedEntry | None:
        """The whole entry once `payload` completes its message, else None."""
        uuid = metadata.uuid or ""
        chunk = metadata.chunk_id or 0
        count = metadata.num_chunks_from_msg or 1
        total = metadata.total_chunk_msg_size or 0
        assembly = self._assemblies.get(uuid)
        if chunk == 0:
            if assembly is not None:
                self._drop(uuid, "started again")
            if total > self.max_bytes:
                self.dropped += 1
                log.warning("chunked message %s of %d bytes over the limit: dropped", uuid, total)
                return None
            assembly = self._assemblies[uuid] = _Assembly(total)
            while len(self._assemblies) > self.max_messages:
                self._drop(next(iter(self._assemblies)), "too many chunked messages at once")
        elif assembly is None or len(assembly.ids) != chunk:
            if assembly is not None:
                self._drop(uuid, f"chunk {chunk} out of order")
            return None
        assembly.parts.append(payload)
        assembly.ids.append(mid)
        assembly.size += len(payload)
        self._held += len(payload)
        if assembly.size > assembly.total:
            self._drop(uuid, "chunks larger than announced")
            return None
        while self._held > self.max_bytes and self._assemblies:
            oldest = next(iter(self._assemblies))
            self._drop(oldest, "chunk memory full")
            if oldest == uuid:
                return None
        if chunk < count - 1:
            return None
        del self._assemblies[uuid]
        self._held -= assembly.size
        if assembly.size != assembly.total:
            self.dropped += 1
            log.warning("chunked message %s: %d bytes, not %d", uuid, assembly.size, total)
            return None
        return ReceivedEntry(
            mid,
            metadata,
            b"".join(assembly.parts),
            redelivery_count,
            None,
            tuple(assembly.ids[:-1]),
        )

    def _drop(self, uuid: str, why: str) -> None:
        assembly = self._assemblies.pop(uuid, None)
        if assembly is not None:
            self._held -= assembly.size
            self.dropped += 1
            log.warning("chunked message %s dropped: %s", uuid, why)

    def clear(self) -> None:
        self._assemblies.clear()
        self._held = 0

    @property
    def held_bytes(self) -> int:
        return self._held
