"""A produced Kafka batch's records straight into `pulsar`-format messages, in one pass.

The Produce path of the `pulsar` entry format used to decode every record into a `Record`
(record_codec.decode_records) and then map each to an `OutMessage` (record_mapping,
entry_format.PulsarEntryFormat.encode): two Python objects and two loops per record, the
largest share of the gateway's produce time once the data path moved whole batches
(docs/pulsar-protocol.md, "Measured"). `decode_messages` reads the records' bytes and
makes the message at once: the common records (no headers; no key or a UTF-8 one) inline,
any other through `to_message`, so the mapping stays the one of docs/pulsar-mapping.md.

It accepts and refuses exactly what `decode_records` followed by the Produce checks of
`check_produce_batches` do: a malformed record raises as decoding would, and only then a
record whose offset delta is not its index (INVALID_RECORD). A batch whose base timestamp
is near the int64 limits goes the long way (its timestamps wrap as Java's do).
"""

from __future__ import annotations

from pulsar_gateway.gateway.messages import OutMessage
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.record_codec import (
    TS_SAFE,
    ZIGZAG_BYTE,
    RecordBatchError,
    decode_headers,
    decode_records,
    length_slow,
    timestamp_slow,
    varint_slow,
)
from pulsar_gateway.kafka_codec.record_mapping import to_message


def decode_messages(buf: bytes, count: int, base_ts: int) -> list[OutMessage]:
    """The `count` records of an uncompressed batch body as `pulsar`-format messages.
    IndexError means truncated input (the caller maps it, as for decode_records)."""
    # The record walk is written out here, in decode_records/decode_messages and in
    # record_entry.build_entry on purpose: a walk shared as a generator cost 5-15 % more
    # per record (docs/pulsar-protocol.md, "Why the record walk is written three times").
    if not -TS_SAFE < base_ts < TS_SAFE:
        records = decode_records(buf, count, base_ts)
        _check_deltas([record.offset_delta for record in records])
        return [to_message(r.key, r.value, r.timestamp, r.headers) for r in records]
    zz = ZIGZAG_BYTE
    slow = varint_slow
    make = OutMessage
    messages: list[OutMessage] = []
    append = messages.append
    limit = len(buf)
    pos = 0
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
        pos += 1  # record attributes: unused by every Kafka version so far
        # timestamp delta (base_ts is within TS_SAFE here: a two-byte delta cannot wrap)
        b = buf[pos]
        if b < 128:
            ts = base_ts + zz[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 128:  # a batch spanning 64 ms to 8 s
                u = (b & 127) | (c << 7)
                ts = base_ts + ((u >> 1) ^ -(u & 1))
                pos += 2
            else:
                ts, pos = timestamp_slow(buf, pos, base_ts)
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
            pos += 1
            key = buf[pos : pos + (b >> 1)]
            pos += b >> 1
        else:
            n, pos = length_slow(buf, pos)
            if n < 0:
                key = None
            else:
                key = buf[pos : pos + n]
                pos += n
        # value
        b = buf[pos]
        if b == 1:
            value = None
            pos += 1
        elif b < 128:
            if b & 1:
                raise RecordBatchError(f"negative value length {zz[b]}")
            pos += 1
            value = buf[pos : pos + (b >> 1)]
            pos += b >> 1
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
        # headers, then the message
        if buf[pos] == 0:
            pos += 1
            if pos != end:
                raise RecordBatchError(f"record length {size} does not match its fields")
            if key is None:
                append(make(value, None, None, ts if ts > 0 else 0))
                continue
            if key:
                try:
                    text = key.decode("utf-8")
                except UnicodeDecodeError:
                    pass
                else:
                    append(make(value, text, None, ts if ts > 0 else 0))
                    continue
            append(to_message(key, value, ts, []))
            continue
        headers, pos = decode_headers(buf, pos)
        if pos != end:
            raise RecordBatchError(f"record length {size} does not match its fields")
        append(to_message(key, value, ts, headers))
    if pos != limit:
        raise RecordBatchError(f"{limit - pos} bytes left over after {count} records")
    if bad_at >= 0:
        raise RecordBatchError(
            f"record {bad_at} has offset delta {bad_delta}", ErrorCode.INVALID_RECORD
        )
    return messages


def _check_deltas(deltas: list[int]) -> None:
    """`check_produce_batches`'s rule: record i has offset delta i."""
    for index, delta in enumerate(deltas):
        if delta != index:
            raise RecordBatchError(
                f"record {index} has offset delta {delta}", ErrorCode.INVALID_RECORD
            )
