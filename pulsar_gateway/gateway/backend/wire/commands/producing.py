"""Commands of a producer: create, send, receipts and errors, close."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from pulsar_gateway.gateway.backend.wire.commands.base import Command
from pulsar_gateway.gateway.backend.wire.messages import KeyValue, MessageIdData
from pulsar_gateway.gateway.backend.wire.protobuf import (
    BOOL,
    BYTES,
    INT32,
    INT64,
    MESSAGE,
    STRING,
    UINT64,
    Field,
    decode_varint,
    proto,
)

# ---- producing ------------------------------------------------------------------------------


@proto
@dataclass(slots=True)
class Producer(Command):
    TYPE: ClassVar[int] = 5
    topic: str = ""
    producer_id: int = 0
    request_id: int = 0
    producer_name: str | None = None
    metadata: list[KeyValue] = field(default_factory=list)
    epoch: int = 0
    user_provided_producer_name: bool = True

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "topic", STRING, required=True),
        Field(2, "producer_id", UINT64, required=True),
        Field(3, "request_id", UINT64, required=True),
        Field(4, "producer_name", STRING),
        Field(6, "metadata", MESSAGE, repeated=True, message=KeyValue),
        Field(8, "epoch", UINT64),
        Field(9, "user_provided_producer_name", BOOL),
    )


@proto
@dataclass(slots=True)
class ProducerSuccess(Command):
    TYPE: ClassVar[int] = 17
    request_id: int = 0
    producer_name: str = ""
    last_sequence_id: int = -1
    schema_version: bytes | None = None
    topic_epoch: int | None = None
    producer_ready: bool = True

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "request_id", UINT64, required=True),
        Field(2, "producer_name", STRING, required=True),
        Field(3, "last_sequence_id", INT64),
        Field(4, "schema_version", BYTES),
        Field(5, "topic_epoch", UINT64),
        Field(6, "producer_ready", BOOL),
    )


@proto
@dataclass(slots=True)
class Send(Command):
    TYPE: ClassVar[int] = 6
    producer_id: int = 0
    sequence_id: int = 0
    num_messages: int = 1
    highest_sequence_id: int = 0
    is_chunk: bool = False
    marker: bool = False

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "producer_id", UINT64, required=True),
        Field(2, "sequence_id", UINT64, required=True),
        Field(3, "num_messages", INT32),
        Field(6, "highest_sequence_id", UINT64),
        Field(7, "is_chunk", BOOL),
        Field(8, "marker", BOOL),
    )


@proto
@dataclass(slots=True)
class SendReceipt(Command):
    TYPE: ClassVar[int] = 7
    producer_id: int = 0
    sequence_id: int = 0
    message_id: MessageIdData | None = None
    highest_sequence_id: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "producer_id", UINT64, required=True),
        Field(2, "sequence_id", UINT64, required=True),
        Field(3, "message_id", MESSAGE, message=MessageIdData),
        Field(4, "highest_sequence_id", UINT64),
    )

    @classmethod
    def decode(
        cls, data: bytes | bytearray | memoryview, start: int = 0, end: int = -1
    ) -> SendReceipt:
        """Every entry a producer sends is answered by one: the usual layout (producer
        id, sequence id, message id, highest sequence id) read directly, any other
        through the general decoder."""
        if end < 0:
            end = len(data)
        if end - start >= 6 and data[start] == 0x08:
            producer_id, pos = decode_varint(data, start + 1, end)
            if pos < end and data[pos] == 0x10:
                sequence_id, pos = decode_varint(data, pos + 1, end)
                if pos + 2 <= end and data[pos] == 0x1A and data[pos + 1] < 0x80:
                    stop = pos + 2 + data[pos + 1]
                    if stop <= end:
                        message_id = MessageIdData.decode(data, pos + 2, stop)
                        highest = 0
                        if stop < end and data[stop] == 0x20:
                            highest, stop = decode_varint(data, stop + 1, end)
                        if stop == end:
                            return cls(producer_id, sequence_id, message_id, highest)
        return super(SendReceipt, cls).decode(data, start, end)


@proto
@dataclass(slots=True)
class SendError(Command):
    TYPE: ClassVar[int] = 8
    producer_id: int = 0
    sequence_id: int = 0
    error: int = 0
    message: str = ""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "producer_id", UINT64, required=True),
        Field(2, "sequence_id", UINT64, required=True),
        Field(3, "error", UINT64, required=True),
        Field(4, "message", STRING, required=True),
    )


@proto
@dataclass(slots=True)
class CloseProducer(Command):
    TYPE: ClassVar[int] = 15
    producer_id: int = 0
    request_id: int = 0
    assigned_broker_service_url: str | None = None
    assigned_broker_service_url_tls: str | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "producer_id", UINT64, required=True),
        Field(2, "request_id", UINT64, required=True),
        Field(3, "assigned_broker_service_url", STRING),
        Field(4, "assigned_broker_service_url_tls", STRING),
    )
