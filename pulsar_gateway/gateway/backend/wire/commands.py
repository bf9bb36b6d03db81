"""The commands of Pulsar's protocol the client sends or understands (PulsarApi.proto).

Every frame carries one `BaseCommand`: a `type` (field 1) and the command itself in the
field whose number equals that type (CONNECT is type 2 in field 2, SEND type 6 in field 6,
and so on). `encode_command` writes that envelope, `decode_command` reads it and returns
the command object, or `UnknownCommand` for a type this client does not know (a newer
broker's command is logged and ignored, never fatal).

docs/pulsar-protocol.md lists what the client does with each answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

from pulsar_gateway.gateway.backend.wire.errors import DecodeError
from pulsar_gateway.gateway.backend.wire.messages import KeyValue, MessageIdData
from pulsar_gateway.gateway.backend.wire.protobuf import (
    BOOL,
    BYTES,
    DOUBLE,
    INT32,
    INT64,
    LEN,
    MESSAGE,
    STRING,
    UINT64,
    VARINT,
    Field,
    ProtoMessage,
    decode_varint,
    encode_varint,
    proto,
    skip_field,
)


class SubscriptionType(IntEnum):
    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


class InitialPosition(IntEnum):
    LATEST = 0
    EARLIEST = 1


class AckType(IntEnum):
    INDIVIDUAL = 0
    CUMULATIVE = 1


class LookupType(IntEnum):
    REDIRECT = 0
    CONNECT = 1
    FAILED = 2


class Command(ProtoMessage):
    """A command: `TYPE` is its BaseCommand type and field number."""

    __slots__ = ()
    TYPE: ClassVar[int] = 0


@dataclass(slots=True)
class UnknownCommand:
    """A command type this client does not know; skipped by the connection."""

    type: int


# ---- connection set-up ----------------------------------------------------------------------


@proto
@dataclass(slots=True)
class FeatureFlags(ProtoMessage):
    supports_auth_refresh: bool = False
    supports_broker_entry_metadata: bool = False
    supports_partial_producer: bool = False
    supports_topic_watchers: bool = False

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "supports_auth_refresh", BOOL),
        Field(2, "supports_broker_entry_metadata", BOOL),
        Field(3, "supports_partial_producer", BOOL),
        Field(4, "supports_topic_watchers", BOOL),
    )


@proto
@dataclass(slots=True)
class Connect(Command):
    TYPE: ClassVar[int] = 2
    client_version: str = ""
    auth_method_name: str | None = None
    auth_data: bytes | None = None
    protocol_version: int = 0
    proxy_to_broker_url: str | None = None
    feature_flags: FeatureFlags | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "client_version", STRING, required=True),
        Field(5, "auth_method_name", STRING),
        Field(3, "auth_data", BYTES),
        Field(4, "protocol_version", INT32),
        Field(6, "proxy_to_broker_url", STRING),
        Field(10, "feature_flags", MESSAGE, message=FeatureFlags),
    )


@proto
@dataclass(slots=True)
class Connected(Command):
    TYPE: ClassVar[int] = 3
    server_version: str = ""
    protocol_version: int = 0
    max_message_size: int | None = None
    feature_flags: FeatureFlags | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "server_version", STRING, required=True),
        Field(2, "protocol_version", INT32),
        Field(3, "max_message_size", INT32),
        Field(4, "feature_flags", MESSAGE, message=FeatureFlags),
    )


@proto
@dataclass(slots=True)
class AuthData(ProtoMessage):
    auth_method_name: str | None = None
    auth_data: bytes | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "auth_method_name", STRING),
        Field(2, "auth_data", BYTES),
    )


@proto
@dataclass(slots=True)
class AuthChallenge(Command):
    TYPE: ClassVar[int] = 36
    server_version: str | None = None
    challenge: AuthData | None = None
    protocol_version: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "server_version", STRING),
        Field(2, "challenge", MESSAGE, message=AuthData),
        Field(3, "protocol_version", INT32),
    )


@proto
@dataclass(slots=True)
class AuthResponse(Command):
    TYPE: ClassVar[int] = 37
    client_version: str | None = None
    response: AuthData | None = None
    protocol_version: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "client_version", STRING),
        Field(2, "response", MESSAGE, message=AuthData),
        Field(3, "protocol_version", INT32),
    )


@proto
@dataclass(slots=True)
class Ping(Command):
    TYPE: ClassVar[int] = 18
    FIELDS: ClassVar[tuple[Field, ...]] = ()


@proto
@dataclass(slots=True)
class Pong(Command):
    TYPE: ClassVar[int] = 19
    FIELDS: ClassVar[tuple[Field, ...]] = ()


# ---- lookups --------------------------------------------------------------------------------


@proto
@dataclass(slots=True)
class PartitionedMetadata(Command):
    TYPE: ClassVar[int] = 21
    topic: str = ""
    request_id: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "topic", STRING, required=True),
        Field(2, "request_id", UINT64, required=True),
    )


@proto
@dataclass(slots=True)
class PartitionedMetadataResponse(Command):
    TYPE: ClassVar[int] = 22
    partitions: int | None = None
    request_id: int = 0
    response: int | None = None  # 0 success, 1 failed
    error: int | None = None
    message: str | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "partitions", UINT64),
        Field(2, "request_id", UINT64, required=True),
        Field(3, "response", UINT64),
        Field(4, "error", UINT64),
        Field(5, "message", STRING),
    )


@proto
@dataclass(slots=True)
class Lookup(Command):
    TYPE: ClassVar[int] = 23
    topic: str = ""
    request_id: int = 0
    authoritative: bool = False
    advertised_listener_name: str | None = None

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "topic", STRING, required=True),
        Field(2, "request_id", UINT64, required=True),
        Field(3, "authoritative", BOOL),
        Field(7, "advertised_listener_name", STRING),
    )


@proto
@dataclass(slots=True)
class LookupResponse(Command):
    TYPE: ClassVar[int] = 24
    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None
    response: int | None = None
    request_id: int = 0
    authoritative: bool = False
    error: int | None = None
    message: str | None = None
    proxy_through_service_url: bool = False

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "broker_service_url", STRING),
        Field(2, "broker_service_url_tls", STRING),
        Field(3, "response", UINT64),
        Field(4, "request_id", UINT64, required=True),
        Field(5, "authoritative", BOOL),
        Field(6, "error", UINT64),
        Field(7, "message", STRING),
        Field(8, "proxy_through_service_url", BOOL),
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


# ---- answers --------------------------------------------------------------------------------


@proto
@dataclass(slots=True)
class Success(Command):
    TYPE: ClassVar[int] = 13
    request_id: int = 0

    FIELDS: ClassVar[tuple[Field, ...]] = (Field(1, "request_id", UINT64, required=True),)


@proto
@dataclass(slots=True)
class Error(Command):
    TYPE: ClassVar[int] = 14
    request_id: int = 0
    error: int = 0
    message: str = ""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(1, "request_id", UINT64, required=True),
        Field(2, "error", UINT64, required=True),
        Field(3, "message", STRING, required=True),
    )


COMMANDS: dict[int, type[Command]] = {
    cls.TYPE: cls
    for cls in (
        Connect,
        Connected,
        AuthChallenge,
        AuthResponse,
        Ping,
        Pong,
        PartitionedMetadata,
        PartitionedMetadataResponse,
        Lookup,
        LookupResponse,
        Producer,
        ProducerSuccess,
        Send,
        SendReceipt,
        SendError,
        CloseProducer,
        Subscribe,
        Flow,
        Message,
        Ack,
        AckResponse,
        RedeliverUnacknowledged,
        Unsubscribe,
        Seek,
        ReachedEndOfTopic,
        CloseConsumer,
        ActiveConsumerChange,
        GetLastMessageId,
        GetLastMessageIdResponse,
        ConsumerStats,
        ConsumerStatsResponse,
        Success,
        Error,
    )
}
_TYPE_KEY = b"\x08"  # field 1, varint


def encode_command(command: Command) -> bytes:
    """A `BaseCommand` holding `command`."""
    body = command.encode()
    kind = command.TYPE
    return b"".join(
        (
            _TYPE_KEY,
            encode_varint(kind),
            encode_varint(kind << 3 | LEN),
            encode_varint(len(body)),
            body,
        )
    )


def decode_command(
    data: bytes | bytearray | memoryview, start: int = 0, end: int = -1
) -> Command | UnknownCommand:
    """The command in a `BaseCommand`. A BaseCommand without its type is a DecodeError; a
    known type without its body decodes from empty bytes (defaults), as protobuf would."""
    if end < 0:
        end = len(data)
    kind: int | None = None
    bodies: dict[int, tuple[int, int]] = {}
    pos = start
    while pos < end:
        key, pos = decode_varint(data, pos, end)
        number, wire_type = key >> 3, key & 7
        if number == 1 and wire_type == VARINT:
            kind, pos = decode_varint(data, pos, end)
        elif wire_type == LEN:
            length, pos = decode_varint(data, pos, end)
            if pos + length > end:
                raise DecodeError("command body runs past the end of the command")
            bodies[number] = (pos, pos + length)
            pos += length
        else:
            pos = skip_field(data, wire_type, pos, end)
    if kind is None:
        raise DecodeError("command without a type")
    cls = COMMANDS.get(kind)
    if cls is None:
        return UnknownCommand(kind)
    body = bodies.get(kind)
    if body is None:
        return cls()
    return cls.decode(data, body[0], body[1])


__all__ = [
    "AckType",
    "Command",
    "InitialPosition",
    "LookupType",
    "SubscriptionType",
    "UnknownCommand",
    "decode_command",
    "encode_command",
]
