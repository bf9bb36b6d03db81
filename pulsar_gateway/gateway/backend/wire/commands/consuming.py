"""Commands of a consumer: subscribe, flow, messages, acks, redelivery, seek, close."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from pulsar_gateway.gateway.backend.wire.commands.base import (
    AckType,
    Command,
    InitialPosition,
    SubscriptionType,
)
from pulsar_gateway.gateway.backend.wire.messages import KeyValue, MessageIdData
from pulsar_gateway.gateway.backend.wire.protobuf import (
    BOOL,
    DOUBLE,
    INT32,
    INT64,
    MESSAGE,
    STRING,
    UINT64,
    Field,
    decode_varint,
    proto,
)

# ---- consuming ------------------------------------------------------------------------------


@proto
@dataclass(slots=True)
class Subscribe(Command):
    TYPE: ClassVar[int] = 4
    topic: str = ""
    subscription: str = ""
    sub_type: int = SubscriptionType.EXCLUSIVE
    consumer_id: int = 0
    request_id: int = 0
    consumer_name: str | None = None
    priority_level: int | None = None
    durable: bool = True
    start_message_id: MessageIdData | None = None
    metadata: list[KeyValue] = field(default_factory=list)
    read_compacted: bool = False
    initial_position: int = InitialPosition.LATEST
    force_topic_creation: bool = True
    start_message_rollback_duration_sec: int = 0
    consumer_epoch: int | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "topic", STRING, required=True),
        Field(2, "subscription", STRING, required=True),
        Field(3, "sub_type", UINT64, required=True),
        Field(4, "consumer_id", UINT64, required=True),
        Field(5, "request_id", UINT64, required=True),
        Field(6, "consumer_name", STRING),
        Field(7, "priority_level", INT32),
        Field(8, "durable", BOOL),
        Field(9, "start_message_id", MESSAGE, message=MessageIdData),
        Field(10, "metadata", MESSAGE, repeated=True, message=KeyValue),
        Field(11, "read_compacted", BOOL),
        Field(13, "initial_position", UINT64),
        Field(15, "force_topic_creation", BOOL),
        Field(16, "start_message_rollback_duration_sec", UINT64),
        Field(19, "consumer_epoch", UINT64),
    )


@proto
@dataclass(slots=True)
class Flow(Command):
    TYPE: ClassVar[int] = 11
    consumer_id: int = 0
    message_permits: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(2, "message_permits", UINT64, required=True),
    )


@proto
@dataclass(slots=True)
class Message(Command):
    TYPE: ClassVar[int] = 9
    consumer_id: int = 0
    message_id: MessageIdData | None = None
    redelivery_count: int = 0
    ack_set: list[int] = field(default_factory=list)
    consumer_epoch: int | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(2, "message_id", MESSAGE, required=True, message=MessageIdData),
        Field(3, "redelivery_count", UINT64),
        Field(4, "ack_set", INT64, repeated=True),
        Field(5, "consumer_epoch", UINT64),
    )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, start: int = 0, end: int = -1) -> Message:
        """Every entry a consumer receives: the usual layout (consumer id, message id,
        redelivery count) read directly, any other through the general decoder."""
        if end < 0:
            end = len(data)
        if end - start >= 4 and data[start] == 0x08:
            consumer_id, pos = decode_varint(data, start + 1, end)
            if pos + 2 <= end and data[pos] == 0x12 and data[pos + 1] < 0x80:
                stop = pos + 2 + data[pos + 1]
                if stop <= end:
                    message_id = MessageIdData.decode(data, pos + 2, stop)
                    redelivery_count = 0
                    if stop < end and data[stop] == 0x18:
                        redelivery_count, stop = decode_varint(data, stop + 1, end)
                    if stop == end:
                        return cls(consumer_id, message_id, redelivery_count)
        return super(Message, cls).decode(data, start, end)


@proto
@dataclass(slots=True)
class Ack(Command):
    TYPE: ClassVar[int] = 10
    consumer_id: int = 0
    ack_type: int = AckType.INDIVIDUAL
    message_ids: list[MessageIdData] = field(default_factory=list)
    validation_error: int | None = None
    request_id: int | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(2, "ack_type", UINT64, required=True),
        Field(3, "message_ids", MESSAGE, repeated=True, message=MessageIdData),
        Field(4, "validation_error", UINT64),
        Field(8, "request_id", UINT64),
    )


@proto
@dataclass(slots=True)
class AckResponse(Command):
    TYPE: ClassVar[int] = 38
    consumer_id: int = 0
    error: int | None = None
    message: str | None = None
    request_id: int | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(4, "error", UINT64),
        Field(5, "message", STRING),
        Field(6, "request_id", UINT64),
    )


@proto
@dataclass(slots=True)
class RedeliverUnacknowledged(Command):
    TYPE: ClassVar[int] = 20
    consumer_id: int = 0
    message_ids: list[MessageIdData] = field(default_factory=list)
    consumer_epoch: int | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(2, "message_ids", MESSAGE, repeated=True, message=MessageIdData),
        Field(3, "consumer_epoch", UINT64),
    )


@proto
@dataclass(slots=True)
class Unsubscribe(Command):
    TYPE: ClassVar[int] = 12
    consumer_id: int = 0
    request_id: int = 0
    force: bool = False

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(2, "request_id", UINT64, required=True),
        Field(3, "force", BOOL),
    )


@proto
@dataclass(slots=True)
class Seek(Command):
    TYPE: ClassVar[int] = 28
    consumer_id: int = 0
    request_id: int = 0
    message_id: MessageIdData | None = None
    message_publish_time: int | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(2, "request_id", UINT64, required=True),
        Field(3, "message_id", MESSAGE, message=MessageIdData),
        Field(4, "message_publish_time", UINT64),
    )


@proto
@dataclass(slots=True)
class ReachedEndOfTopic(Command):
    TYPE: ClassVar[int] = 27
    consumer_id: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (Field(1, "consumer_id", UINT64, required=True),)


@proto
@dataclass(slots=True)
class CloseConsumer(Command):
    TYPE: ClassVar[int] = 16
    consumer_id: int = 0
    request_id: int = 0
    assigned_broker_service_url: str | None = None
    assigned_broker_service_url_tls: str | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(2, "request_id", UINT64, required=True),
        Field(3, "assigned_broker_service_url", STRING),
        Field(4, "assigned_broker_service_url_tls", STRING),
    )


@proto
@dataclass(slots=True)
class ActiveConsumerChange(Command):
    TYPE: ClassVar[int] = 31
    consumer_id: int = 0
    is_active: bool = False

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(2, "is_active", BOOL),
    )


@proto
@dataclass(slots=True)
class GetLastMessageId(Command):
    TYPE: ClassVar[int] = 29
    consumer_id: int = 0
    request_id: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "consumer_id", UINT64, required=True),
        Field(2, "request_id", UINT64, required=True),
    )


@proto
@dataclass(slots=True)
class GetLastMessageIdResponse(Command):
    TYPE: ClassVar[int] = 30
    last_message_id: MessageIdData | None = None
    request_id: int = 0
    consumer_mark_delete_position: MessageIdData | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "last_message_id", MESSAGE, required=True, message=MessageIdData),
        Field(2, "request_id", UINT64, required=True),
        Field(3, "consumer_mark_delete_position", MESSAGE, message=MessageIdData),
    )


@proto
@dataclass(slots=True)
class ConsumerStats(Command):
    TYPE: ClassVar[int] = 25
    request_id: int = 0
    consumer_id: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "request_id", UINT64, required=True),
        Field(4, "consumer_id", UINT64, required=True),
    )


@proto
@dataclass(slots=True)
class ConsumerStatsResponse(Command):
    TYPE: ClassVar[int] = 26
    request_id: int = 0
    error_code: int | None = None
    error_message: str | None = None
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    msg_rate_redeliver: float = 0.0
    consumer_name: str | None = None
    available_permits: int = 0
    unacked_messages: int = 0
    blocked_consumer_on_unacked_msgs: bool = False
    address: str | None = None
    connected_since: str | None = None
    type: str | None = None
    msg_rate_expired: float = 0.0
    msg_backlog: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "request_id", UINT64, required=True),
        Field(2, "error_code", UINT64),
        Field(3, "error_message", STRING),
        Field(4, "msg_rate_out", DOUBLE),
        Field(5, "msg_throughput_out", DOUBLE),
        Field(6, "msg_rate_redeliver", DOUBLE),
        Field(7, "consumer_name", STRING),
        Field(8, "available_permits", UINT64),
        Field(9, "unacked_messages", UINT64),
        Field(10, "blocked_consumer_on_unacked_msgs", BOOL),
        Field(11, "address", STRING),
        Field(12, "connected_since", STRING),
        Field(13, "type", STRING),
        Field(14, "msg_rate_expired", DOUBLE),
        Field(15, "msg_backlog", UINT64),
    )
