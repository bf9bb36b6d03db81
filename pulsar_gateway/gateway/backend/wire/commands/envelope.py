"""The commands of Pulsar's protocol the client sends or understands (PulsarApi.proto).

Every frame carries one `BaseCommand`: a `type` (field 1) and the command itself in the
field whose number equals that type (CONNECT is type 2 in field 2, SEND type 6 in field 6,
and so on). `encode_command` writes that envelope, `decode_command` reads it and returns
the command object, or `UnknownCommand` for a type this client does not know (a newer
broker's command is logged and ignored, never fatal).

docs/pulsar-protocol.md lists what the client does with each answer.
"""

from __future__ import annotations

from pulsar_gateway.gateway.backend.wire.commands.base import Command, UnknownCommand
from pulsar_gateway.gateway.backend.wire.commands.consuming import (
    Ack,
    AckResponse,
    ActiveConsumerChange,
    CloseConsumer,
    ConsumerStats,
    ConsumerStatsResponse,
    Flow,
    GetLastMessageId,
    GetLastMessageIdResponse,
    Message,
    ReachedEndOfTopic,
    RedeliverUnacknowledged,
    Seek,
    Subscribe,
    Unsubscribe,
)
from pulsar_gateway.gateway.backend.wire.commands.producing import (
    CloseProducer,
    Producer,
    ProducerSuccess,
    Send,
    SendError,
    SendReceipt,
)
from pulsar_gateway.gateway.backend.wire.commands.session import (
    AuthChallenge,
    AuthResponse,
    Connect,
    Connected,
    Error,
    Lookup,
    LookupResponse,
    PartitionedMetadata,
    PartitionedMetadataResponse,
    Ping,
    Pong,
    Success,
)
from pulsar_gateway.gateway.backend.wire.errors import DecodeError
from pulsar_gateway.gateway.backend.wire.protobuf import (
    LEN,
    VARINT,
    decode_varint,
    encode_varint,
    skip_field,
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
