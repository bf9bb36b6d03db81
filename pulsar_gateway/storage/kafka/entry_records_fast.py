"""The gateway's common batched entry read as its records straight from the entry's bytes,
without a message object or a properties dictionary per record (parity's in-order walk,
docs/tools.md, "How parity compares").

`entry_records` splits the entry into its messages (`wire.batch.split_batch`) and then maps
each message's properties: two passes and two objects a record, most of parity's read of
the gateway's side (py-spy). Here one loop goes from each message's metadata to its record.
It takes only what the gateway's own writer makes of a Kafka batch
(`kafka_codec.record_entry`): the `__gw.seq` stamp first, in its one layout; then the
record's headers as properties in name order, UTF-8 and short; the producer's codec or the
gateway's other stamps; the key (UTF-8), event time, ordering key, null value mark and
payload size, each in its one-byte field. Anything else, a malformed entry included, gives
None and `entry_records` reads the entry its general way, so what this returns is always
what that would return (tests/unit/test_entry_records.py holds them together).
"""

from __future__ import annotations

import struct

from pulsar_gateway.gateway.backend.resend_filter import stamp_of
from pulsar_gateway.gateway.messages import MORE, RECORDS, SEQ
from pulsar_gateway.kafka_codec.entry_format import BATCH
from pulsar_gateway.kafka_codec.record_mapping import (
    GATEWAY_RESERVED,
    HEADER_ORDER,
    HEADERS,
    KEY_B64,
    RESERVED,
)

# (key, value, headers, timestamp), as entry_records.EntryRecord
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]

# the stamp property as the gateway writes it, up to its value's length: field 1, the
# KeyValue's size, its name field (0x0a, 8 bytes, the name) and the value's key (0x12)
_STAMP_NAME = b"\x0a\x08" + SEQ.encode() + b"\x12"
_STAMP_HEADS = {b"\x0a" + bytes([n + 12]) + _STAMP_NAME + bytes([n]): n for n in range(1, 21)}
_STAMP_HEAD = 2 + len(_STAMP_NAME) + 1
_PREFIXES = (RESERVED.encode(), GATEWAY_RESERVED.encode())
# reserved properties a plain record does not have: `entry_records` maps those messages
# with `records_of`, or reads the entry message by message
_NOT_HERE = frozenset(name.encode() for name in (KEY_B64, HEADERS, HEADER_ORDER, BATCH, RECORDS))
_SEQ = SEQ.encode()
# a stamp of a record with more of its batch after it ("N+"), as a format
_WITH_MORE = b"%d" + MORE.encode()
_SIZE = struct.Struct(">I").unpack_from  # a message's 4-byte metadata size


def plain_entry_records(
    data: bytes, count: int, publish_time: int
) -> tuple[int, int, list[Record]] | None:
    """The records of a batched entry's `count` messages (payload `data`, uncompressed) and
    its first and last stamps, or None when it is not the case this reads."""
    try:
        return _walk(data, count, publish_time)
    except (IndexError, KeyError, ValueError, struct.error):
        return None


def _walk(data: bytes, count: int, publish_time: int) -> tuple[int, int, list[Record]] | None:
    heads = _STAMP_HEADS
    size_at = _SIZE
    with_more = _WITH_MORE
    head_size = _STAMP_HEAD
    prefixes = _PREFIXES
    names: dict[bytes, str] = {}  # header names seen, decoded
    times: dict[bytes, int] = {}  # event time varints seen (6 bytes: a millisecond time)
    # reserved properties passed over, whole (the producer's codec: the same on every message)
    passed: set[bytes] = set()
    out: list[Record] = []
    append = out.append
    end = len(data)
    pos = 0
    first = expected = -1
    for _ in range(count):
        p = pos + 4
        stop = p + size_at(data, pos)[0]
        if stop > end:
            return None
        # the stamp: the first property, in the writer's layout (KeyError: another)
        n = heads[data[p : p + head_size]]
        p += head_size
        stamp = data[p : p + n]
        p += n
        if first < 0:
            found = stamp_of({SEQ: stamp.decode()})
            if found is None:
                return None
            first = expected = found
        elif stamp != with_more % expected and stamp != b"%d" % expected:
            return None  # (a number never ends in MORE: the two cases are apart)
        expected += 1
        headers: list[tuple[str, bytes | None]] = []
        last_name = b""
        key: bytes | None = None
        value_size = -1
        event_time = 0
        null_value = False
        while p < stop:
            t = data[p]
            if t == 0x0A:  # a property: KeyValue, short name (1) and value (2)
                size = data[p + 1]
                kv_end = p + 2 + size
                if kv_end <= stop and data[p:kv_end] in passed:
                    p = kv_end  # the same reserved property as before: passed over again
                    continue
                name_size = data[p + 3]
                q = p + 4 + name_size
                value_size_ = data[q + 1]
                if (
                    size >= 0x80
                    or data[p + 2] != 0x0A
                    or name_size >= 0x80
                    or data[q] != 0x12
                    or value_size_ >= 0x80
                    or q + 2 + value_size_ != kv_end
                    or kv_end > stop
                ):
                    return None
                raw_name = data[p + 4 : q]
                if raw_name.startswith(prefixes):
                    if raw_name in _NOT_HERE or raw_name == _SEQ:
                        return None
                    passed.add(data[p:kv_end])
                    p = kv_end
                    continue  # the producer's codec, the gateway's other stamps
                p = kv_end
                if headers and raw_name <= last_name:
                    return None  # out of order or repeated: not what the writer makes
                name = names.get(raw_name)
                if name is None:
                    name = names[raw_name] = raw_name.decode()
                header_value = data[q + 2 : kv_end]
                if not header_value.isascii():
                    header_value.decode()  # UnicodeDecodeError (a ValueError): not plain
                headers.append((name, header_value))
                last_name = raw_name
            elif t == 0x12:  # partition key
                n = data[p + 1]
                if n >= 0x80:
                    return None
                key = data[p + 2 : p + 2 + n]
                p += 2 + n
                if not key.isascii():
                    key.decode()
            elif t == 0x3A:  # ordering key: the key again
                n = data[p + 1]
                if n >= 0x80:
                    return None
                p += 2 + n
            elif t == 0x28:  # event time
                raw = data[p + 1 : p + 7]
                known = times.get(raw)
                if known is None:
                    if len(raw) < 6 or raw[5] >= 0x80 or any(b < 0x80 for b in raw[:5]):
                        return None  # not a 6-byte varint (a time before 2004, or odd)
                    known = times[raw] = sum((b & 0x7F) << (7 * i) for i, b in enumerate(raw))
                event_time = known
                p += 7
            elif t == 0x18:  # payload size
                b = data[p + 1]
                if b < 0x80:
                    value_size = b
                    p += 2
                elif data[p + 2] < 0x80:
                    value_size = (b & 0x7F) | data[p + 2] << 7
                    p += 3
                else:
                    return None
            elif t == 0x48:  # null value
                if data[p + 1] >= 0x80:
                    return None
                null_value = data[p + 1] != 0
                p += 2
            else:
                return None
        if p != stop or value_size < 0:
            return None
        pos = stop + value_size
        if pos > end:
            return None
        append(
            (
                key or None,
                None if null_value else data[stop:pos],
                headers,
                event_time or publish_time,
            )
        )
    if pos != end or first < 0:
        return None
    return first, expected - 1, out
