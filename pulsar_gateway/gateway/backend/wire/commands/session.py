"""Commands that set up a connection and look topics up, and the generic answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pulsar_gateway.gateway.backend.wire.commands.base import Command
from pulsar_gateway.gateway.backend.wire.protobuf import (
    BOOL,
    BYTES,
    INT32,
    MESSAGE,
    STRING,
    UINT64,
    Field,
    ProtoMessage,
    proto,
)

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
