"""A batched Pulsar entry the gateway wrote, read back from storage as ONE Kafka record batch
in one pass (issue 32: fetch after a restart; docs/offsets.md, "Reads from storage, an entry
at a time").

Read message by message, every record of a history read cost a `StoredMessage` with its
properties dictionary, the resend filter's and the batch edges' look-ups, and the fetch's
mapping and encoding (about 40 µs a record in all, measured with py-spy). Here the entry's
payload goes straight to the bytes of a Kafka batch: each message's metadata is scanned
once for what a Kafka record needs (key, value, event time) and the record written; the
entry then takes one place in the read, like a stored `kafka`-format batch (re-based at its
first offset when served).

Only the plain case is taken: every message carries the gateway's `__gw.seq` stamp and no
other property (no headers, no binary key, no transaction, no producer codec), the stamps
count up by one and all but the last say "more follows", and every message has its event
time. Anything else gives None and the entry is read message by message as before, so
what reaches a Kafka client is what the message path gives (a property test compares them).

The batch stands for its messages exactly: `messages_of` gives them back (a read that
starts inside the entry, a resend that overlaps it, a caller that needs message ids), with
the stamps, keys, values and times the message path would have made.
"""

from __future__ import annotations

import struct

from pulsar_gateway.gateway.backend.resend_filter import stamp_of
from pulsar_gateway.gateway.backend.wire.protobuf import decode_varint
from pulsar_gateway.gateway.messages import MORE, RECORDS, SEQ, MessageKey, StoredMessage
from pulsar_gateway.kafka_codec.entry_format import BATCH, READ_FROM_ENTRY
from pulsar_gateway.kafka_codec.record_batch import decode_batches, seal_records
from pulsar_gateway.kafka_codec.record_codec import VARINT_TABLE_SIZE, VARINTS, zigzag_bytes

# the stamp property as the gateway writes it: field 1 (KeyValue), its size, then the
# KeyValue's name field (0x0a, 8 bytes) and the value's key (0x12)
_STAMP_NAME = b"\x0a\x08__gw.seq\x12"
_VALUE_AT = 2 + len(_STAMP_NAME) + 1  # after the value's one-byte length
# the field's first bytes up to the value, for each length of a value (a decimal int64
# and a mark: at most 20 bytes) -> that length
_STAMP_HEADS = {b"\x0a" + bytes([n + 12]) + _STAMP_NAME + bytes([n]): n for n in range(1, 21)}
_SIZE = struct.Struct(">I")  # a message's metadata size, before it
_PLUS = MORE.encode()[0]
# the most messages an entry may hold to be read whole (a Kafka batch of 1 MB holds some
# 9,000 records of 100 bytes: more than one-table-look-up offset deltas reach, 8,192)
MAX_RECORDS = 1 << 20
# how many different message metadata tails one entry's read keeps what it made of
MAX_KEPT_RESTS = 1024


def kafka_batch(
    mid: MessageKey, data: bytes, count: int, publish_time: int, producer: str
) -> StoredMessage | None:
    """The `count` messages of a batched entry's payload `data` (uncompressed) as one
    Kafka batch based at offset 0, or None when the entry is not the plain case. `mid`: the
    entry's (ledger, entry, ...); the batch takes the id of its last message.

    Written for speed, one loop from message to record: the stamp is matched as the bytes
    the gateway writes, keys and values are copied once into the batch, a batch's few
    event times are decoded once each with their record field."""
    if not 0 < count <= MAX_RECORDS:
        return None
    table = VARINTS
    half = VARINT_TABLE_SIZE >> 1
    heads = _STAMP_HEADS
    size_of = _SIZE.unpack_from
    null = table[1]  # a Kafka length of -1
    parts: list[bytes] = []
    # event time field as stored -> its length, the time, the record's attributes and delta
    times: dict[bytes, tuple[int, int, bytes]] = {}
    # a message's metadata after its stamp -> the record's attributes and timestamp delta,
    # its key and value lengths and key, the value's size, the record's size but the delta
    rests: dict[bytes, tuple[bytes, bytes, int, int]] = {}
    base_ts = max_ts = -1
    last = count - 1
    first_stamp = last_stamp = b""
    end = len(data)
    pos = 0
    try:
        for index in range(count):
            p = pos + 4
            stop = p + size_of(data, pos)[0]
            if stop > end:
                return None
            # the stamp, first and the only property: its field's head names its length
            n = heads.get(data[p : p + _VALUE_AT], 0)
            if not n:
                return None
            p += _VALUE_AT + n
            if index == last:
                last_stamp = data[p - n : p]
            elif data[p - 1] != _PLUS:
                return None  # a batch ends inside the entry: not the plain case
            if not index:
                first_stamp = data[p - n : p]
            # the rest of the metadata (key, time, size): a batch's records mostly repeat a
            # few, so what they make of the record is kept by those bytes
            rest = data[p:stop]
            known_rest = rests.get(rest)
            if known_rest is not None:
                stamped, fields, size, body = known_rest
                pos = stop + size
                if pos > end:
                    return None
                offset_delta = table[index << 1] if index < half else zigzag_bytes(index)
                length = body + len(offset_delta)
                parts += (
                    table[length << 1] if length < half else zigzag_bytes(length),
                    stamped,
                    offset_delta,
                    fields,
                    data[stop:pos] if size else b"",
                    b"\x00",  # no headers
                )
                continue
            key = null
            size = -1
            stamped = b""  # the record's attributes and timestamp delta
            absent = False
            while p < stop:
                t = data[p]
                if t == 0x12:  # partition key (an empty one reads as none)
                    n = data[p + 1]
                    if n < 0x80:
                        p += 2
                    else:
                        n, p = decode_varint(data, p + 1, stop)
                    if n:
                        key = (table[n << 1] if n < half else zigzag_bytes(n)) + data[p : p + n]
                    p += n
                elif t == 0x28:  # event time
                    raw = data[p + 1 : p + 7]
                    known = times.get(raw)
                    if known is None:
                        ts, q = decode_varint(data, p + 1, stop)
                        if ts <= 0:
                            return None
                        if base_ts < 0:
                            base_ts = ts
                        max_ts = max(max_ts, ts)
                        d = ts - base_ts
                        z = (d << 1) ^ (d >> 63)
                        known = (
                            q - p,
                            ts,
                            b"\x00" + (table[z] if z < len(table) else zigzag_bytes(d)),
                        )
                        if q - p <= 7:  # a longer varint's first 6 bytes do not name it
                            times[raw] = known
                    p += known[0]
                    stamped = known[2]
                elif t == 0x3A:  # ordering key: the partition key again
                    n = data[p + 1]
                    if n < 0x80:
                        p += 2 + n
                    else:
                        n, p = decode_varint(data, p + 1, stop)
                        p += n
                elif t == 0x18:  # payload size
                    n = data[p + 1]
                    if n < 0x80:
                        size = n
                        p += 2
                    else:
                        size, p = decode_varint(data, p + 1, stop)
                elif t == 0x48 and data[p + 1] < 2:  # null value
                    absent = data[p + 1] == 1
                    p += 2
                elif t == 0x40:  # Pulsar's sequence id: not Kafka's
                    p = decode_varint(data, p + 1, stop)[1]
                else:  # another property, a base64 key, compacted out, unknown: not plain
                    return None
            if p != stop or size < 0 or not stamped:
                return None
            pos = stop + size
            if pos > end:
                return None
            if absent:
                value = null
                size = 0
            else:
                value = table[size << 1] if size < half else zigzag_bytes(size)
            fields = key + value
            body = len(stamped) + len(fields) + size + 1
            if len(rests) < MAX_KEPT_RESTS:
                rests[rest] = (stamped, fields, size, body)
            offset_delta = table[index << 1] if index < half else zigzag_bytes(index)
            length = body + len(offset_delta)
            parts += (
                table[length << 1] if length < half else zigzag_bytes(length),
                stamped,
                offset_delta,
                fields,
                data[stop:pos] if size else b"",
                b"\x00",  # no headers
            )
        text = last_stamp.decode()
        first = stamp_of({SEQ: first_stamp.decode()})
    except (IndexError, ValueError, struct.error):  # malformed: the message path says why
        return None
    # the stamps count up by one (a producer's stamps rise: the first and last tell)
    if pos != end or first is None or stamp_of({SEQ: text}) != first + last:
        return None
    batch = bytes(seal_records(b"".join(parts), count, base_ts, max_ts))
    properties = {BATCH: READ_FROM_ENTRY, RECORDS: str(count), SEQ: text}
    return StoredMessage((mid[0], mid[1], last), batch, "", properties, 0, publish_time, producer)


def is_read_batch(message: StoredMessage) -> bool:
    """Whether `message` is a batch `kafka_batch` made."""
    return message.properties.get(BATCH) == READ_FROM_ENTRY


def first_sequence(message: StoredMessage) -> int:
    """The stamp of the first message a `kafka_batch` batch stands for."""
    last = stamp_of(message.properties)
    assert last is not None, "a batch made by kafka_batch carries its last stamp"
    return last - int(message.properties[RECORDS]) + 1


def messages_of(message: StoredMessage) -> list[StoredMessage]:
    """The messages a `kafka_batch` batch stands for, as the message path reads them."""
    ledger, entry, last = message.id
    properties = message.properties
    first = first_sequence(message)
    last_stamp = properties[SEQ]
    publish_time, producer = message.publish_time, message.producer
    out: list[StoredMessage] = []
    for batch in decode_batches(message.payload or b"", verify_crc=False):
        for record in batch.records:
            index = record.offset_delta
            stamp = last_stamp if index == last else f"{first + index}{MORE}"
            out.append(
                StoredMessage(
                    (ledger, entry, index),
                    record.value,
                    record.key.decode("utf-8", "surrogateescape") if record.key else "",
                    {SEQ: stamp},
                    record.timestamp,
                    publish_time,
                    producer,
                )
            )
    return out
