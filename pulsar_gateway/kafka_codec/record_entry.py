"""A produced Kafka batch's records straight into a Pulsar batched entry's bytes, one pass.

The `pulsar` entry format stores each record as a message of ONE batched entry per Kafka
batch (docs/pulsar-protocol.md, "Batched entries" and "One pass"). Making a Python message
object per record (record_messages.py) and then the entry's bytes from those objects
(native_writer.entries) was most of the gateway's produce time; here the record's bytes
become its single-message metadata and payload at once, as `entries` would write them from
the messages `decode_messages` makes: the same fields in the same order (properties, the
key as partition key, the event time, the key again as ordering key, the null value mark,
the payload size), so the entry is byte for byte the one the long way builds and
docs/pulsar-mapping.md holds unchanged. Only the writer's `__gw.seq` stamp (each message's
first field), the size word before it and an idempotent producer's stamps (after the
record's own properties) are left open, for the writer to fill in (`PrebuiltEntry`).

The common records (no headers; no key, or a short ASCII one; a value) are written inline,
with the event time and value size fields a batch repeats made once; any other record is
mapped by `to_message` and written from that message, so the mapping has one definition.
A record's headers are mapped that way once a batch: the properties of each distinct run of
header bytes are kept and reused (docs/pulsar-protocol.md, "Headers, once a batch").
A batch whose base timestamp is near the int64 limits is not prebuilt (its timestamps wrap
as Java's do: `decode_messages`' long way). Input is refused exactly as `decode_messages`
refuses it, with the same errors (tests/unit/test_record_entry.py holds both to that).
"""

from __future__ import annotations

import functools

from pulsar_gateway.gateway.messages import OutMessage, PrebuiltEntry, RecordMessages
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.record_codec import (
    TS_SAFE,
    ZIGZAG_BYTE,
    RecordBatchError,
    decode_headers,
    length_slow,
    timestamp_slow,
    varint_slow,
)
from pulsar_gateway.kafka_codec.record_mapping import (
    CODEC,
    GATEWAY_RESERVED,
    RESERVED,
    to_message,
)
from pulsar_gateway.kafka_codec.record_messages import decode_messages

# SingleMessageMetadata (PulsarApi.proto) field keys: properties 1, partition_key 2,
# payload_size 3, event_time 5, ordering_key 7, null_value 9
_PROPERTIES = b"\x0a"
_PARTITION_KEY = b"\x12"
_PAYLOAD_SIZE = b"\x18"
_EVENT_TIME = b"\x28"
_ORDERING_KEY = b"\x3a"
_NULL_VALUE = b"\x48\x01"
# a short key's field heads, by its length: partition key, ordering key
_PARTITION_KEY_HEADS = tuple(_PARTITION_KEY + bytes((n,)) for n in range(0x80))
_ORDERING_KEY_HEADS = tuple(_ORDERING_KEY + bytes((n,)) for n in range(0x80))
# a property's field head (KeyValue, by its size), its name's and its value's, by length
_FIELD_HEADS = tuple(_PROPERTIES + bytes((n,)) for n in range(0x80))
_NAME_HEADS = tuple(b"\x0a" + bytes((n,)) for n in range(0x40))
_VALUE_HEADS = tuple(b"\x12" + bytes((n,)) for n in range(0x80))
# header names the mapping keeps for itself (record_mapping._reserved), as bytes
_RESERVED = (RESERVED.encode(), GATEWAY_RESERVED.encode())
# the most kinds of headers a batch's properties are kept for (records whose headers all
# differ, a trace id each, pay one dictionary look-up a record for nothing)
_HEADER_KINDS = 64


def _varint(value: int) -> bytes:
    """An unsigned protobuf varint (what the fields' lengths and times are)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_property(name: str, value: str) -> bytes:
    """One property as a KeyValue field of a single message's metadata."""
    raw_name = name.encode("utf-8", "surrogateescape")
    raw_value = value.encode("utf-8", "surrogateescape")
    pair = b"".join(
        (b"\x0a", _varint(len(raw_name)), raw_name, b"\x12", _varint(len(raw_value)), raw_value)
    )
    return _PROPERTIES + _varint(len(pair)) + pair


def message_metadata(message: OutMessage, extra_properties: bytes = b"") -> tuple[bytes, bytes]:
    """A message's single-message metadata after the stamp, as native_writer.entries
    writes it: its properties, then the rest (its payload size field last). Apart, as the
    idempotent producer's stamps go between them (`RecordMessages.with_added`).
    `extra_properties`: encoded properties added after the message's own (the codec)."""
    properties = [encode_property(k, v) for k, v in (message.properties or {}).items()]
    properties.append(extra_properties)
    parts: list[bytes] = []
    if message.key:
        raw = message.key.encode("utf-8", "surrogateescape")
        parts += (_PARTITION_KEY, _varint(len(raw)), raw)
    if message.event_time > 0:
        parts += (_EVENT_TIME, _varint(message.event_time))
    if message.key:
        parts += (_ORDERING_KEY, _varint(len(raw)), raw)
    if message.payload is None:
        parts.append(_NULL_VALUE)
    parts += (_PAYLOAD_SIZE, _varint(len(message.payload or b"")))
    return b"".join(properties), b"".join(parts)


def plain_properties(buf: bytes, pos: int, end: int) -> bytes | None:
    """A record's headers (`buf[pos:end]`, their count first) as the properties
    `to_message` maps them to, written straight from their bytes, where that mapping is
    one property per header in the headers' order: names in increasing order (none
    repeated), UTF-8, not reserved, at most 63 bytes; values UTF-8, not null, under 8 KiB.
    None for anything else, malformed bytes included: the long way maps those, or refuses
    them with its own error. (Records whose headers all differ, a sequence number or a
    trace id each, took the long way one by one: most of a migration's produce time.)"""
    count = buf[pos]
    if count >= 128 or count & 1:
        return None
    pos += 1
    out: list[bytes] = []
    last = b""
    for index in range(count >> 1):
        if pos >= end:
            return None
        b = buf[pos]
        if b >= 128 or b & 1:
            return None
        name = buf[pos + 1 : pos + 1 + (b >> 1)]
        pos += 1 + (b >> 1)
        if pos >= end or (index and name <= last) or name.startswith(_RESERVED):
            return None
        b = buf[pos]
        if b < 128:
            if b & 1:
                return None
            n = b >> 1
            pos += 1
        else:
            c = buf[pos + 1] if pos + 1 < end else 128
            if c >= 128 or b & 1:
                return None
            n = ((b & 127) | (c << 7)) >> 1
            pos += 2
        value = buf[pos : pos + n]
        pos += n
        if pos > end or not _utf8(name) or not _utf8(value):
            return None
        pair = len(name) + n + 4 + (n >= 0x80)
        out += (
            _FIELD_HEADS[pair] if pair < 0x80 else _PROPERTIES + _varint(pair),
            _NAME_HEADS[len(name)],
            name,
            _VALUE_HEADS[n] if n < 0x80 else b"\x12" + _varint(n),
            value,
        )
        last = name
    return b"".join(out) if pos == end else None


def _utf8(raw: bytes) -> bool:
    if raw.isascii():
        return True
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def mark_codec(messages: list[OutMessage], codec: int) -> list[OutMessage]:
    """The producer's codec on every message of a compressed batch (entry_format.CODEC)."""
    if codec:
        for message in messages:
            message.properties = {**(message.properties or {}), CODEC: str(codec)}
    return messages


def _made(buf: bytes, count: int, base_ts: int, codec: int, start: int = 0) -> list[OutMessage]:
    return mark_codec(decode_messages(buf[start:] if start else buf, count, base_ts), codec)


def record_messages(
    buf: bytes, count: int, base_ts: int, codec: int, start: int = 0
) -> RecordMessages:
    """The `count` records of a batch body (uncompressed, or inflated: `codec` is the
    batch's) as `pulsar`-format messages, prebuilt as an entry; checked as
    `decode_messages` checks them. IndexError means truncated input. The body is
    `buf[start:]` (an uncompressed batch's bytes after its header: the one copy of the
    batch, which the tail cache then keeps as it is, record_batch.decode_batches)."""
    if not -TS_SAFE < base_ts < TS_SAFE:
        return RecordMessages.of(_made(buf, count, base_ts, codec, start))
    prebuilt, values = build_entry(buf, count, base_ts, codec, start)
    return RecordMessages(
        count, functools.partial(_made, buf, count, base_ts, codec, start), prebuilt, values
    )


def build_entry(
    buf: bytes, count: int, base_ts: int, codec: int, start: int = 0
) -> tuple[PrebuiltEntry, int]:
    """The prebuilt entry of the `count` records of `buf[start:]`, and their values' bytes.
    The parse is `decode_messages`' (kept in step with it: the differential tests).

    Per record only what differs (the loop is most of the produce path's time,
    docs/pulsar-protocol.md, "One pass"): the event time and value size fields are looked
    up once per run of equal ones, a two-byte timestamp delta is read inline, and a
    record's own properties are noted only where they are not just the codec's. (Looking a
    key's fields up by the key, per batch, was slower than making them: hashing the key.)"""
    # The record walk is written out here, in decode_records/decode_messages and in
    # record_entry.build_entry on purpose: a walk shared as a generator cost 5-15 % more
    # per record (docs/pulsar-protocol.md, "Why the record walk is written three times").
    zz = ZIGZAG_BYTE
    slow = varint_slow
    join = b"".join
    codec_field = encode_property(CODEC, str(codec)) if codec else b""
    # the fields a batch repeats: event time -> its field, value size -> its field, and a
    # key -> its partition and ordering key fields (empty: not a plain key, the long way)
    pk_heads = _PARTITION_KEY_HEADS
    ok_heads = _ORDERING_KEY_HEADS
    times: dict[int, bytes] = {}
    value_sizes: dict[int, bytes] = {}
    last_ts = last_n = None
    time_field = size_field = b""
    own: dict[int, bytes] = {}  # a message's properties, where not just `codec_field`
    header_properties: dict[bytes, bytes] = {}  # a record's headers' bytes -> its properties
    metadata: list[bytes] = []  # the rest of its metadata, its payload size field last
    payloads: list[bytes] = []
    add_fields = metadata.append
    add_payload = payloads.append
    limit = len(buf)
    pos = start
    bad_at = bad_delta = -1  # the first record whose offset delta is not its index, and it
    for index in range(count):
        # record length
        b = buf[pos]
        if b < 128:
            size = zz[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 128:
                u = (b & 127) | (c << 7)
                size = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                size, pos = slow(buf, pos, 5)
        end = pos + size
        if size < 6 or end > limit:
            raise RecordBatchError(f"record length {size} out of range")
        # timestamp delta (after the record attributes: unused by every Kafka version so far)
        # (base_ts is within TS_SAFE, `record_messages`: a two-byte delta cannot wrap)
        b = buf[pos + 1]
        if b < 128:
            ts = base_ts + zz[b]
            pos += 2
        else:
            c = buf[pos + 2]
            if c < 128:
                u = (b & 127) | (c << 7)
                ts = base_ts + ((u >> 1) ^ -(u & 1))
                pos += 3
            else:
                ts, pos = timestamp_slow(buf, pos + 1, base_ts)
        # offset delta
        b = buf[pos]
        if b < 128:
            delta = zz[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 128:
                u = (b & 127) | (c << 7)
                delta = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                delta, pos = slow(buf, pos, 5)
        if delta != index and bad_at < 0:
            bad_at, bad_delta = index, delta
        # key
        b = buf[pos]
        if b == 1:
            key = None
            pos += 1
        elif b < 128 and not b & 1:
            k = b >> 1
            pos += 1
            key = buf[pos : pos + k]
            pos += k
        else:
            k, pos = length_slow(buf, pos)
            if k < 0:
                key = None
            else:
                key = buf[pos : pos + k]
                pos += k
        # value
        b = buf[pos]
        if b == 1:
            value = None
            pos += 1
        elif b < 128:
            if b & 1:
                raise RecordBatchError(f"negative value length {zz[b]}")
            n = b >> 1
            pos += 1
            value = buf[pos : pos + n]
            pos += n
        else:
            c = buf[pos + 1]
            if c < 128 and not b & 1:
                n = ((b & 127) | (c << 7)) >> 1
                pos += 2
                value = buf[pos : pos + n]
                pos += n
            else:
                n, pos = length_slow(buf, pos)
                if n < 0:
                    value = None
                else:
                    value = buf[pos : pos + n]
                    pos += n
        # headers, then the message's metadata
        props = None
        if buf[pos] != 0:
            # A batch's records mostly repeat their headers: their bytes (the rest of the
            # record) name their properties, mapped once (to_message). A key the mapping
            # marks (empty, not UTF-8, long) adds a property: those go the long way.
            plain_key = key is None or (0 < k < 0x80 and key.isascii())
            if plain_key:
                raw = buf[pos:end]
                props = header_properties.get(raw)
                if props is None:
                    props = plain_properties(buf, pos, end)
                    if props is not None:
                        props += codec_field
                        if len(header_properties) < _HEADER_KINDS:
                            header_properties[raw] = props
            if props is None:
                headers, pos = decode_headers(buf, pos)
                if pos != end:
                    raise RecordBatchError(f"record length {size} does not match its fields")
                own[index], fields = message_metadata(
                    to_message(key, value, ts, headers), codec_field
                )
                if plain_key and len(header_properties) < _HEADER_KINDS:
                    header_properties[raw] = own[index]
                add_fields(fields)
                add_payload(b"" if value is None else value)
                continue
            own[index] = props
            pos = end
        else:
            pos += 1
            if pos != end:
                raise RecordBatchError(f"record length {size} does not match its fields")
        if value is None:
            common, fields = _common_fields(key, value, ts, codec_field)
            if props is None and common is not codec_field:
                own[index] = common
            value = b""
        else:
            if ts != last_ts:
                time_field = times.get(ts)  # type: ignore[assignment]
                if time_field is None:
                    time_field = times[ts] = _EVENT_TIME + _varint(ts) if ts > 0 else b""
                last_ts = ts
            if n != last_n:
                size_field = value_sizes.get(n)  # type: ignore[assignment]
                if size_field is None:
                    size_field = value_sizes[n] = _PAYLOAD_SIZE + _varint(n)
                last_n = n
            if key is None:
                fields = time_field + size_field
            elif 0 < k < 0x80 and key.isascii():  # k: the key's length
                # partition key, time, ordering key, payload size
                fields = join((pk_heads[k], key, time_field, ok_heads[k], key, size_field))
            else:
                common, fields = _common_fields(key, value, ts, codec_field)
                if props is None and common is not codec_field:
                    own[index] = common
        add_fields(fields)
        add_payload(value)
    if pos != limit:
        raise RecordBatchError(f"{limit - pos} bytes left over after {count} records")
    if bad_at >= 0:
        raise RecordBatchError(
            f"record {bad_at} has offset delta {bad_delta}", ErrorCode.INVALID_RECORD
        )
    owns = [codec_field] * count
    for index, props in own.items():
        owns[index] = props
    values = sum(map(len, payloads))
    return PrebuiltEntry(owns, metadata, payloads, values), values


def _common_fields(
    key: bytes | None, value: bytes | None, ts: int, codec_field: bytes
) -> tuple[bytes, bytes]:
    """A headerless record's properties and other metadata fields; the long way
    (`to_message`) for a key that is empty or not UTF-8."""
    if key:
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            return message_metadata(to_message(key, value, ts, []), codec_field)
    elif key is not None:  # empty: base64, marked
        return message_metadata(to_message(key, value, ts, []), codec_field)
    parts: list[bytes] = []
    if key:
        key_size = _varint(len(key))
        parts += (_PARTITION_KEY, key_size, key)
    if ts > 0:
        parts += (_EVENT_TIME, _varint(ts))
    if key:
        parts += (_ORDERING_KEY, key_size, key)
    if value is None:
        parts.append(_NULL_VALUE)
    parts += (_PAYLOAD_SIZE, _varint(0 if value is None else len(value)))
    return codec_field, b"".join(parts)
