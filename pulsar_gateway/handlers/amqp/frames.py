"""AMQP 0-9-1 frame splitting, decoding and encoding (sans-I/O).

`FrameReader` turns a byte stream into typed frames and never raises anything
but `AmqpError`. pamqp does the decoding, but it is lenient (a truncated
shortstr or a table overrunning its length decodes to garbage, and some
values raise errors it does not wrap), while RabbitMQ's decoder matches
binaries exactly. So every method and content-header payload is first walked
against its wire layout (wire_layout.py); only a payload that fits exactly is handed to
pamqp, and anything pamqp still throws becomes a 501 FRAME_ERROR.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from pamqp import base, commands, encode
from pamqp import frame as pamqp_frame
from pamqp.header import ContentHeader

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.wire_layout import check_layout, check_properties, method_layout

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_MIN_SIZE = 4096  # the spec's minimum frame_max, RabbitMQ's before tune-ok
FRAME_HEADER_SIZE = 7
EMPTY_FRAME_SIZE = 8  # header + end octet
HEARTBEAT_FRAME = struct.pack(">BHIB", FRAME_HEARTBEAT, 0, 0, FRAME_END)
BASIC_CLASS_ID = commands.Basic.frame_id
MethodT = TypeVar("MethodT", bound=base.Frame)

# basic properties of the fast path (`fast_properties`) by their octets; a reader keeps
# at most MAX_KNOWN_PROPERTIES
KnownProperties = dict[bytes, commands.Basic.Properties]
MAX_KNOWN_PROPERTIES = 256
_FRAME_HEADER = struct.Struct(">BHI")
_METHOD_ID = struct.Struct(">HH")
_CONTENT_HEADER = struct.Struct(">HHQ")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class HeaderCheck(Enum):
    """Outcome of looking at the first bytes a client sends."""

    INCOMPLETE = "incomplete"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


def check_protocol_header(data: bytes) -> HeaderCheck:
    """Accept only AMQP 0-9-1; refuse as soon as the bytes diverge from it.

    RabbitMQ answers any other header with its own and closes; we do the same
    but do not wait for all 8 bytes of something that is already wrong.
    """
    size = min(len(data), len(PROTOCOL_HEADER))
    if data[:size] != PROTOCOL_HEADER[:size]:
        return HeaderCheck.REJECTED
    if size < len(PROTOCOL_HEADER):
        return HeaderCheck.INCOMPLETE
    return HeaderCheck.ACCEPTED


@dataclass(frozen=True, slots=True)
class MethodFrame:
    """A decoded method; `method` is the pamqp command object."""

    channel: int
    method: base.Frame


@dataclass(frozen=True, slots=True)
class HeaderFrame:
    """A content header; `properties_raw` is kept so deliveries resend it as is."""

    channel: int
    class_id: int
    weight: int
    body_size: int
    properties: commands.Basic.Properties | None
    properties_raw: bytes


@dataclass(frozen=True, slots=True)
class BodyFrame:
    """One slice of a message body (a body may span many frames)."""

    channel: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class HeartbeatFrame:
    """Valid only on channel 0; any other channel is a 505 for the connection."""

    channel: int


Frame = MethodFrame | HeaderFrame | BodyFrame | HeartbeatFrame


class FrameReader:
    """Incremental frame splitter: `feed` bytes, then call `next_frame` until None.

    The size check runs on the 7-byte frame header, before the payload is
    buffered, so a peer cannot make us hold more than `frame_max` bytes per
    frame. After an error that loses frame sync (oversized frame, bad end
    octet) the reader is `broken` and yields nothing more.
    """

    def __init__(self, frame_max: int = FRAME_MIN_SIZE) -> None:
        self.frame_max = frame_max
        self.broken = False
        # a publisher mostly repeats its content header: decoded once (`decode_frame`)
        self._known_properties: KnownProperties = {}
        # and its basic.publish methods by their octets (publish_run.py): read, never changed
        self.known_publishes: dict[bytes, commands.Basic.Publish] = {}
        self._buf = bytearray()
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        if not self.broken:
            self._buf += data

    def unread(self) -> tuple[bytearray, int, KnownProperties]:
        """The buffer, where its unread bytes start, and the known properties: for
        publish_run.py, which reads a publish's three frames at once."""
        return self._buf, self._pos, self._known_properties

    def skip(self, end: int) -> None:
        """Consume the unread bytes up to `end` (a publish_run.py run taken whole)."""
        self._pos = end

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None until more bytes arrive."""
        if self.broken:
            return None
        buf, pos = self._buf, self._pos
        available = len(buf) - pos
        if available < FRAME_HEADER_SIZE:
            self._compact()
            return None
        frame_type, channel, size = _FRAME_HEADER.unpack_from(buf, pos)
        # RabbitMQ lets the payload reach frame_max (not frame_max - 8): many
        # clients forget the 8 framing octets, so it adds that much slack.
        if self.frame_max and size > self.frame_max:
            self._break()
            raise AmqpError(
                ReplyCode.FRAME_ERROR,
                f"type {frame_type}, all octets = <<>>: "
                f"{{frame_too_large,{size},{self.frame_max - EMPTY_FRAME_SIZE}}}",
            )
        total = FRAME_HEADER_SIZE + size + 1
        if available < total:
            self._compact()
            return None
        payload = bytes(buf[pos + FRAME_HEADER_SIZE : pos + FRAME_HEADER_SIZE + size])
        end = buf[pos + total - 1]
        if end != FRAME_END:
            self._break()
            raise AmqpError(
                ReplyCode.FRAME_ERROR,
                f"type {frame_type}, {_octets(payload)}: {{invalid_frame_end_marker,{end}}}",
            )
        self._pos = pos + total
        return decode_frame(frame_type, channel, payload, self._known_properties)

    def _break(self) -> None:
        self.broken = True
        self._buf = bytearray()
        self._pos = 0

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0


def decode_frame(
    frame_type: int, channel: int, payload: bytes, known: KnownProperties | None = None
) -> Frame:
    """Decode one frame payload; raises only `AmqpError` whatever the bytes. `known`: basic
    properties decoded before (a reader's), looked up by their octets."""
    if frame_type == FRAME_METHOD:
        return _decode_method(channel, payload)
    if frame_type == FRAME_HEADER:
        return _decode_header(channel, payload, known)
    if frame_type == FRAME_BODY:
        return BodyFrame(channel, payload)
    if frame_type == FRAME_HEARTBEAT and not payload:
        return HeartbeatFrame(channel)
    raise AmqpError(ReplyCode.FRAME_ERROR, f"type {frame_type}, {_octets(payload)}: unknown_frame")


def method_class(class_id: int, method_id: int) -> type[base.Frame] | None:
    """The pamqp class of a method id pair, None when AMQP 0-9-1 has no such method."""
    return commands.INDEX_MAPPING.get((class_id << 16) | method_id)


def _decode_method(channel: int, payload: bytes) -> MethodFrame:
    if payload[:4] == _PUBLISH_ID:
        publish = fast_publish(payload)
        if publish is not None:
            return MethodFrame(channel, publish)
    if len(payload) < 4:
        raise AmqpError(
            ReplyCode.FRAME_ERROR, f"type {FRAME_METHOD}, {_octets(payload)}: unknown_frame"
        )
    class_id, method_id = _METHOD_ID.unpack_from(payload)
    cls = method_class(class_id, method_id)
    if cls is None:
        # RabbitMQ's reader crashes here and drops the socket without a word;
        # we say what is missing instead.
        raise AmqpError(
            ReplyCode.NOT_IMPLEMENTED,
            f"unknown method {{{class_id},{method_id}}}",
            class_id,
            method_id,
        )
    fields = payload[4:]
    try:
        check_layout(fields, 0, len(fields), method_layout(cls), 0)
        _, _, method = pamqp_frame.unmarshal(_frame_bytes(FRAME_METHOD, channel, payload))
    except Exception as exc:  # pamqp may raise anything on bad input
        raise AmqpError(
            ReplyCode.FRAME_ERROR, f"cannot decode {_erl_binary(fields[:64])}", class_id, method_id
        ) from exc
    assert isinstance(method, base.Frame)
    return MethodFrame(channel, method)


def _decode_header(channel: int, payload: bytes, known: KnownProperties | None) -> HeaderFrame:
    if len(payload) < _CONTENT_HEADER.size + 2:
        raise AmqpError(
            ReplyCode.FRAME_ERROR, f"type {FRAME_HEADER}, {_octets(payload)}: unknown_frame"
        )
    class_id, weight, body_size = _CONTENT_HEADER.unpack_from(payload)
    raw = payload[_CONTENT_HEADER.size :]
    if class_id != BASIC_CLASS_ID:
        # Only basic has content; the assembler reports the mismatch as 505.
        return HeaderFrame(channel, class_id, weight, body_size, None, raw)
    properties = known.get(raw) if known is not None else None
    if properties is None:
        properties = fast_properties(raw)
        if properties is not None and known is not None:
            if len(known) >= MAX_KNOWN_PROPERTIES:
                known.clear()
            known[raw] = properties  # shared by the frames: read, never changed
    if properties is not None:
        return HeaderFrame(channel, class_id, weight, body_size, properties, raw)
    try:
        check_properties(raw)
        _, _, header = pamqp_frame.unmarshal(_frame_bytes(FRAME_HEADER, channel, payload))
    except Exception as exc:  # pamqp may raise anything on bad input
        raise AmqpError(
            ReplyCode.FRAME_ERROR,
            f"cannot decode content properties {_erl_binary(raw[:64])}",
            class_id,
        ) from exc
    assert isinstance(header, ContentHeader)
    return HeaderFrame(channel, class_id, weight, body_size, header.properties, raw)


# --- the fast path of the message frames ----------------------------------------------

_PUBLISH = commands.Basic.Publish
_DELIVER = commands.Basic.Deliver
_PROPERTIES = commands.Basic.Properties
_PUBLISH_ID = _U32.pack(_PUBLISH.index)
_DELIVER_ID = _U32.pack(_DELIVER.index)
_TICKET = _U16  # pamqp decodes "short" unsigned
# Properties the fast path reads: (flag bit, name, is a short string (else an octet)),
# in wire order. headers (a table) and timestamp (a datetime) go through pamqp.
_SIMPLE_PROPERTIES = tuple(
    (_PROPERTIES.flags[name], name, _PROPERTIES.amqp_type(name) == "shortstr")
    for name in _PROPERTIES.__slots__
    if _PROPERTIES.amqp_type(name) in ("shortstr", "octet")
)
_SIMPLE_FLAGS = sum(bit for bit, _, _ in _SIMPLE_PROPERTIES)
_NO_PROPERTIES = dict(_PROPERTIES())  # pamqp's defaults (cluster_id is "", not None)


def fast_publish(payload: bytes) -> commands.Basic.Publish | None:
    """basic.publish as pamqp decodes it, or None to take the checked path (a layout
    that does not fit exactly, or names that are not UTF-8: the slow path words it)."""
    end = len(payload)
    if end < 9:
        return None
    pos = 7 + payload[6]
    if pos >= end:
        return None
    exchange = payload[7:pos]
    start = pos + 1
    pos = start + payload[pos]
    if pos + 1 != end:
        return None
    try:
        exchange_name = exchange.decode()
        routing_key = payload[start:pos].decode()
    except UnicodeDecodeError:
        return None
    bits = payload[pos]
    method = object.__new__(_PUBLISH)
    method.ticket = _TICKET.unpack_from(payload, 4)[0]
    method.exchange = exchange_name
    method.routing_key = routing_key
    method.mandatory = bool(bits & 1)
    method.immediate = bool(bits & 2)
    return method


def fast_properties(raw: bytes) -> commands.Basic.Properties | None:
    """Basic properties made of short strings and octets only (what most publishers
    send: delivery mode, content type, ids), as pamqp decodes them; None otherwise."""
    if len(raw) < 2:
        return None
    flags = _U16.unpack_from(raw)[0]
    if flags & ~_SIMPLE_FLAGS & 0xFFFF:
        return None  # a table, a timestamp or the continuation bit: the checked path
    values = dict(_NO_PROPERTIES)
    pos, end = 2, len(raw)
    try:
        for bit, name, is_string in _SIMPLE_PROPERTIES:
            if not flags & bit:
                continue
            if pos >= end:
                return None
            if is_string:
                start = pos + 1
                pos = start + raw[pos]
                if pos > end:
                    return None
                values[name] = raw[start:pos].decode()
            else:
                values[name] = raw[pos]
                pos += 1
    except UnicodeDecodeError:
        return None
    if pos != end:
        return None
    properties = object.__new__(_PROPERTIES)
    for name, value in values.items():
        setattr(properties, name, value)
    return properties


# per (channel, consumer tag, exchange, routing key): the octets of a basic.deliver method
# frame before its delivery tag, and its exchange and routing key after the redelivered bit
DeliverHeads = dict[tuple[int, str, str, str], tuple[bytes, bytes]]
MAX_DELIVER_HEADS = 1024  # kept by a connection; cleared when full
_TAG_AND_BIT = struct.Struct(">q?")
# the method frame's end octet, then the content header frame up to its properties
_HEADER_START = struct.Struct(">BBHIHHQ")
_BODY_START = struct.Struct(">BBHI")  # the header frame's end octet, then the body frame's head


def encode_deliver(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    body: bytes,
    properties_raw: bytes,
    frame_max: int,
    heads: DeliverHeads | None = None,
) -> bytes:
    """basic.deliver with its content: the octets `encode_content` gives for the same
    method, without building the pamqp object and walking its fields. Only the delivery
    tag, the redelivered bit and the sizes change from one delivery to the next of a
    consumer: the rest of the method frame is encoded once and kept in `heads` (the
    connection's), and a body that fits one frame goes out in one join."""
    key = (channel, consumer_tag, exchange, routing_key)
    known = heads.get(key) if heads is not None else None
    if known is None:
        tag = consumer_tag.encode()
        exchange_octets = exchange.encode()
        routing = routing_key.encode()
        size = 4 + 1 + len(tag) + 9 + 1 + len(exchange_octets) + 1 + len(routing)
        known = (
            b"".join(
                (
                    _FRAME_HEADER.pack(FRAME_METHOD, channel, size),
                    _DELIVER_ID,
                    bytes((len(tag),)),
                    tag,
                )
            ),
            b"".join(
                (bytes((len(exchange_octets),)), exchange_octets, bytes((len(routing),)), routing)
            ),
        )
        if heads is not None:
            if len(heads) >= MAX_DELIVER_HEADS:
                heads.clear()
            heads[key] = known
    before, after = known
    length = len(body)
    if not length or (frame_max and length > frame_max - EMPTY_FRAME_SIZE):
        # no body frame, or several: the general path
        method = b"".join((before, _TAG_AND_BIT.pack(delivery_tag, redelivered), after, b"\xce"))
        return _content_frames(channel, method, body, properties_raw, frame_max)
    return b"".join(
        (
            before,
            _TAG_AND_BIT.pack(delivery_tag, redelivered),
            after,
            _HEADER_START.pack(
                FRAME_END,
                FRAME_HEADER,
                channel,
                _CONTENT_HEADER.size + len(properties_raw),
                BASIC_CLASS_ID,
                0,
                length,
            ),
            properties_raw,
            _BODY_START.pack(FRAME_END, FRAME_BODY, channel, length),
            body,
            b"\xce",
        )
    )


def encode_delivers(
    channel: int,
    consumer_tag: str,
    first_tag: int,
    messages: Sequence[AmqpMessage],
    redelivered: Sequence[bool],
    frame_max: int,
    heads: DeliverHeads | None = None,
) -> bytes:
    """A run of one consumer's deliveries, delivery tags counting up from `first_tag`:
    `encode_deliver`'s octets for each, joined once."""
    parts = []
    tag = first_tag
    for message, again in zip(messages, redelivered, strict=True):
        parts.append(
            encode_deliver(
                channel,
                consumer_tag,
                tag,
                again,
                message.exchange,
                message.routing_key,
                message.body,
                message.properties_raw,
                frame_max,
                heads,
            )
        )
        tag += 1
    return b"".join(parts)


# --- encoding ------------------------------------------------------------------------


def _frame_bytes(frame_type: int, channel: int, payload: bytes) -> bytes:
    return b"".join((_FRAME_HEADER.pack(frame_type, channel, len(payload)), payload, b"\xce"))


def encode_method(channel: int, method: base.Frame) -> bytes:
    """Marshal a method frame.

    pamqp's own `marshal` validates names against the spec's narrow regex,
    but RabbitMQ (and so every client) allows any UTF-8 queue or exchange
    name, so the fields are encoded here without that check.
    """
    return _frame_bytes(FRAME_METHOD, channel, _U32.pack(method.index) + _marshal_fields(method))


def _marshal_fields(method: base.Frame) -> bytes:
    output: list[bytes] = []
    byte = offset = 0
    in_bits = False
    for attribute in method.__slots__:
        kind = method.amqp_type(attribute)
        value = getattr(method, attribute, 0)
        if kind == "bit":
            if not in_bits or offset == 8:
                if in_bits:
                    output.append(bytes((byte,)))
                byte = offset = 0
                in_bits = True
            byte |= int(bool(value)) << offset
            offset += 1
            continue
        if in_bits:
            output.append(bytes((byte,)))
            in_bits = False
        output.append(encode.by_type(value, kind))
    if in_bits:
        output.append(bytes((byte,)))
    return b"".join(output)


def make_method(cls: type[MethodT], **fields: object) -> MethodT:
    """Build a method without pamqp's constructor-time name validation.

    pamqp refuses names outside the spec's narrow regex when a method is
    constructed, but RabbitMQ accepts any UTF-8 name, so replies such as
    queue.declare-ok or basic.deliver must be able to carry one.
    """
    method = cls()
    for name, value in fields.items():
        if name not in cls.__slots__:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        setattr(method, name, value)
    return method


def encode_properties(properties: commands.Basic.Properties | None) -> bytes:
    """Flags and values of a content header, as pamqp encodes them."""
    return (properties or commands.Basic.Properties()).marshal()


def encode_content(
    channel: int,
    method: base.Frame,
    body: bytes,
    properties_raw: bytes,
    frame_max: int,
) -> bytes:
    """Method, content header and body frames split to fit `frame_max`."""
    return _content_frames(channel, encode_method(channel, method), body, properties_raw, frame_max)


def _content_frames(
    channel: int, method_frame: bytes, body: bytes, properties_raw: bytes, frame_max: int
) -> bytes:
    if frame_max == 0 or len(body) <= frame_max - EMPTY_FRAME_SIZE:
        # one body frame (or none): the common case, in one join
        header = _CONTENT_HEADER.pack(BASIC_CLASS_ID, 0, len(body)) + properties_raw
        parts = [
            method_frame,
            _FRAME_HEADER.pack(FRAME_HEADER, channel, len(header)),
            header,
            b"\xce",
        ]
        if body:
            parts += (_FRAME_HEADER.pack(FRAME_BODY, channel, len(body)), body, b"\xce")
        return b"".join(parts)
    parts = [
        method_frame,
        _frame_bytes(
            FRAME_HEADER,
            channel,
            _CONTENT_HEADER.pack(BASIC_CLASS_ID, 0, len(body)) + properties_raw,
        ),
    ]
    chunk = frame_max - EMPTY_FRAME_SIZE if frame_max else max(len(body), 1)
    view = memoryview(body)
    for start in range(0, len(body), chunk):
        parts.append(_frame_bytes(FRAME_BODY, channel, bytes(view[start : start + chunk])))
    return b"".join(parts)


# --- RabbitMQ-style rendering of octets in error texts --------------------------------


def _octets(payload: bytes) -> str:
    if len(payload) <= 16:
        return f"all octets = {_erl_binary(payload)}"
    return f"first 16 octets = {_erl_binary(payload[:16])}"


def _erl_binary(data: bytes) -> str:
    """Erlang's ~p of a binary: <<"text">> when printable, else <<1,2,3>>."""
    if data and all(32 <= octet < 127 for octet in data):
        text = data.decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return "<<" + ",".join(str(octet) for octet in data) + ">>"
