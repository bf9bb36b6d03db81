"""Entries as bytes: a whole batched entry built in one pass, and split back in one pass.

A batched entry's payload is, for each message, `[4-byte size][SingleMessageMetadata]
[payload]`; its `MessageMetadata` says how many messages it holds (`num_messages_in_batch`)
and, when compressed, the codec and the size before compression (docs/pulsar-protocol.md,
"Batched entries"). Pulsar consumers hand each message to the application on its own, with
the entry's id and the message's index in the batch.

This is the gateway's data path (one entry per Kafka record batch), so no protobuf objects
are made here: field keys are constants, small varints come from a table, and a caller
that already holds a message's encoded fields (`message_fields`) passes them as bytes.

An `OutgoingEntry` carries the entry's metadata fields except the four a producer stamps
at send time (producer name, sequence id, publish time, highest sequence id).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from pulsar_gateway.gateway.backend.wire.compression import (
    DEFAULT_UNCOMPRESSED_LIMIT,
    compress,
    decompress,
)
from pulsar_gateway.gateway.backend.wire.errors import DecodeError
from pulsar_gateway.gateway.backend.wire.messages import CompressionType, MessageMetadata
from pulsar_gateway.gateway.backend.wire.protobuf import (
    decode_varint,
    encode_varint,
    skip_field,
)

_SIZE = struct.Struct(">I")
_pack_size = _SIZE.pack
_unpack_size = _SIZE.unpack_from

# Varints below 2**14 (one or two bytes), prebuilt: lengths and sizes of most messages.
_TABLE_LIMIT = 1 << 14
# `split_batch` decodes each distinct property once per batch while that pays: this many
# misses more than hits, and it stops looking (a batch of unique headers)
PAIR_MISSES_ALLOWED = 32
MAX_PAIRS_KEPT = 4096  # property octets a kept `pairs` holds before it starts afresh
# a property's octets -> its name and value, decoded (`split_batch`)
PropertyPairs = dict[bytes, tuple[str, str]]
# `split_batch` looks up a message's fields after its first two in `tails` while that pays:
# this many misses more than hits, and it stops looking (a batch of unique sizes or headers)
TAIL_MISSES_ALLOWED = 8
MAX_TAILS_KEPT = 64  # tails a kept `tails` holds before it starts afresh (they are long)
# the octets of a message's fields after its first two -> their properties and payload size
MessageTails = dict[bytes, tuple[dict[str, str], int]]
VARINTS = tuple(encode_varint(i) for i in range(_TABLE_LIMIT))
# `payload_size` (SingleMessageMetadata field 3) with its key, prebuilt likewise.
_PAYLOAD_SIZE = PAYLOAD_SIZES = tuple(b"\x18" + v for v in VARINTS)


def varint(value: int) -> bytes:
    return VARINTS[value] if 0 <= value < _TABLE_LIMIT else encode_varint(value)


Properties = Mapping[str, str] | Sequence[tuple[str | bytes, str | bytes]]


@dataclass(slots=True, frozen=True)
class MessageTags:
    """The keys of the per-message fields in one of the two metadata messages."""

    properties: bytes
    partition_key: bytes
    event_time: bytes
    ordering_key: bytes
    sequence_id: bytes
    null_value: bytes


# SingleMessageMetadata: properties 1, partition_key 2, event_time 5, ordering_key 7,
# sequence_id 8, null_value 9
IN_BATCH = MessageTags(b"\x0a", b"\x12", b"\x28", b"\x3a", b"\x40", b"\x48\x01")
# MessageMetadata: properties 4, partition_key 6, event_time 12, ordering_key 18,
# null_value 25 (its sequence_id is the producer's, stamped at send)
IN_ENTRY = MessageTags(b"\x22", b"\x32", b"\x60", b"\x92\x01", b"", b"\xc8\x01\x01")


def encode_properties(properties: Properties, key_tag: bytes = b"\x0a") -> bytes:
    """Properties as repeated KeyValue fields (a caller may keep these bytes for reuse)."""
    parts: list[bytes] = []
    _add_properties(parts, properties, key_tag)
    return b"".join(parts)


def _add_properties(parts: list[bytes], properties: Properties, key_tag: bytes) -> None:
    table = VARINTS
    items = cast(
        "Iterable[tuple[str | bytes, str | bytes]]",
        properties.items() if hasattr(properties, "items") else properties,
    )
    for name, value in items:
        raw_name = name if isinstance(name, bytes) else name.encode("utf-8", "surrogateescape")
        raw_value = value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
        n = len(raw_name)
        v = len(raw_value)
        if n < 0x80 and v < 0x80:
            parts += (key_tag, table[n + v + 4], b"\x0a", table[n], raw_name, b"\x12")
            parts += (table[v], raw_value)
        else:
            pair = b"".join((b"\x0a", varint(n), raw_name, b"\x12", varint(v), raw_value))
            parts += (key_tag, varint(len(pair)), pair)


def message_fields(
    key: str | bytes | None = None,
    properties: Properties | None = None,
    event_time: int = 0,
    ordering_key: bytes | None = None,
    null_value: bool = False,
    sequence_id: int | None = None,
    tags: MessageTags = IN_BATCH,
    encoded_properties: bytes = b"",
) -> bytes:
    """One message's metadata fields other than its payload size.

    `key` is the partition key (None: none); `encoded_properties` are properties already
    encoded with `encode_properties` (for the same `tags`), written before `properties`.
    The key and the properties' names and values may be given as UTF-8 bytes (a Kafka
    record's key and header values are): they are written as they are, saving an encode.
    """
    parts = [encoded_properties]
    if properties:
        _add_properties(parts, properties, tags.properties)
    if key is not None:
        raw = key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")
        parts += (tags.partition_key, varint(len(raw)), raw)
    if event_time:
        parts += (tags.event_time, encode_varint(event_time))
    if ordering_key is not None:
        parts += (tags.ordering_key, varint(len(ordering_key)), ordering_key)
    if sequence_id is not None and tags.sequence_id:
        parts += (tags.sequence_id, varint(sequence_id))
    if null_value:
        parts.append(tags.null_value)
    return b"".join(parts)


@dataclass(slots=True, frozen=True)
class OutgoingEntry:
    """One entry ready for `Producer.send`: metadata fields (without the four the producer
    stamps), the payload as stored, and how many messages (sequence ids) it holds."""

    metadata_fields: bytes
    # (a view when joined into a reused buffer: native_writer.EntryBuffers)
    payload: bytes | memoryview
    num_messages: int = 1
    batched: bool = False
    uncompressed_size: int = -1  # the payload's size before compression (-1: not compressed)
    # the caller's own record of what the entry holds, handed back with the sequence id the
    # producer gives the entry (`Producer.on_admit`); never sent
    note: object = field(default=None, compare=False)


def single_entry(
    payload: bytes | None,
    key: str | None = None,
    properties: Properties | None = None,
    event_time: int = 0,
    ordering_key: bytes | None = None,
    compression: int = CompressionType.NONE,
) -> OutgoingEntry:
    """An unbatched entry holding one message (None: a null value)."""
    fields = message_fields(
        key, properties, event_time, ordering_key, payload is None, tags=IN_ENTRY
    )
    return _compressed(fields, payload or b"", 1, False, compression)


class BatchBuilder:
    """Collects messages for one batched entry; `build` returns it."""

    __slots__ = ("_parts", "count", "size")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.count = 0
        self.size = 0  # bytes of the batch payload so far

    def add(self, fields: bytes, payload: bytes) -> None:
        """A message: its encoded fields (`message_fields`) and its payload."""
        n = len(payload)
        size_field = _PAYLOAD_SIZE[n] if n < _TABLE_LIMIT else b"\x18" + encode_varint(n)
        smm_size = len(fields) + len(size_field)
        self._parts += (_pack_size(smm_size), fields, size_field, payload)
        self.count += 1
        self.size += 4 + smm_size + n

    def add_message(
        self,
        payload: bytes | None,
        key: str | None = None,
        properties: Properties | None = None,
        event_time: int = 0,
        ordering_key: bytes | None = None,
        sequence_id: int | None = None,
    ) -> None:
        fields = message_fields(
            key, properties, event_time, ordering_key, payload is None, sequence_id
        )
        self.add(fields, payload or b"")

    def build(self, compression: int = CompressionType.NONE) -> OutgoingEntry:
        if not self.count:
            raise ValueError("an empty batch")
        return _compressed(
            b"\x58" + varint(self.count),  # num_messages_in_batch (11)
            b"".join(self._parts),
            self.count,
            True,
            compression,
        )


def batch_entry(
    messages: Iterable[tuple[bytes, bytes]], compression: int = CompressionType.NONE
) -> OutgoingEntry:
    """A batched entry of `(fields, payload)` pairs, in one pass (BatchBuilder without a
    method call per message)."""
    parts: list[bytes] = []
    count = 0
    table = _PAYLOAD_SIZE
    for fields, payload in messages:
        n = len(payload)
        size_field = table[n] if n < _TABLE_LIMIT else b"\x18" + encode_varint(n)
        parts += (_pack_size(len(fields) + len(size_field)), fields, size_field, payload)
        count += 1
    if not count:
        raise ValueError("an empty batch")
    return _compressed(b"\x58" + varint(count), b"".join(parts), count, True, compression)


def _compressed(
    fields: bytes, payload: bytes, count: int, batched: bool, compression: int
) -> OutgoingEntry:
    if compression == CompressionType.NONE:
        return OutgoingEntry(fields, payload, count, batched)
    packed = compress(compression, payload)
    fields += b"\x40" + varint(compression) + b"\x48" + varint(len(payload))
    return OutgoingEntry(fields, packed, count, batched, len(payload))


# ---- reading ---------------------------------------------------------------------------------


class SingleMessage(NamedTuple):
    """One message of a received entry. `payload` is None for a null value; `key` None
    when the message has no partition key."""

    batch_index: int  # -1: an unbatched entry
    payload: bytes | None
    key: str | None
    properties: dict[str, str]
    event_time: int
    ordering_key: bytes | None = None
    sequence_id: int | None = None
    compacted_out: bool = False
    key_b64: bool = False


def entry_payload(
    metadata: MessageMetadata, payload: bytes, limit: int = DEFAULT_UNCOMPRESSED_LIMIT
) -> bytes:
    """An entry's payload as written before compression."""
    if metadata.compression == CompressionType.NONE:
        return payload
    return decompress(metadata.compression, payload, metadata.uncompressed_size, limit)


def entry_messages(
    metadata: MessageMetadata,
    payload: bytes,
    limit: int = DEFAULT_UNCOMPRESSED_LIMIT,
    pairs: PropertyPairs | None = None,
    tails: MessageTails | None = None,
) -> list[SingleMessage]:
    """The messages of a received entry (already reassembled if it was chunked);
    `pairs` and `tails` as `split_batch` takes them."""
    data = entry_payload(metadata, payload, limit)
    if metadata.num_messages_in_batch is None:
        return [
            SingleMessage(
                -1,
                None if metadata.null_value else data,
                None if metadata.partition_key is None else metadata.partition_key,
                metadata.properties_dict(),
                metadata.event_time,
                metadata.ordering_key,
                None,
                False,
                metadata.partition_key_b64_encoded,
            )
        ]
    return split_batch(data, metadata.num_messages_in_batch, pairs, tails)


def split_batch(
    data: bytes,
    count: int,
    pairs: PropertyPairs | None = None,
    tails: MessageTails | None = None,
) -> list[SingleMessage]:
    """The `count` messages of a batched payload, parsed in one pass. The payload must
    hold exactly those messages; anything malformed raises DecodeError.

    Property octets decoded before are looked up in `pairs` (a fresh one per call when
    None): a reader of small entries that repeat their properties from entry to entry (an
    AMQP queue's) keeps one across calls and clears it when it holds MAX_PAIRS_KEPT.

    The gateway writes each message's own sequence stamp first (native_writer.py), an AMQP
    queue's message its acceptance time next (the millisecond: shared by a few), and the
    fields after those two repeat from message to message (exchange, routing key, content
    header, body size): when a message's head is two properties, the octets of all its
    later fields (its tail) are looked up in `tails` (kept like `pairs`, MAX_TAILS_KEPT),
    and a hit stands for their whole decode. Only a tail of properties and the payload size
    is kept (any other field, or a name the head also has, and the message is decoded field
    by field as before).

    Written for speed: the common fields are matched by their one-byte keys with one- and
    two-byte varints read inline; anything else goes through the general protobuf path."""
    if count < 0 or count > len(data):
        raise DecodeError(f"a batch of {count} messages in {len(data)} bytes")
    out: list[SingleMessage] = []
    append = out.append
    make = tuple.__new__
    cls = SingleMessage
    times: dict[bytes, tuple[int, int]] = {}  # event time varints seen: value, bytes
    if pairs is None:
        pairs = {}  # property octets seen: name, value
    elif len(pairs) >= MAX_PAIRS_KEPT:
        pairs.clear()
    if tails is None:
        tails = {}
    elif len(tails) >= MAX_TAILS_KEPT:
        tails.clear()
    budget = PAIR_MISSES_ALLOWED
    tail_budget = TAIL_MISSES_ALLOWED
    end = len(data)
    pos = 0
    try:
        for index in range(count):
            p = pos + 4
            stop = p + int.from_bytes(data[pos:p], "big")
            if stop > end:
                raise DecodeError(f"message {index} metadata runs past the batch")
            properties: dict[str, str] = {}
            key = ordering_key = sequence_id = None
            payload_size = -1
            event_time = 0
            null_value = compacted = b64 = False
            limit = stop  # where the field-by-field decode ends: the head's end on a hit
            tail = rest = None
            if tail_budget > 0 and data[p] == 0x0A and data[p + 1] < 0x80:
                first_end = p + 2 + data[p + 1]
                head_end = first_end
                if head_end < stop and data[head_end] == 0x0A and data[head_end + 1] < 0x80:
                    head_end += 2 + data[head_end + 1]
                    if head_end < stop:
                        rest = data[head_end:stop]
                        tail = tails.get(rest)
                        if tail is not None:
                            tail_budget += 1
                            limit = head_end
                            # the first field, the gateway's stamp, is new in every message:
                            # decoded here in the usual layout, not added to `pairs` (which
                            # it would only fill up and clear)
                            q = p + 2
                            n = q + 2 + data[q + 1]
                            if data[q] == 0x0A and n < first_end and data[n] == 0x12:
                                if n + 2 + data[n + 1] == first_end and data[q + 1] < 0x80:
                                    name = data[q + 2 : n].decode("utf-8", "surrogateescape")
                                    stamp = data[n + 2 : first_end]
                                    properties[name] = stamp.decode("utf-8", "surrogateescape")
                                    p = first_end
                        else:
                            tail_budget -= 1
            nprops = 0  # property fields decoded
            others = False  # a field other than a property or the payload size
            while p < limit:
                t = data[p]
                if t == 0x0A:  # properties: one KeyValue (name 1, value 2)
                    n = data[p + 1]
                    if n < 0x80:
                        p += 2
                    else:
                        n, p = decode_varint(data, p + 1, stop)
                    kv_stop = p + n
                    nprops += 1
                    if kv_stop > stop:
                        raise DecodeError("property runs past its metadata")
                    # a batch's messages mostly repeat their properties (an AMQP queue's
                    # exchange, routing key, content header): each distinct KeyValue's
                    # octets are decoded once, while that finds more than it misses
                    octets = None
                    if budget > 0:
                        octets = data[p:kv_stop]
                        pair = pairs.get(octets)
                        if pair is not None:
                            budget += 1
                            properties[pair[0]] = pair[1]
                            p = kv_stop
                            continue
                        budget -= 1
                    # the usual layout, short name and value: key 1, then value 2
                    n = data[p + 1]
                    q = p + 2 + n
                    if (
                        data[p] == 0x0A
                        and n < 0x80
                        and q < kv_stop
                        and data[q] == 0x12
                        and data[q + 1] < 0x80
                    ):
                        name = data[p + 2 : q].decode("utf-8", "surrogateescape")
                        p = q + 2 + data[q + 1]
                        value = data[q + 2 : p].decode("utf-8", "surrogateescape")
                    else:
                        name, value, p = _property(data, p, kv_stop)
                    if p != kv_stop:
                        raise DecodeError("property overruns its size")
                    properties[name] = value
                    if octets is not None:
                        pairs[octets] = (name, value)  # a batch's size at most, per call
                elif t == 0x12 or t == 0x3A:  # partition_key, ordering_key
                    others = True
                    n = data[p + 1]
                    if n < 0x80:
                        p += 2
                    else:
                        n, p = decode_varint(data, p + 1, stop)
                    if p + n > stop:
                        raise DecodeError("key runs past its metadata")
                    if t == 0x12:
                        key = data[p : p + n].decode("utf-8", "surrogateescape")
                    else:
                        ordering_key = data[p : p + n]
                    p += n
                elif t == 0x18:  # payload_size
                    b0 = data[p + 1]
                    if b0 < 0x80:
                        payload_size = b0
                        p += 2
                    elif data[p + 2] < 0x80:
                        payload_size = (b0 & 0x7F) | data[p + 2] << 7
                        p += 3
                    else:
                        payload_size, p = decode_varint(data, p + 1, stop)
                elif t == 0x28:  # event_time: a millisecond time takes 6 bytes to decode
                    # in Python; the messages of a batch mostly share their few times
                    others = True
                    raw = data[p + 1 : p + 7]
                    known = times.get(raw)
                    if known is None:
                        event_time, q = decode_varint(data, p + 1, stop)
                        if q - p <= 7:  # the whole varint is in `raw`, so `raw` names it
                            times[raw] = (event_time, q - p)
                        p = q
                    else:
                        event_time = known[0]
                        p += known[1]
                elif t == 0x48 or t == 0x20 or t == 0x30 or t == 0x40:
                    others = True
                    flag, p = decode_varint(data, p + 1, stop)
                    if t == 0x48:
                        null_value = flag != 0
                    elif t == 0x20:
                        compacted = flag != 0
                    elif t == 0x30:
                        b64 = flag != 0
                    else:
                        sequence_id = flag
                else:  # another field (null_partition_key, or one added later): skip it
                    others = True
                    field_key, p = decode_varint(data, p, stop)
                    p = skip_field(data, field_key & 7, p, stop)
            if p != limit:
                raise DecodeError(f"message {index} metadata overruns its size")
            if tail is not None:
                properties.update(tail[0])
                payload_size = tail[1]
            elif rest is not None and not others and nprops == len(properties):
                # properties and the payload size only, each name once: the fields after
                # the head stand for the properties after its two (dicts keep their order)
                if len(tails) >= MAX_TAILS_KEPT:
                    tails.clear()
                tails[rest] = (dict(list(properties.items())[2:]), payload_size)
            if payload_size < 0:
                raise DecodeError(f"message {index} has no payload size")
            pos = stop + payload_size
            if pos > end:
                raise DecodeError(f"message {index} payload runs past the batch")
            append(
                make(
                    cls,
                    (
                        index,
                        None if null_value else data[stop:pos],
                        key,
                        properties,
                        event_time,
                        ordering_key,
                        sequence_id,
                        compacted,
                        b64,
                    ),
                )
            )
    except IndexError:
        raise DecodeError("batch truncated") from None
    if pos != end:
        raise DecodeError(f"{end - pos} bytes left after the batch's {count} messages")
    return out


def _property(data: bytes, p: int, stop: int) -> tuple[str, str, int]:
    """A KeyValue at data[p:stop] in any layout: its name, value and end."""
    name = value = ""
    while p < stop:
        field_key, p = decode_varint(data, p, stop)
        if field_key not in (0x0A, 0x12):
            p = skip_field(data, field_key & 7, p, stop)
            continue
        n, p = decode_varint(data, p, stop)
        if p + n > stop:
            raise DecodeError("property runs past its metadata")
        text = data[p : p + n].decode("utf-8", "surrogateescape")
        if field_key == 0x0A:
            name = text
        else:
            value = text
        p += n
    return name, value, p
