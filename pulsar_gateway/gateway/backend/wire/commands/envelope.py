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
_U64 = (1 << 64) - 1


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


def encode_send(
    producer_id: int, sequence_id: int, num_messages: int, highest: int, is_chunk: bool
) -> bytes:
    """SEND, written directly: one per entry sent (the same bytes as `encode_command(Send)`)."""
    body = b"\x08" + encode_varint(producer_id) + b"\x10" + encode_varint(sequence_id)
    if num_messages != 1:
        body += b"\x18" + encode_varint(num_messages)
    if highest:
        body += b"\x30" + encode_varint(highest)
    if is_chunk:
        body += b"\x38\x01"
    return b"\x08\x06\x32" + encode_varint(len(body)) + body


def encode_ack(consumer_id: int, ack_type: int, entries: list[tuple[int, int]]) -> bytes:
    """ACK of whole entries (ledger, entry), written directly: the same bytes as
    `encode_command(Ack)` with their MessageIdData, without an object per id."""
    parts = [b"\x08", encode_varint(consumer_id), b"\x10", encode_varint(ack_type)]
    for ledger, entry in entries:
        data = b"\x08" + encode_varint(ledger & _U64) + b"\x10" + encode_varint(entry & _U64)
        parts += (b"\x1a", encode_varint(len(data)), data)
    body = b"".join(parts)
    return b"\x08\x0a\x52" + encode_varint(len(body)) + body


def decode_command(
    data: bytes | bytearray | memoryview, start: int = 0, end: int = -1
) -> Command | UnknownCommand:
    """The command in a `BaseCommand`. A BaseCommand without its type is a DecodeError; a
    known type without its body decodes from empty bytes (defaults), as protobuf would."""
    if end < 0:
        end = len(data)
    if end - start >= 4 and data[start] == 0x08 and data[start + 1] < 0x10:
        # the usual layout (what every broker writes for the commands on the hot path):
        # the type, then its body and nothing else
        kind = data[start + 1]
        length = data[start + 3]
        if data[start + 2] == kind << 3 | LEN and length < 0x80 and start + 4 + length == end:
            cls = COMMANDS.get(kind)
            if cls is not None:
                return cls.decode(data, start + 4, end)
    return _decode_any(data, start, end)


def _decode_any(
    data: bytes | bytearray | memoryview, start: int, end: int
) -> Command | UnknownCommand:
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
