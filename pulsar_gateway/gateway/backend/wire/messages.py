"""The data messages of Pulsar's protocol that travel with payloads (PulsarApi.proto):
message ids, key/value pairs, the metadata of an entry (`MessageMetadata`), of one message
inside a batched entry (`SingleMessageMetadata`), and what a broker may prepend to an entry
(`BrokerEntryMetadata`).

Field numbers are Pulsar's; only the fields the gateway reads or writes are listed, every
other field (encryption, transactions, schema versions...) is skipped when decoding.
docs/pulsar-protocol.md says what each one is used for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

from pulsar_gateway.gateway.backend.wire.errors import DecodeError
from pulsar_gateway.gateway.backend.wire.protobuf import (
    BOOL,
    BYTES,
    INT32,
    INT64,
    MESSAGE,
    STRING,
    UINT64,
    Field,
    ProtoMessage,
    decode_varint,
    proto,
    to_signed32,
)


class CompressionType(IntEnum):
    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


@proto
@dataclass(slots=True)
class KeyValue(ProtoMessage):
    key: str = ""
    value: str = ""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "key", STRING, required=True),
        Field(2, "value", STRING, required=True),
    )

    @classmethod
    def decode(
        cls, data: bytes | bytearray | memoryview, start: int = 0, end: int = -1
    ) -> KeyValue:
        """Every property of every message: the usual layout (key, then value, both
        shorter than 128 bytes) read directly, any other through the general decoder."""
        if end < 0:
            end = len(data)
        if end - start >= 4 and data[start] == 0x0A and data[start + 1] < 0x80:
            middle = start + 2 + data[start + 1]
            if middle + 2 <= end and data[middle] == 0x12 and middle + 2 + data[middle + 1] == end:
                return cls(
                    str(data[start + 2 : middle], "utf-8", "surrogateescape"),
                    str(data[middle + 2 : end], "utf-8", "surrogateescape"),
                )
        return super(KeyValue, cls).decode(data, start, end)


@proto
@dataclass(slots=True)
class MessageIdData(ProtoMessage):
    """A message's position: ledger and entry; `batch_index` -1 for a whole entry."""

    ledger_id: int = 0
    entry_id: int = 0
    partition: int = -1
    batch_index: int = -1
    ack_set: list[int] = field(default_factory=list)
    batch_size: int | None = None
    first_chunk_message_id: MessageIdData | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = ()  # set below: the message refers to itself

    @classmethod
    def decode(
        cls, data: bytes | bytearray | memoryview, start: int = 0, end: int = -1
    ) -> MessageIdData:
        """Every receipt and MESSAGE carries one: a ledger and an entry, then perhaps a
        partition and a batch index (pulsar-lite writes partition -1 in every one), in
        order, read directly; any other layout through the general decoder."""
        if end < 0:
            end = len(data)
        if end - start >= 4 and data[start] == 0x08:
            ledger, pos = decode_varint(data, start + 1, end)
            if pos < end and data[pos] == 0x10:
                entry, pos = decode_varint(data, pos + 1, end)
                if pos == end:
                    return cls(ledger, entry)
                partition = batch_index = -1
                if data[pos] == 0x18:
                    raw, pos = decode_varint(data, pos + 1, end)
                    partition = to_signed32(raw)
                if pos < end and data[pos] == 0x20:
                    raw, pos = decode_varint(data, pos + 1, end)
                    batch_index = to_signed32(raw)
                if pos == end:
                    return cls(ledger, entry, partition, batch_index)
        return super(MessageIdData, cls).decode(data, start, end)


MessageIdData.FIELDS = (
    Field(1, "ledger_id", UINT64, required=True),
    Field(2, "entry_id", UINT64, required=True),
    Field(3, "partition", INT32),
    Field(4, "batch_index", INT32),
    Field(5, "ack_set", INT64, repeated=True),
    Field(6, "batch_size", INT32),
    Field(7, "first_chunk_message_id", MESSAGE, message=MessageIdData),
)
MessageIdData._prepare()


@proto
@dataclass(slots=True)
class MessageMetadata(ProtoMessage):
    """The metadata of one entry. An entry is batched when `num_messages_in_batch` is set
    (even to 1): its payload is then a run of single messages (`batch.py`)."""

    producer_name: str = ""
    sequence_id: int = 0
    publish_time: int = 0
    properties: list[KeyValue] = field(default_factory=list)
    replicated_from: str | None = None
    partition_key: str | None = None
    compression: int = CompressionType.NONE
    uncompressed_size: int = 0
    num_messages_in_batch: int | None = None
    event_time: int = 0
    encryption_keys: list[bytes] = field(default_factory=list)  # kept raw: only "is it set"
    schema_version: bytes | None = None
    partition_key_b64_encoded: bool = False
    ordering_key: bytes | None = None
    deliver_at_time: int | None = None
    marker_type: int | None = None
    highest_sequence_id: int = 0
    null_value: bool = False
    uuid: str | None = None
    num_chunks_from_msg: int | None = None
    total_chunk_msg_size: int | None = None
    chunk_id: int | None = None
    null_partition_key: bool = False

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "producer_name", STRING, required=True),
        Field(2, "sequence_id", UINT64, required=True),
        Field(3, "publish_time", UINT64, required=True),
        Field(4, "properties", MESSAGE, repeated=True, message=KeyValue),
        Field(5, "replicated_from", STRING),
        Field(6, "partition_key", STRING),
        Field(8, "compression", UINT64),
        Field(9, "uncompressed_size", UINT64),
        Field(11, "num_messages_in_batch", INT32),
        Field(12, "event_time", UINT64),
        Field(13, "encryption_keys", BYTES, repeated=True),
        Field(16, "schema_version", BYTES),
        Field(17, "partition_key_b64_encoded", BOOL),
        Field(18, "ordering_key", BYTES),
        Field(19, "deliver_at_time", INT64),
        Field(20, "marker_type", INT32),
        Field(24, "highest_sequence_id", UINT64),
        Field(25, "null_value", BOOL),
        Field(26, "uuid", STRING),
        Field(27, "num_chunks_from_msg", INT32),
        Field(28, "total_chunk_msg_size", INT32),
        Field(29, "chunk_id", INT32),
        Field(30, "null_partition_key", BOOL),
    )

    @classmethod
    def decode(
        cls, data: bytes | bytearray | memoryview, start: int = 0, end: int = -1
    ) -> MessageMetadata:
        """Every entry received: the fields every message has (producer, sequence id,
        publish time, properties, key, event time, compression) read here directly, the
        others through the general decoder field by field."""
        if end < 0:
            end = len(data)
        message = cls()
        properties = message.properties
        pos = start
        while pos < end:
            key = data[pos]
            if key < 0x80:
                pos += 1
            else:
                key, pos = decode_varint(data, pos, end)
            if pos >= end:
                raise DecodeError(f"MessageMetadata: field {key >> 3} without a value")
            if key in _VARINT_FIELDS:
                value = data[pos]
                if value < 0x80:
                    pos += 1
                else:
                    value, pos = decode_varint(data, pos, end)
                setattr(message, _VARINT_FIELDS[key], value)
            elif key == 0x22 or key == 0x0A or key == 0x32:  # properties, producer, key
                length = data[pos]
                if length < 0x80:
                    pos += 1
                else:
                    length, pos = decode_varint(data, pos, end)
                stop = pos + length
                if stop > end:
                    raise DecodeError(f"MessageMetadata: field {key >> 3} runs past its end")
                if key == 0x22:
                    # KeyValue.decode's usual layout, inline: a message has several
                    usual = False
                    if stop - pos >= 4 and data[pos] == 0x0A and data[pos + 1] < 0x80:
                        middle = pos + 2 + data[pos + 1]
                        usual = (
                            middle + 2 <= stop
                            and data[middle] == 0x12
                            and middle + 2 + data[middle + 1] == stop
                        )
                    if usual:
                        properties.append(
                            KeyValue(
                                str(data[pos + 2 : middle], "utf-8", "surrogateescape"),
                                str(data[middle + 2 : stop], "utf-8", "surrogateescape"),
                            )
                        )
                    else:
                        properties.append(KeyValue.decode(data, pos, stop))
                else:
                    text = str(data[pos:stop], "utf-8", "surrogateescape")
                    if key == 0x0A:
                        message.producer_name = text
                    else:
                        message.partition_key = text
                pos = stop
            else:
                pos = cls._decode_field(message, key, data, pos, end)
        return message

    @property
    def batched(self) -> bool:
        return self.num_messages_in_batch is not None

    @property
    def chunked(self) -> bool:
        return self.num_chunks_from_msg is not None and self.num_chunks_from_msg > 1

    def properties_dict(self) -> dict[str, str]:
        return {p.key: p.value for p in self.properties}


# MessageMetadata's unsigned varint fields, by key: read directly by its decoder (the
# signed ones, num_messages_in_batch and the chunk fields, go the general way)
_VARINT_FIELDS = {
    0x10: "sequence_id",
    0x18: "publish_time",
    0x40: "compression",
    0x48: "uncompressed_size",
    0x60: "event_time",
}


@proto
@dataclass(slots=True)
class SingleMessageMetadata(ProtoMessage):
    """The metadata of one message inside a batched entry. `batch.py` writes and reads
    these bytes itself on the hot path; this class is the reference for the rest."""

    properties: list[KeyValue] = field(default_factory=list)
    partition_key: str | None = None
    payload_size: int = 0
    compacted_out: bool = False
    event_time: int = 0
    partition_key_b64_encoded: bool = False
    ordering_key: bytes | None = None
    sequence_id: int | None = None
    null_value: bool = False
    null_partition_key: bool = False

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "properties", MESSAGE, repeated=True, message=KeyValue),
        Field(2, "partition_key", STRING),
        Field(3, "payload_size", INT32, required=True),
        Field(4, "compacted_out", BOOL),
        Field(5, "event_time", UINT64),
        Field(6, "partition_key_b64_encoded", BOOL),
        Field(7, "ordering_key", BYTES),
        Field(8, "sequence_id", UINT64),
        Field(9, "null_value", BOOL),
        Field(10, "null_partition_key", BOOL),
    )


@proto
@dataclass(slots=True)
class BrokerEntryMetadata(ProtoMessage):
    """What a broker configured for it prepends to each entry it delivers."""

    broker_timestamp: int | None = None
    index: int | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "broker_timestamp", UINT64),
        Field(2, "index", UINT64),
    )
