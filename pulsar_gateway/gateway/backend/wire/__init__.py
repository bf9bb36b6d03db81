"""The gateway's own asyncio client of Pulsar's binary protocol (docs/pulsar-protocol.md).

Written from Pulsar's published protocol description and the field numbers of its
PulsarApi.proto. It moves whole entries as bytes: a producer sends one prepared entry
(a single message or a whole batch, `batch.py`) and gets its (ledger, entry) back; a
consumer hands out whole entries and splits a batch only when asked.

Layers, bottom up: `protobuf` (the wire format), `messages` and `commands` (what Pulsar's
protobuf messages hold), `frames` and `batch` (sans-I/O frames and batched entries),
`connection` (one broker, asyncio), `client` (pool and lookups), `producer`, `consumer`.
"""

from pulsar_gateway.gateway.backend.wire.auth import (
    NO_AUTHENTICATION,
    Authentication,
    OAuth2ClientCredentials,
    TlsAuthentication,
    TokenAuthentication,
)
from pulsar_gateway.gateway.backend.wire.batch import (
    BatchBuilder,
    OutgoingEntry,
    SingleMessage,
    batch_entry,
    encode_properties,
    message_fields,
    single_entry,
    split_batch,
)
from pulsar_gateway.gateway.backend.wire.client import Client
from pulsar_gateway.gateway.backend.wire.commands import InitialPosition, SubscriptionType
from pulsar_gateway.gateway.backend.wire.consumer import Consumer
from pulsar_gateway.gateway.backend.wire.entries import ReceivedEntry
from pulsar_gateway.gateway.backend.wire.errors import (
    ConnectionClosed,
    ConsumerClosed,
    DecodeError,
    OperationTimeout,
    ProducerClosed,
    PulsarError,
    ServerError,
)
from pulsar_gateway.gateway.backend.wire.ids import EARLIEST, LATEST, MessageId
from pulsar_gateway.gateway.backend.wire.messages import CompressionType
from pulsar_gateway.gateway.backend.wire.producer import Producer

__all__ = [
    "EARLIEST",
    "LATEST",
    "NO_AUTHENTICATION",
    "Authentication",
    "BatchBuilder",
    "Client",
    "CompressionType",
    "ConnectionClosed",
    "Consumer",
    "ConsumerClosed",
    "DecodeError",
    "InitialPosition",
    "MessageId",
    "OAuth2ClientCredentials",
    "OperationTimeout",
    "OutgoingEntry",
    "Producer",
    "ProducerClosed",
    "PulsarError",
    "ReceivedEntry",
    "ServerError",
    "SingleMessage",
    "SubscriptionType",
    "TlsAuthentication",
    "TokenAuthentication",
    "batch_entry",
    "encode_properties",
    "message_fields",
    "single_entry",
    "split_batch",
]
