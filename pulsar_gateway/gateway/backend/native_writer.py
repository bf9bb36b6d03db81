"""Kafka record batches as whole Pulsar batched entries, through the gateway's own wire
client (`wire/`, docs/pulsar-protocol.md): what `pulsar.client = "native"` changes.

With pulsar-client every record is a message built, sent and called back on its own
(about 11 us of client calls a record: docs/backend.md, "What pulsar-client costs per
message from Python"). Here a Kafka record batch becomes ONE batched entry, its bytes built
in one pass (`entries`), one SEND and one receipt: the receipt's (ledger, entry) names every
record of it, batch indexes 0..n-1, so the tailer's numbering is found with two look-ups
however many records the batch holds. Each record is still a message of its own to any
Pulsar consumer, with the fields `PulsarBackend` writes through pulsar-client (partition
and ordering key, properties, event time, null value, the `__gw.seq` stamp), so
docs/pulsar-mapping.md holds unchanged.

What stays as it was: the first message a writer sends while its ledger is not known to
hold an entry goes out alone and is stored before any batch follows (docs/backend.md, "A
batch must not open a ledger": the tailer still reads with pulsar-client); a batch over the
broker's message size is cut into several entries, and a record over it alone is an
unbatched entry the wire producer sends in chunks; the `__gw.seq` stamps (and their
"more follows" mark) let the resend filter drop a copy a reconnect left and the tailer
number a batch whole across entries (docs/offsets.md).
"""

from __future__ import annotations

import asyncio
import io
import logging
import operator
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Literal, NamedTuple

from pulsar_gateway.gateway.backend.connection_security import PulsarSecurity
from pulsar_gateway.gateway.backend.resend_filter import stamp_text
from pulsar_gateway.gateway.backend.topic_writer import TopicWriter
from pulsar_gateway.gateway.backend.wire import (
    Client,
    MessageId,
    OutgoingEntry,
    Producer,
    PulsarError,
    message_fields,
)
from pulsar_gateway.gateway.backend.wire.batch import (
    IN_ENTRY,
    PAYLOAD_SIZES,
    VARINTS,
    encode_properties,
    varint,
)
from pulsar_gateway.gateway.backend.wire.protobuf import encode_varint
from pulsar_gateway.gateway.backend.written_entries import WrittenEntries, WrittenEntry
from pulsar_gateway.gateway.messages import (
    MessageKey,
    OutMessage,
    PrebuiltEntry,
    ProducedBatch,
    RecordMessages,
)

log = logging.getLogger("gateway.backend")

ClientChoice = Literal["pulsar-client", "native"]
PULSAR_CLIENT: ClientChoice = "pulsar-client"
NATIVE: ClientChoice = "native"

# Room under the broker's message size for what is not the batch payload (the entry's
# metadata, the frame's head); the wire producer keeps 4 KiB for itself on top.
ENTRY_HEADROOM = 16 * 1024
# `__gw.seq` as a KeyValue's name, then the value's key: 0x0a, 8, the name, 0x12.
_SEQ_NAME = b"\x0a\x08__gw.seq\x12"
_pack_size = struct.Struct(">I").pack


def _seq_property(sequence: int, more: bool, key_tag: bytes = b"\x0a") -> bytes:
    """The `__gw.seq` property (resend_filter.stamp_text) as an encoded KeyValue field."""
    text = stamp_text(sequence, more).encode()
    n = len(text)  # a decimal int64 and a mark: always under 0x80 bytes
    return key_tag + VARINTS[n + 12] + _SEQ_NAME + VARINTS[n] + text


def _fields(message: OutMessage, sequence: int, more: bool, in_entry: bool = False) -> bytes:
    """A message's metadata fields as `PulsarBackend._build` sets them through
    pulsar-client: the key as partition and ordering key, properties, event time."""
    key = message.key.encode("utf-8", "surrogateescape") if message.key else None
    if in_entry:
        return message_fields(
            key,
            message.properties or None,
            message.event_time if message.event_time > 0 else 0,
            key,
            message.payload is None,
            tags=IN_ENTRY,
            encoded_properties=_seq_property(sequence, more, b"\x22"),
        )
    return message_fields(
        key,
        message.properties or None,
        message.event_time if message.event_time > 0 else 0,
        key,
        message.payload is None,
        encoded_properties=_seq_property(sequence, more),
    )


def lone_entry(message: OutMessage, sequence: int, more: bool) -> OutgoingEntry:
    """One message as an unbatched entry (chunked by the producer when over the size)."""
    return OutgoingEntry(_fields(message, sequence, more, in_entry=True), message.payload or b"")


def entries(
    messages: Sequence[OutMessage],
    first_sequence: int,
    whole: bool,
    limit: int,
    produced: ProducedBatch | None = None,
    noted: bool = True,
) -> list[OutgoingEntry]:
    """`messages` as batched entries of at most `limit` payload bytes each, in order; a
    message that alone is over `limit` becomes an unbatched entry. The n-th message gets
    stamp `first_sequence + n`, marked "more follows" when `whole` and it is not the last.
    Each batched entry notes the messages it was built from (`WrittenEntry`), for the
    gateway's own reader (written_entries.py); one holding them all notes `produced` too
    (the Kafka batch they are, when the caller has it), which the tailer then numbers as one;
    none does when not `noted`.

    One pass, the entry's bytes as they go: each message's fields as `_fields` writes them
    (the stamp, the properties, the key as partition key, the event time, the key again as
    ordering key, the null value mark), with a batch's repeated keys and times encoded once.
    """
    out: list[OutgoingEntry] = []
    parts: list[bytes] = []  # the open entry's payload so far
    start = count = size = 0  # the open entry's first message, its messages, its cost
    last = len(messages) - 1
    keys: dict[str, tuple[bytes, bytes]] = {}  # key -> its partition and ordering key fields
    times: dict[int, bytes] = {}  # event time -> its field
    last_properties: dict[str, str] | None = None  # the last message's, and their fields
    last_order: list[str] = []  # their names in order (headers keep their order)
    last_encoded = b""
    table = VARINTS
    sizes = PAYLOAD_SIZES

    def close(end: int) -> None:
        whole_batch = produced if start == 0 and end > last else None
        written = WrittenEntry(
            messages[start:end], first_sequence + start, whole, end > last, whole_batch
        )
        head = b"\x58" + varint(count)  # num_messages_in_batch (11)
        out.append(
            OutgoingEntry(head, b"".join(parts), count, True, note=written if noted else None)
        )

    for index, message in enumerate(messages):
        more = whole and index != last
        text = (b"%d+" if more else b"%d") % (first_sequence + index)
        n = len(text)  # a decimal int64 and a mark: always under 0x80 bytes
        fields = [b"\x0a", table[n + 12], _SEQ_NAME, table[n], text]
        properties = message.properties
        if properties:
            # an AMQP group's mostly repeat: encoded once; in their order (headers' order)
            if properties != last_properties or list(properties) != last_order:
                last_properties, last_order = properties, list(properties)
                last_encoded = encode_properties(properties)
            fields.append(last_encoded)
        key = message.key
        key_fields = None
        if key:
            key_fields = keys.get(key)
            if key_fields is None:
                raw = key.encode("utf-8", "surrogateescape")
                raw_size = varint(len(raw))
                key_fields = keys[key] = (b"\x12" + raw_size + raw, b"\x3a" + raw_size + raw)
            fields.append(key_fields[0])
        event_time = message.event_time
        if event_time > 0:
            time_field = times.get(event_time)
            if time_field is None:
                time_field = times[event_time] = b"\x28" + encode_varint(event_time)
            fields.append(time_field)
        if key_fields is not None:
            fields.append(key_fields[1])
        payload = message.payload
        if payload is None:
            fields.append(b"\x48\x01")
            payload = b""
        metadata = b"".join(fields)
        length = len(payload)
        cost = len(metadata) + length + 8  # the size word and the payload size field
        if cost > limit:
            if count:
                close(index)
                parts, count, size = [], 0, 0
            out.append(lone_entry(message, first_sequence + index, more))
            start = index + 1
            continue
        if size + cost > limit and count:
            close(index)
            parts, count, size = [], 0, 0
            start = index
        size_field = sizes[length] if length < len(sizes) else b"\x18" + encode_varint(length)
        parts += (_pack_size(len(metadata) + len(size_field)), metadata, size_field, payload)
        count += 1
        size += cost
    if count:
        close(len(messages))
    return out


def _escaped(raw: bytes) -> bytes:
    """`raw` as literal bytes of a `%`-format."""
    return raw.replace(b"%", b"%%")


def _head_form(size: int, stamp: bytes, mark: bytes, own: bytes, added: bytes) -> bytes:
    """The `%`-format of a message's head: size word, stamp (`stamp`, the number, `mark`),
    its own properties and the added ones."""
    return _escaped(_pack_size(size)) + stamp + b"%d" + mark + _escaped(own + added)


def _heads(
    prebuilt: PrebuiltEntry,
    rest_sizes: list[int],
    first_sequence: int,
    whole: bool,
    others: bytes,
    first: bytes,
) -> list[bytes]:
    """Each message's size word, `__gw.seq` stamp, own and added properties (`others`;
    `first` on the first message), as `entries` writes them, one `bytes` a message: made
    by one `%` each from a format per run of equally long stamps and per (metadata size, own
    properties), which a batch has few of; the `%`s run in C (`map`), no Python line a
    message (docs/pulsar-protocol.md, "One pass")."""
    owns = prebuilt.owns
    if not owns:  # (no records: nothing to stamp, as `entries` would have it)
        return []
    sizes = list(map(operator.add, map(len, owns), rest_sizes))
    count = len(sizes)
    out: list[bytes] = []
    sequence, end = first_sequence, first_sequence + count
    mark = b"+" if whole else b""
    same = owns.count(owns[0]) == count  # (an identity check first: shared objects)
    while sequence < end:
        digits = len(str(sequence))
        run_end = min(end, 10**digits) if sequence >= 0 else sequence + 1
        n = digits + len(mark)
        stamp = _escaped(b"\x0a" + VARINTS[n + 12] + _SEQ_NAME + VARINTS[n])
        grow = 2 + 12 + n + len(others)  # the stamp field's bytes, the added properties'
        a, b = sequence - first_sequence, run_end - first_sequence
        forms: Iterator[bytes]
        if same:  # the messages' own properties one object: a format per size
            per_size = sizes[a:b]
            by_size = {
                size: _head_form(size + grow, stamp, mark, owns[0], others)
                for size in set(per_size)
            }
            forms = map(by_size.__getitem__, per_size)
        else:
            shapes = list(zip(sizes[a:b], owns[a:b], strict=True))
            by_shape = {
                shape: _head_form(shape[0] + grow, stamp, mark, shape[1], others)
                for shape in set(shapes)
            }
            forms = map(by_shape.__getitem__, shapes)
        out += map(operator.mod, forms, range(sequence, run_end))
        sequence = run_end
    # the first message's added properties and the last one's missing mark, on their own
    last = count - 1
    for index in {0, last}:
        stamp = _seq_property(first_sequence + index, whole and index < last)
        fields = stamp + owns[index] + (first if index == 0 else others)
        out[index] = _pack_size(len(fields) + rest_sizes[index]) + fields
    return out


class EntryBuffers:
    """A few buffers the payloads of big prebuilt entries are joined into, again and again.

    Joined into a new `bytes`, an entry of a big Kafka batch (a megabyte) was a fresh
    mapping at the gateway's 512 KiB malloc threshold, every page of it faulted in: the
    join cost about four times what it does into a buffer used before (docs/pulsar-
    protocol.md, "Page faults"). A buffer is handed out as a view of what was joined into
    it and is free again once that view is gone (the send acknowledged and dropped): until
    then Python refuses to write into it (BufferError), so a buffer still being sent or
    kept for a resend is never overwritten, only passed over. Entries outside
    [`smallest`, `largest`] bytes, or when every buffer is held, are joined as before.
    What stays allocated is at most `count` x `largest` bytes."""

    def __init__(
        self, count: int = 4, smallest: int = 256 * 1024, largest: int = 2 * 1024 * 1024
    ) -> None:
        self.count = count
        self.smallest = smallest
        self.largest = largest
        self._buffers: list[io.BytesIO] = []

    def join(self, parts: list[bytes], size: int | None = None) -> bytes | memoryview:
        """`parts` joined (`size`: their length, when the caller knows it)."""
        if size is None:
            size = sum(map(len, parts))
        if not self.smallest <= size <= self.largest:
            return b"".join(parts)
        for buffer in self._buffers:
            buffer.seek(0)
            try:
                buffer.writelines(parts)
            except BufferError:  # still exported: its entry is not done with
                continue
            return buffer.getbuffer()[:size]
        if len(self._buffers) == self.count:
            return b"".join(parts)
        buffer = io.BytesIO()
        self._buffers.append(buffer)
        buffer.writelines(parts)
        return buffer.getbuffer()[:size]


def _join(parts: list[bytes], size: int) -> bytes:
    """`parts` joined into new bytes (`size`: their length, as `EntryBuffers.join` takes)."""
    return b"".join(parts)


def prebuilt_entry(
    prebuilt: PrebuiltEntry,
    messages: RecordMessages,
    first_sequence: int,
    whole: bool,
    limit: int,
    produced: ProducedBatch | None,
    join: Callable[[list[bytes], int], bytes | memoryview] = _join,
) -> OutgoingEntry | None:
    """The entry `entries` would build from `messages` (all in one entry), from the entry
    the Kafka batch's bytes were prebuilt into: only the stamps and the size words before
    them are written here. None when `entries` might not make it one entry (`limit`, with
    each message's payload size field counted too: a few bytes a message of headroom):
    then the messages are made and go the long way, which decides. `join` makes the
    payload of its parts (`EntryBuffers.join`)."""
    count = len(prebuilt.rests)
    others = first = b""
    if messages.added or messages.added_first:  # an idempotent producer's stamps
        others = encode_properties(messages.added)
        first = encode_properties({**messages.added, **messages.added_first})
    # each pass over a batch's thousands of objects costs (in the gateway, beside the
    # record walk that made them, about 1 % of its CPU each): their sizes are taken once
    rest_sizes = list(map(len, prebuilt.rests))
    heads = _heads(prebuilt, rest_sizes, first_sequence, whole, others, first)
    size = sum(map(len, heads)) + sum(rest_sizes) + prebuilt.size
    # at least `entries`' cost, message by message: metadata (with the stamp) + payload + 8
    # (the heads hold the 4-byte size words)
    if size + 4 * count > limit:
        return None
    parts = [b""] * (3 * count)
    parts[0::3] = heads
    parts[1::3] = prebuilt.rests
    parts[2::3] = prebuilt.payloads
    written = WrittenEntry(messages, first_sequence, whole, True, produced)
    head = b"\x58" + varint(count)  # num_messages_in_batch (11)
    return OutgoingEntry(head, join(parts, size), count, True, note=written)


def _keys(mid: MessageId, entry: OutgoingEntry) -> tuple[MessageKey, MessageKey]:
    """The ids a pulsar-client reader gives the entry's first and last message."""
    if not entry.batched:
        return (mid.ledger_id, mid.entry_id, -1), (mid.ledger_id, mid.entry_id, -1)
    return (mid.ledger_id, mid.entry_id, 0), (mid.ledger_id, mid.entry_id, entry.num_messages - 1)


class StoredEntry(NamedTuple):
    """An entry stored by a send: its id, how many messages it holds, the first one's stamp
    (the rest follow on: `entries`) and whether it is batched."""

    ledger_id: int
    entry_id: int
    num_messages: int
    first_stamp: int
    batched: bool


def stored_entries(
    futures: list[asyncio.Future[MessageId]], sent: list[OutgoingEntry], first_stamp: int
) -> list[StoredEntry]:
    """The entries of a send whose receipts are all in (`NativeSender.receipts`), in
    order, its first message stamped `first_stamp`."""
    out: list[StoredEntry] = []
    stamp = first_stamp
    for future, entry in zip(futures, sent, strict=True):
        mid = future.result()
        count = entry.num_messages
        out.append(StoredEntry(mid.ledger_id, mid.entry_id, count, stamp, entry.batched))
        stamp += count
    return out


class NativeSender:
    """The wire client and the sends of `PulsarBackend` that go through it."""

    def __init__(
        self,
        service_url: str,
        security: PulsarSecurity,
        operation_timeout: float,
        send_timeout: float,
        max_pending_messages: int,
    ) -> None:
        self.service_url = service_url
        self.security = security
        self.operation_timeout = operation_timeout
        self.send_timeout = send_timeout
        self.max_pending_messages = max_pending_messages
        self._client: Client | None = None
        # the batched entries sent, until the gateway's reader meets them
        self.written = WrittenEntries()
        self.buffers = EntryBuffers()  # what big prebuilt entries are joined into

    async def start(self) -> None:
        self._client = Client.from_security(
            self.service_url, self.security, operation_timeout=self.operation_timeout
        )

    @property
    def client(self) -> Client:
        if self._client is None:
            raise PulsarError("the native client is not started")
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _producer(self, writer: TopicWriter) -> Producer:
        if writer.native is not None and not writer.native.closed:
            return writer.native
        if self._client is None:
            raise PulsarError("the native client is not started")
        if writer.native is not None:
            writer.native_sequence = max(writer.native_sequence, writer.native.next_sequence)
        producer = await self._client.create_producer(
            writer.topic,
            # the name rule of pulsar-client's producers (resend_filter.writer_of)
            name=f"gw-{writer.id}.native",
            max_pending_messages=self.max_pending_messages,
            send_timeout=self.send_timeout,
            # on from its predecessor's: a name and a sequence id name one entry only
            initial_sequence_id=writer.native_sequence,
        )
        producer.on_admit = self._admitted
        writer.native = producer
        return producer

    def _admitted(self, producer: Producer, sequence_id: int, entry: OutgoingEntry) -> None:
        """An entry the producer numbered: kept for the reader (written_entries.py)."""
        if isinstance(entry.note, WrittenEntry):
            self.written.add(producer.name, sequence_id, entry.note, len(entry.payload))

    async def send(
        self,
        writer: TopicWriter,
        messages: Sequence[OutMessage],
        whole: bool,
        produced: ProducedBatch | None = None,
        noted: bool = True,
    ) -> tuple[list[asyncio.Future[MessageId]], list[OutgoingEntry]]:
        """Queue `messages` on the writer's producer, in order; the receipts' futures and
        their entries. Returns once all are queued (the lone first message of a ledger
        also stored). `produced`: the Kafka batch the messages are (`entries`). `noted`:
        the batched entries are kept for the gateway's own partition reader
        (written_entries.py); AMQP queue messages, which no such reader reads, are not."""
        producer = await self._producer(writer)
        futures: list[asyncio.Future[MessageId]] = []
        sent: list[OutgoingEntry] = []
        start = 0
        if not writer.ledger_opened:
            writer.sequence += 1
            entry = lone_entry(messages[0], writer.sequence, whole and len(messages) > 1)
            futures.append(await producer.enqueue(entry))
            sent.append(entry)
            start = 1
            if len(messages) > 1:
                # the lone message must be stored before any batch may follow it
                await asyncio.shield(futures[0])
                writer.ledger_opened = True
        limit = producer.max_message_size - ENTRY_HEADROOM
        if start == 0 and isinstance(messages, RecordMessages):
            # built from the Kafka batch's bytes, no message made (record_entry.py)
            prebuilt = messages.take_prebuilt()
            one = (
                None
                if prebuilt is None
                else prebuilt_entry(
                    prebuilt,
                    messages,
                    writer.sequence + 1,
                    whole,
                    limit,
                    produced,
                    self.buffers.join,
                )
            )
            if one is not None:
                writer.sequence += len(messages)
                futures.append(await producer.enqueue(one))
                sent.append(one)
                return futures, sent
        if start < len(messages):
            rest = messages[start:] if start else messages
            # a batch the lone first message left is no longer the produced one
            batch = entries(
                rest, writer.sequence + 1, whole, limit, None if start else produced, noted
            )
            writer.sequence += len(rest)
            for entry in batch:
                future = producer.enqueue_now(entry)  # no coroutine while there is room
                futures.append(future if future is not None else await producer.enqueue(entry))
                sent.append(entry)
        return futures, sent

    @staticmethod
    async def receipts(
        futures: list[asyncio.Future[MessageId]], sent: list[OutgoingEntry]
    ) -> tuple[MessageKey, MessageKey]:
        """The ids of the first and the last message, once every entry is stored."""
        # a producer's receipts come in order: once the last is in, the rest mostly are
        await asyncio.wait(futures[-1:])
        waiting = [future for future in futures if not future.done()]
        if waiting:
            await asyncio.wait(waiting)
        for future in futures:
            future.exception()  # every failure retrieved; the first one is raised below
        first, _ = _keys(futures[0].result(), sent[0])
        _, last = _keys(futures[-1].result(), sent[-1])
        for future in futures[1:-1]:
            future.result()
        return first, last
