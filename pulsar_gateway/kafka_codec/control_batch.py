"""Transaction markers: Kafka's control batches, and how the gateway stores them.

A transaction ends with one marker in every partition it wrote to: a control batch (attributes
transactional + control) holding one control record whose key says COMMIT or ABORT. The
gateway stores a marker as a `kafka`-format entry (the control batch as Kafka encodes it, one
offset, `__kafka.batch`), whatever the topic's entry format, so Fetch serves it as it serves
any stored batch; and it marks it with `MARKER` (and every transactional record with `TXN`)
so that the partition log, and a native Pulsar consumer, can tell markers and transactional
records apart without decoding anything (docs/pulsar-mapping.md, "Transactions").
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from enum import IntEnum

from pulsar_gateway.gateway.messages import RECORDS, OutMessage
from pulsar_gateway.kafka_codec.record_batch import encode_batch

# "<producer id>:<epoch>" on every transactional record and on every marker
TXN = "__kafka.txn"
# "commit" or "abort" on a marker; never on a record
MARKER = "__kafka.txn.marker"
COMMIT = "commit"
ABORT = "abort"
# the stored-batch property of the `kafka` entry format (entry_format.BATCH)
_BATCH = "__kafka.batch"

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
CONTROL_KEY_SIZE = _KEY.size


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


class ControlRecordError(ValueError):
    """A control record key that is not one Kafka writes."""


def encode_control_key(kind: ControlType) -> bytes:
    return _KEY.pack(0, kind)


def decode_control_key(key: bytes | None) -> ControlType:
    """The type of a control record from its key: version 0, then ABORT (0) or COMMIT (1).
    Raises ControlRecordError, and nothing else, on anything else."""
    if key is None or len(key) < CONTROL_KEY_SIZE:
        raise ControlRecordError("control record key shorter than 4 bytes")
    version, kind = _KEY.unpack_from(key)
    if version != 0:
        raise ControlRecordError(f"control record key version {version}")
    if kind not in (ControlType.ABORT, ControlType.COMMIT):
        raise ControlRecordError(f"control record type {kind} is not a transaction marker")
    return ControlType(kind)


def txn_value(producer_id: int, epoch: int) -> str:
    return f"{producer_id}:{epoch}"


def parse_txn_value(value: str) -> tuple[int, int] | None:
    """(producer id, epoch) from a `TXN` property; None if it is not one."""
    producer_id, sep, epoch = value.partition(":")
    if not sep:
        return None
    try:
        return int(producer_id), int(epoch)
    except ValueError:
        return None


def mark_transactional(messages: Sequence[OutMessage], producer_id: int, epoch: int) -> None:
    """Stamp the messages of a transactional batch (in place: they are the caller's own)."""
    value = txn_value(producer_id, epoch)
    for message in messages:
        message.properties = {**(message.properties or {}), TXN: value}


def marker_message(producer_id: int, epoch: int, commit: bool, timestamp: int) -> OutMessage:
    """The Pulsar message that stores one transaction marker."""
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    batch = encode_batch(
        0,
        [(0, timestamp, encode_control_key(kind), _VALUE.pack(0, 0), [])],
        producer_id=producer_id,
        producer_epoch=epoch,
        is_transactional=True,
        is_control=True,
    )
    properties = {
        _BATCH: "2",
        RECORDS: "1",
        TXN: txn_value(producer_id, epoch),
        MARKER: COMMIT if commit else ABORT,
    }
    return OutMessage(bytes(batch), None, properties, timestamp)
