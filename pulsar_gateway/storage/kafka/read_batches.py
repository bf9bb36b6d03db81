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

Only the plain case is taken: every message carries the gateway's `__gw.seq` stamp first
and no other property but its record's headers as the gateway maps them (read_headers.py;
no binary key, no producer codec) and an idempotent producer's stamps, the
stamps count up by one and all but the last say "more follows", and every message has its
event time. Anything else gives None and the entry is read message by message as before,
so the records that reach a Kafka client are those the message path gives (a property
test compares them).

An idempotent producer's entry (Java clients 3.0+ and `enable.idempotence`: every message
stamped `producer_state.PRODUCER`, a send's first also `FROM`) is the plain case when all
its messages carry the same stamp and only the first may carry `FROM`: one send's records.
Its batch carries the producer id, epoch and base sequence of the records as they were
produced, as a Kafka broker serves them and as the tail serves the produced batch before
a restart (the message path, which joins one-record messages of any producer into one
batch, carries none). The sequences are told by `FROM` (the send's first record's is the
stamp's first plus it) or, in an entry holding the rest of a send (the rest after a
ledger's lone first message, the end of a batch cut by the entry size), by the batch's
end: its last record is the stamp's last (the partition log writes every Kafka batch
`whole`, so an unmarked `__gw.seq` ends one). An entry with neither (the middle of a batch
cut in three) is read message by message. The item carries the stamps as the tail's
item for a produced batch does (`producer_state.produced`), so the producer state the
tailer rebuilds after a restart (`ProducerStateIndex.observe`) is the one the messages
give. A transactional producer's entry (`control_batch.TXN` on every message too, its
producer's id and epoch) is a transactional batch, as the message path serves its
records; the item's `TXN` opens the transaction in the tailer's `TransactionIndex` at the
entry's first offset, as its first message does.

The batch is an item for the whole entry (`messages.WHOLE_ENTRY`): the history reads and,
after a restart, the partition's tailer take it as the tailer takes an entry it wrote. It
stands for its messages exactly: `messages_of` gives them back (a read that starts inside
the entry, a resend that overlaps it), with the stamps, keys, values and times the message
path would have made.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from pulsar_gateway.gateway.backend.resend_filter import ResendFilter, stamp_of
from pulsar_gateway.gateway.backend.wire.protobuf import decode_varint
from pulsar_gateway.gateway.messages import (
    MORE,
    RECORDS,
    SEQ,
    WHOLE_ENTRY,
    MessageKey,
    StoredMessage,
)
from pulsar_gateway.kafka_codec.control_batch import TXN
from pulsar_gateway.kafka_codec.entry_format import BATCH, READ_FROM_ENTRY
from pulsar_gateway.kafka_codec.record_batch import decode_batches, seal_records
from pulsar_gateway.kafka_codec.record_codec import VARINT_TABLE_SIZE, VARINTS, zigzag_bytes
from pulsar_gateway.storage.kafka.producer_state import FROM, PRODUCER, SEQUENCE_WRAP
from pulsar_gateway.storage.kafka.read_headers import (
    Properties,
    header_bytes,
    producer_fields,
    properties_of,
)

# the stamp property as the gateway writes it: field 1 (KeyValue), its size, then the
# KeyValue's name field (0x0a, 8 bytes) and the value's key (0x12)
_STAMP_NAME = b"\x0a\x08__gw.seq\x12"
_VALUE_AT = 2 + len(_STAMP_NAME) + 1  # after the value's one-byte length
# the field's first bytes up to the value, for each length of a value (a decimal int64
# and a mark: at most 20 bytes) -> that length
_STAMP_HEADS = {b"\x0a" + bytes([n + 12]) + _STAMP_NAME + bytes([n]): n for n in range(1, 21)}
_SIZE = struct.Struct(">I")  # a message's metadata size, before it
_HEAD = 4 + _VALUE_AT  # a message's metadata size and its stamp field up to the value
_PLUS = MORE.encode()[0]
# how many different message metadata tails one entry's read keeps what it made of
MAX_KEPT_RESTS = 8192
# the read stops keeping them once this many were new and most records' were
MIN_MISSES = 256
# the most messages an entry may hold to be read whole (a Kafka batch of 1 MB holds some
# 9,000 records of 100 bytes: more than one-table-look-up offset deltas reach, 8,192)
MAX_RECORDS = 1 << 20
# a record's first part for each length a one- or two-byte varint holds: the record
# before's "no headers" and the length, one concatenation from what the record needs
_LEADS = tuple(b"\x00" + VARINTS[n << 1] for n in range(VARINT_TABLE_SIZE >> 1))


def kafka_batch(
    mid: MessageKey, data: bytes, count: int, publish_time: int, producer_name: str
) -> StoredMessage | None:
    """The `count` messages of a batched entry's payload `data` (uncompressed) as one
    Kafka batch based at offset 0, or None when the entry is not the plain case. `mid`: the
    entry's (ledger, entry, ...). The batch is an item standing for the whole entry
    (`messages.WHOLE_ENTRY`, as the tailer makes of an entry this gateway wrote and still
    knows): named by its first message, carrying the last one's stamp.

    Written for speed (`_write_records`): this is most of a fetch after a restart (py-spy),
    so every Python operation a record costs counts; the gateway runs this module compiled
    (docs/compiled.md), and the tests hold the compiled twin to this source's results."""
    if not 0 < count <= MAX_RECORDS:
        return None
    table = VARINTS
    half = VARINT_TABLE_SIZE >> 1
    parts: list[bytes] = []
    clock = _Times()
    # a message's metadata size and its stamp up to the value -> where the metadata ends,
    # where its stamp's mark is and where the stamp ends (from the message's start): one
    # look-up for all, as they seldom change
    starts: dict[bytes, _Start] = {}
    heads: dict[bytes, Properties] = {}  # properties' bytes -> what (read_headers.py)
    state: _Walk = (0, 0, 0, -1, None, None, None, None)
    try:
        # the records' offset deltas, by their length in bytes (one, two, three)
        for low, high, width in ((0, 64, 1), (64, half, 2), (half, count, 3)):
            if low >= count:
                break
            deltas = (
                table[low << 1 : min(count, high) << 1 : 2]
                if width < 3
                # three-byte varints of the zigzagged deltas, written out here (a call a
                # record cost 3% of a fetch); MAX_RECORDS keeps them under 2^21
                else [
                    bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14))
                    for z in range(low << 1, count << 1, 2)
                ]
            )
            walked = _write_records(data, deltas, width, parts, starts, heads, clock, state)
            if walked is None:
                return None
            state = walked
        pos, p, unmarked, last_unmarked, start, headers, stamps, since = state
        # every stamp but the last says "more follows" (else a batch ends inside the
        # entry: not the plain case); the last may say it too
        if unmarked > 1 or (unmarked and last_unmarked != p) or start is None:
            return None
        stamps = stamps or ()  # None only where no message was walked
        producer = _producer(stamps, since, count, unmarked == 1)
        if producer is None:
            return None
        text = data[p - start[2] + _HEAD : p].decode()
        n = _STAMP_HEADS[data[4:_HEAD]]
        first = stamp_of({SEQ: data[_HEAD : _HEAD + n].decode()})
    except (IndexError, KeyError, ValueError, struct.error):  # malformed: the message path says why
        return None
    # the stamps count up by one (a producer's stamps rise: the first and last tell); a
    # message that ran past the entry's end left `pos` past it
    if pos != len(data) or first is None or stamp_of({SEQ: text}) != first + count - 1:
        return None
    parts[0] = parts[0][1:]  # the first record follows no record's "no headers"
    parts.append(b"\x00" if headers is None else headers)  # the last record's headers
    batch = seal_records(
        parts, count, clock.base, clock.latest, producer=producer, transactional=len(stamps) > 1
    )
    properties = {BATCH: READ_FROM_ENTRY, RECORDS: str(count), SEQ: text, WHOLE_ENTRY: "1"}
    if stamps:  # as on the messages: the tailer's producer state reads them (module doc)
        properties.update(_stamped(stamps, since))
    return StoredMessage((mid[0], mid[1], 0), batch, "", properties, 0, publish_time, producer_name)


_NO_PRODUCER = (-1, -1, -1)


def _stamped(stamps: tuple[str, ...], since: str | None) -> dict[str, str]:
    """The producer's stamps as properties: `PRODUCER` (and `TXN`), `FROM` when `since`."""
    out = {PRODUCER: stamps[0]}
    if len(stamps) > 1:
        out[TXN] = stamps[1]
    if since is not None:
        out[FROM] = since
    return out


def _producer(
    stamps: tuple[str, ...], since: str | None, count: int, ends: bool
) -> tuple[int, int, int] | None:
    """The producer id, epoch and base sequence of an entry of `count` records whose
    messages all carry the idempotent producer's `stamps` (read_headers.Properties) and
    whose first carries `since` (`FROM`, or None); `ends`: whether its last message ends
    its Kafka batch. None when the stamps do not say the records' sequences (neither `FROM`
    nor the batch's end: its middle) or the count contradicts them (a batch's end that is
    not its last sequence)."""
    if not stamps:
        return _NO_PRODUCER
    fields = producer_fields(stamps[0], since)
    if fields is None:
        return None
    producer_id, epoch, base, last = fields
    if since is None:  # the rest of a send: its records run up to the batch's last
        if not ends:
            return None
        base = (last - count + 1) % SEQUENCE_WRAP
    elif ends and (base + count - 1) % SEQUENCE_WRAP != last:
        return None
    return producer_id, epoch, base


# where a message's metadata ends, where its stamp's last byte (the mark "more follows") is
# and where the stamp ends, from the message's start (`_start_of`)
_Start = tuple[int, int, int]
# where a walk through an entry's messages stands: the next message's position, where the
# last stamp's value ended, how many stamps lacked the mark and where the last such ended,
# the last message's `_Start` and its record's headers section (None: no headers), the
# producer's stamps every message carries (None: no message walked) and the first
# message's `FROM` (read_headers.Properties)
_Walk = tuple[
    int, int, int, int, "_Start | None", "bytes | None", "tuple[str, ...] | None", "str | None"
]
# what a message's metadata after its stamp makes of its record (`_write_records`): the
# first part ("no headers" for the record before, then length, attributes and timestamp
# delta), key and value lengths and key, the value's size, the record's headers section
# (None: none) and the first part without its first byte (for a record after headers)
_Known = tuple[bytes, bytes, int, "bytes | None", bytes]


def _write_records(
    data: bytes,
    deltas: list[bytes],
    width: int,
    parts: list[bytes],
    starts: dict[bytes, _Start],
    heads: dict[bytes, Properties],
    clock: _Times,
    state: _Walk,
) -> _Walk | None:
    """The records of the next `len(deltas)` messages, from where `state` stands, added to
    `parts` (4 a record, `deltas` all `width` bytes long): the previous record's headers
    (mostly the "no headers" byte) with this one's length, attributes and timestamp delta;
    the offset delta; key and value lengths and key; the value. None when a message is not
    the plain case.

    One loop from message to record: the stamp is matched as the bytes the gateway writes;
    a message's metadata after it is looked up whole (`rests`: key, time and size together
    repeat within a producer's batch), and only a metadata not seen yet is read, its fields
    in the order the gateway writes them (its headers' properties, partition key, event
    time, ordering key, null value, payload size) and a batch's few event times decoded
    once each. Metadata laid out
    otherwise (pulsar-client writes the payload size before the time) is parsed field by
    field (`_fields_of`)."""
    table = VARINTS
    half = VARINT_TABLE_SIZE >> 1
    head_size = _HEAD
    plus = _PLUS
    null = table[1]  # a Kafka length of -1
    times = clock.known
    leads = _LEADS
    plain = width + 1  # a record's offset delta and its "no headers"
    # a message's metadata after its stamp, from the stamp's mark "more follows" on -> the
    # record's first part (see above), its key and value lengths and key, the value's size
    # (only stamps with the mark are kept, so a hit says the mark is there)
    rests: dict[bytes, _Known] = {}
    # whether to look there: not once most metadata is new (many keys, times that change
    # every millisecond), as such an entry paid for a look-up a record in vain
    looking = True
    misses = 0
    first_part = len(parts)
    pos, p, unmarked, last_unmarked, start, headers, stamps, since = state
    rest = b""
    # the last properties read and what they said: an idempotent producer's stamp makes
    # every message's properties the same bytes (without headers, or with the same ones),
    # while new keys or times make its metadata new
    last_properties = b"\x00"
    last_said: Properties = (None, (), None)
    for delta in deltas:
        # the stamp, first and the only property: its field's head names its length
        start = starts.get(data[pos : pos + head_size])
        if start is None:
            start = _start_of(data, pos, starts)
            if start is None:
                return None
        stop = pos + start[0]
        if looking:
            rest = data[pos + start[1] : stop]
            known = rests.get(rest)
        else:
            known = None
        if known is None:
            p = pos + start[2]
            mark = data[p - 1] == plus
            if not mark:
                unmarked += 1
                last_unmarked = p
            # the fields in the gateway's order: the record's headers as properties
            # (read_headers.py), partition key (its length one byte), event time, the
            # ordering key (the partition key again), null value, payload size; another
            # layout (q != stop) is parsed field by field
            own = None
            own_stamps: tuple[str, ...] = ()
            own_since = None
            if data[p] == 0x0A:
                # the same properties as the last message's: they end where another field
                # starts (before the metadata's end)
                after = p + len(last_properties)
                if after < stop and data[after] != 0x0A and data.startswith(last_properties, p):
                    p = after
                    own, own_stamps, own_since = last_said
                else:
                    found_headers = header_bytes(data, p, stop, heads)
                    if found_headers is None:
                        return None
                    last_properties = data[p : found_headers[0]]
                    p, last_said = found_headers
                    own, own_stamps, own_since = last_said
            # one send's records: one producer's stamps on all, `FROM` on the first only
            # (a message met again, in `rests`, carries the stamps of the one met first)
            if own_stamps != stamps:
                if stamps is not None:
                    return None
                stamps = own_stamps
            if own_since is not None:
                if parts:
                    return None
                since = own_since
            q = p
            key = null
            k = 0
            if data[q] == 0x12:
                k = data[q + 1]
                q = q + 2 + k if k < 0x80 else -1
                if k:
                    key = table[k << 1] + data[q - k : q]
            if q >= 0 and data[q] == 0x28:
                moment = times.get(data[q + 1 : q + 7]) or clock.decode(data, q, stop)
                q += moment[0]
                if k:
                    q = q + 2 + k if data[q] == 0x3A and data[q + 1] == k else -1
                if data[q] == 0x48 and data[q + 1] == 1:
                    q = q + 4 if data[q + 2] == 0x18 and data[q + 3] == 0 else -1
                    size = 0
                    value = null
                elif data[q] == 0x18:
                    size = data[q + 1]
                    if size < 0x80:
                        q += 2
                    else:
                        size, q = decode_varint(data, q + 1, stop)
                    value = table[size << 1] if size < half else zigzag_bytes(size)
                else:
                    q = -1
            else:
                q = -1
            if q != stop:
                found = _fields_of(data, p, stop)
                if found is None:
                    return None
                q, key, value, size = found
                moment = times.get(data[q + 1 : q + 7]) or clock.decode(data, q, stop)
            stamped = moment[1]
            fields = key + value
            ends = plain if own is None else width + len(own)  # offset delta and headers
            length = len(stamped) + len(fields) + size + ends
            if length < half:
                head = table[length << 1] + stamped
                lead = leads[length] + stamped
            else:
                head = zigzag_bytes(length) + stamped
                lead = b"\x00" + head
            if looking:
                misses += 1
                if mark and own_since is None:
                    rests[rest] = (lead, fields, size, own, head)
                # most records so far new (4 parts a record): stop looking
                looking = misses < MIN_MISSES or misses * 8 < len(parts) - first_part
                looking = looking and len(rests) < MAX_KEPT_RESTS
        else:  # the hot path (most records' metadata was seen): no more than this
            lead, fields, size, own, head = known
        pos = stop + size
        if headers is None:
            parts += (lead, delta, fields, data[stop:pos])
        else:  # the record before had headers: they end it, not "no headers"
            parts += (headers + head, delta, fields, data[stop:pos])
        headers = own
    if deltas:  # where the last message's stamp ended
        assert start is not None, "every message walked has a start"
        p = stop - start[0] + start[2]
    return pos, p, unmarked, last_unmarked, start, headers, stamps, since


def _start_of(data: bytes, pos: int, starts: dict[bytes, _Start]) -> _Start | None:
    """Where the metadata of the message at `pos` ends, where its stamp's mark is and
    where the stamp ends (from `pos`), kept in `starts` by the bytes that tell them; None
    when the message does not start with the stamp or its metadata holds nothing after it."""
    size = _SIZE.unpack_from(data, pos)[0]
    n = _STAMP_HEADS.get(data[pos + 4 : pos + _HEAD], 0)
    if not n or _HEAD + n >= 4 + size:
        return None
    start = starts[data[pos : pos + _HEAD]] = (4 + size, _HEAD + n - 1, _HEAD + n)
    return start


class _Times:
    """One entry's event times: each time field's bytes -> its length and the record's
    attributes and timestamp delta, from the first record's time (the batch's base)."""

    __slots__ = ("base", "known", "latest")

    def __init__(self) -> None:
        # the field's first 6 bytes (a millisecond time's varint; a longer one's first 6
        # bytes do not name it, and it is not kept) -> (field length, attributes and delta)
        self.known: dict[bytes, tuple[int, bytes]] = {}
        self.base = self.latest = -1

    def decode(self, data: bytes, at: int, stop: int) -> tuple[int, bytes]:
        """The time field at `at` (its tag byte); ValueError for a time not above 0."""
        ts, after = decode_varint(data, at + 1, stop)
        if ts <= 0:
            raise ValueError("no event time: not the plain case")
        if self.base < 0:
            self.base = ts
        self.latest = max(self.latest, ts)
        d = ts - self.base
        z = (d << 1) ^ (d >> 63)
        moment = (after - at, b"\x00" + (VARINTS[z] if z < len(VARINTS) else zigzag_bytes(d)))
        if after - at <= 7:
            self.known[data[at + 1 : at + 7]] = moment
        return moment


def _fields_of(data: bytes, p: int, stop: int) -> tuple[int, bytes, bytes, int] | None:
    """A message's metadata after its stamp, field by field, in any order: where its event
    time field is, the record's key and value lengths-and-key, and the value's size; None
    when it is not the plain case (another property, a base64 key, compacted out, a field
    this reader does not know, no event time)."""
    table = VARINTS
    half = VARINT_TABLE_SIZE >> 1
    null = table[1]  # a Kafka length of -1
    key = null
    size = time_at = -1
    absent = False
    while p < stop:
        t = data[p]
        if t == 0x12:  # partition key (an empty one reads as none)
            n, p = decode_varint(data, p + 1, stop)
            key = (table[n << 1] if n < half else zigzag_bytes(n)) + data[p : p + n] if n else null
            p += n
        elif t == 0x28:  # event time
            time_at = p
            p = decode_varint(data, p + 1, stop)[1]
        elif t == 0x3A:  # ordering key: the partition key again
            n, p = decode_varint(data, p + 1, stop)
            p += n
        elif t == 0x18:  # payload size
            size, p = decode_varint(data, p + 1, stop)
        elif t == 0x48 and data[p + 1] < 2:  # null value
            absent = data[p + 1] == 1
            p += 2
        elif t == 0x40:  # Pulsar's sequence id: not Kafka's
            p = decode_varint(data, p + 1, stop)[1]
        else:
            return None
    if p != stop or size < 0 or time_at < 0:
        return None
    if absent:  # a null value carries no payload; one that claims some is not plain
        return (time_at, key, null, 0) if size == 0 else None
    return time_at, key, table[size << 1] if size < half else zigzag_bytes(size), size


def is_read_batch(message: StoredMessage) -> bool:
    """Whether `message` is a batch `kafka_batch` made."""
    return message.properties.get(BATCH) == READ_FROM_ENTRY


def first_sequence(message: StoredMessage) -> int:
    """The stamp of the first message a `kafka_batch` batch stands for."""
    last = stamp_of(message.properties)
    assert last is not None, "a batch made by kafka_batch carries its last stamp"
    return last - int(message.properties[RECORDS]) + 1


def as_numbered(batch: list[StoredMessage], resends: ResendFilter) -> Iterator[StoredMessage]:
    """`batch` as the tailer numbers it, one at a time: a `kafka_batch` batch that a resend
    overlaps in part (seen up to inside it by `resends` when it is reached; pulsar-client
    may batch its resent messages otherwise) as its messages, the resend filter dropping
    those seen; anything else as it is."""
    for message in batch:
        if is_read_batch(message):
            first = first_sequence(message)
            seen = resends.last_of(message.producer)
            if seen is not None and first <= seen < first + int(message.properties[RECORDS]) - 1:
                yield from messages_of(message)
                continue
        yield message


def messages_of(message: StoredMessage) -> list[StoredMessage]:
    """The messages a `kafka_batch` batch stands for, as the message path reads them."""
    ledger, entry, _ = message.id
    properties = message.properties
    last = int(properties[RECORDS]) - 1
    first = first_sequence(message)
    last_stamp = properties[SEQ]
    publish_time, producer = message.publish_time, message.producer
    # an idempotent producer's stamps (and a transaction's): on every message, `FROM` on
    # the first only
    added = {name: properties[name] for name in (PRODUCER, TXN) if name in properties}
    since = properties.get(FROM)
    out: list[StoredMessage] = []
    for batch in decode_batches(message.payload or b"", verify_crc=False):
        for record in batch.records:
            index = record.offset_delta
            stamp = last_stamp if index == last else f"{first + index}{MORE}"
            own = {SEQ: stamp, **properties_of(record.headers), **added}
            if index == 0 and since is not None:
                own[FROM] = since
            out.append(
                StoredMessage(
                    (ledger, entry, index),
                    record.value,
                    record.key.decode("utf-8", "surrogateescape") if record.key else "",
                    own,
                    record.timestamp,
                    publish_time,
                    producer,
                )
            )
    return out
