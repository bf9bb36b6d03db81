"""A message's headers, read from its properties' bytes, for `read_batches.kafka_batch`: a
batched entry of records WITH headers is read as one Kafka batch too (issue 32: fetch after a
restart; docs/offsets.md, "Reads from storage, an entry at a time").

Read message by message, a headered record cost a `StoredMessage`, `headers_of`'s JSON parse
of its header order and the fetch's encoding of a batch of one-record messages; worse, the
encoded records outgrew the byte count the history read had stopped at (its sizes count no
headers), so the fetch cut the batch, encoded what it kept again, and the next fetch
reopened a reader at a checkpoint to read the rest once more (py-spy: `headers_of`,
`encode_entry_parts` and the history reads, each 2-3 times a record).

A message's properties after its stamp are read once per distinct metadata (a producer's
batch repeats its headers; `kafka_batch` keeps what it made of each), and taken only when
they are exactly what the gateway's mapping writes for some headers (`to_message`, the
one definition: docs/pulsar-mapping.md): plain headers as properties, their order or the
JSON of headers that cannot be plain. An idempotent producer's stamps after them
(`producer_state.PRODUCER` on every message, `FROM` on a send's first, and a transactional
producer's `control_batch.TXN`) are told apart from the headers (`Properties`): Java
clients 3.0+ are idempotent by default, so most Kafka producers' records carry them. Then
the messages a `kafka_batch` batch stands for (`messages_of`) carry the very properties
they were stored with (as a dictionary: their order is the mapping's). Anything else (a
binary key's mark, a producer codec, another stamp of the gateway's, a producer stamp that
does not parse, a transaction's stamp that is not its producer's, a property written
otherwise) gives None and the entry is read message by message.
"""

from __future__ import annotations

import binascii
import json

from pulsar_gateway.gateway.backend.wire.protobuf import decode_varint
from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.kafka_codec.control_batch import TXN, txn_value
from pulsar_gateway.kafka_codec.record_codec import RecordBatchError, encode_headers
from pulsar_gateway.kafka_codec.record_mapping import (
    GATEWAY_RESERVED,
    HEADER_ORDER,
    HEADERS,
    RESERVED,
    Header,
    headers_of,
    to_message,
)
from pulsar_gateway.storage.kafka.producer_state import FROM, PRODUCER, SEQUENCE_WRAP

_PROPERTY = 0x0A  # SingleMessageMetadata.properties (a KeyValue), field 1
_NAME = 0x0A  # KeyValue.key, field 1
_VALUE = 0x12  # KeyValue.value, field 2
_PREFIXES = (RESERVED, GATEWAY_RESERVED)
# the mapping's own properties a headered record may carry (record_mapping.to_message)
_MAPPING = frozenset({HEADER_ORDER, HEADERS})
# the most distinct properties one entry's read keeps what it made of (records whose headers
# all differ, a trace id each, pay for a look-up in vain)
MAX_KNOWN = 64
# What a message's properties after its stamp say: its record's headers section (their
# count first; None: no headers), its producer's stamps (`PRODUCER`'s value and, in a
# transaction, `TXN`'s; none: ()) and, on a send's first message, how many of the batch's
# records came before it (`FROM`'s value, else None)
Properties = tuple["bytes | None", tuple[str, ...], "str | None"]
_NOT_THE_CASE: Properties = (b"", (), None)  # kept for properties that are not the case


def header_bytes(
    data: bytes, p: int, stop: int, known: dict[bytes, Properties]
) -> tuple[int, Properties] | None:
    """The properties at `data[p:stop]` (the ones after a message's stamp, up to the first
    field that is not one): where they end and what they say (`Properties`); None when they
    are not what the gateway writes for a record's headers and its producer's stamps, or
    are malformed (the message path says why). `known`: what the properties' bytes made
    before (one entry's; a batch mostly repeats its headers and its producer's stamp, while
    its keys and times make most messages' metadata new), at most `MAX_KNOWN` kept."""
    q = p
    while q < stop and data[q] == _PROPERTY:
        size = data[q + 1]
        if size < 0x80:
            q += 2 + size
        else:
            size, q = decode_varint(data, q + 1, stop)
            q += size
    if q > stop:
        return None
    raw = data[p:q]
    found = known.get(raw)
    if found is None:
        found = _section(data, p, q) or _NOT_THE_CASE
        if len(known) < MAX_KNOWN:
            known[raw] = found
    return None if found is _NOT_THE_CASE else (q, found)


def _section(data: bytes, p: int, stop: int) -> Properties | None:
    """`header_bytes`' answer for properties not met before."""
    properties: dict[str, str] = {}
    while p < stop:
        size, p = decode_varint(data, p + 1, stop)
        end = p + size
        if end > stop:
            return None
        name, value = _pair(data, p, end)
        if name in properties:
            return None  # a name twice: not what the mapping writes
        properties[name] = value
        p = end
    stamp = properties.pop(PRODUCER, "")
    since = properties.pop(FROM, None)
    txn = properties.pop(TXN, None)
    stamps: tuple[str, ...] = ()
    if stamp or since is not None or txn is not None:
        fields = producer_fields(stamp, since)
        if fields is None:
            return None
        stamps = (stamp,)
        if txn is not None:  # a transactional producer's records: its id and epoch
            if txn != txn_value(fields[0], fields[1]):
                return None
            stamps = (stamp, txn)
    if not properties:
        return None if not stamps else (None, stamps, since)
    headers = _headers(properties)
    if headers is None:
        return None
    try:
        return bytes(encode_headers(headers)), stamps, since
    except RecordBatchError:
        return None


def producer_fields(stamp: str, since: str | None) -> tuple[int, int, int, int] | None:
    """An idempotent producer's stamp (`PRODUCER`: `id:epoch:first:last`) as a Kafka
    batch's producer id, epoch and sequence range, the first moved on by `since` (`FROM`:
    the batch's records before the send; its sequences wrap as Kafka's do); None when it is
    not what the gateway writes (producer_state.stamp): fields out of a Kafka batch's
    ranges, a `FROM` without a stamp."""
    parts = stamp.split(":")
    if len(parts) != 4 or not all(part.isdigit() and part.isascii() for part in parts):
        return None
    if since is not None and not (since.isdigit() and since.isascii()):
        return None
    producer_id, epoch, first, last = map(int, parts)
    if producer_id >= 1 << 63 or epoch >= 1 << 15 or max(first, last) >= SEQUENCE_WRAP:
        return None
    return producer_id, epoch, (first + int(since or 0)) % SEQUENCE_WRAP, last


def _pair(data: bytes, p: int, end: int) -> tuple[str, str]:
    """A KeyValue's name and value (ValueError for another field or a missing part),
    decoded as `wire.batch.split_batch` decodes them."""
    name = value = None
    while p < end:
        tag = data[p]
        if tag != _NAME and tag != _VALUE:
            raise ValueError("a KeyValue field the gateway does not write")
        size, p = decode_varint(data, p + 1, end)
        if p + size > end:
            raise ValueError("a KeyValue field past its end")
        text = data[p : p + size].decode("utf-8", "surrogateescape")
        if tag == _NAME:
            name = text
        else:
            value = text
        p += size
    if name is None or value is None:
        raise ValueError("a KeyValue without its name or value")
    return name, value


def _headers(properties: dict[str, str]) -> list[Header] | None:
    """The headers these properties map back to (`headers_of`), when the mapping writes
    exactly these properties for them (in any order: pulsar-client writes them sorted by
    name, and `headers_of` reads no order from the properties' own); else None."""
    if not properties:
        return None
    for name in properties:
        if name.startswith(_PREFIXES) and name not in _MAPPING:
            return None
    try:
        headers = headers_of(StoredMessage((0, 0, 0), None, "", properties, 0, 0))
    except (ValueError, TypeError, UnicodeError, binascii.Error, json.JSONDecodeError):
        return None
    if to_message(None, None, 0, headers).properties != properties:
        return None
    return headers


def properties_of(headers: list[Header]) -> dict[str, str]:
    """The properties a record's headers were stored as (none: {}), for `messages_of`."""
    if not headers:
        return {}
    return to_message(None, None, 0, headers).properties or {}
