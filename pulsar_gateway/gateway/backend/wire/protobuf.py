"""The few pieces of protobuf's wire format Pulsar's commands need, and nothing else.

Pulsar frames carry protobuf (proto2) messages: `BaseCommand`, `MessageMetadata`,
`SingleMessageMetadata`... (docs/pulsar-protocol.md). A message is a run of fields, each a
key varint (field number << 3 | wire type) and a value: a varint (integers, bools, enums),
8 little-endian bytes (doubles), or a varint length and that many bytes (strings, bytes,
nested messages, packed repeated varints). That is all this module knows.

Each message we use is a slotted dataclass with a `FIELDS` table naming its fields'
numbers and kinds (`messages.py`); `encode` and `decode` walk that table. Unknown fields are
skipped, as protobuf requires, so a newer broker's additions never break the client; any
malformed byte raises `DecodeError` and nothing else.

Encoding writes a field when it is required, or when its value differs from its default
(None for fields whose presence matters, such as `CommandConnected.max_message_size`).
The hot paths (batched entries, SEND, MESSAGE) do not come through here: `batch.py` and
`frames.py` write and read those bytes directly.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, ClassVar, NamedTuple, TypeVar

from pulsar_gateway.gateway.backend.wire.errors import DecodeError

# wire types
VARINT = 0
FIXED64 = 1
LEN = 2
FIXED32 = 5

# field kinds
UINT64 = 0  # uint64, and enums
INT32 = 1  # negative values take 10 bytes on the wire, as protobuf sign-extends them
INT64 = 2
BOOL = 3
STRING = 4
BYTES = 5
MESSAGE = 6
DOUBLE = 7

_WIRE_TYPE = {
    UINT64: VARINT,
    INT32: VARINT,
    INT64: VARINT,
    BOOL: VARINT,
    STRING: LEN,
    BYTES: LEN,
    MESSAGE: LEN,
    DOUBLE: FIXED64,
}
_MASK64 = (1 << 64) - 1
_DOUBLE = struct.Struct("<d")

# One-byte varints, prebuilt: most lengths and flags in a command are below 128.
SMALL_VARINTS = tuple(bytes((i,)) for i in range(128))


def encode_varint(value: int) -> bytes:
    """A varint; a negative value is written as its 64-bit two's complement (10 bytes)."""
    if 0 <= value < 0x80:
        return SMALL_VARINTS[value]
    if value < 0:
        value &= _MASK64
    if 1 << 35 <= value < 1 << 42:  # millisecond times, in every message: unrolled
        return bytes(
            (
                value & 0x7F | 0x80,
                value >> 7 & 0x7F | 0x80,
                value >> 14 & 0x7F | 0x80,
                value >> 21 & 0x7F | 0x80,
                value >> 28 & 0x7F | 0x80,
                value >> 35,
            )
        )
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at `pos` (not past `end`) and the position after it."""
    if pos >= end:
        raise DecodeError("truncated varint")
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _MASK64, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint longer than 10 bytes")


def to_signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def to_signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def tag(number: int, wire_type: int) -> bytes:
    """A field's key, as written before its value."""
    return encode_varint(number << 3 | wire_type)


def skip_field(data: bytes | bytearray | memoryview, wire_type: int, pos: int, end: int) -> int:
    """The position after an (unknown) field's value."""
    if wire_type == VARINT:
        return decode_varint(data, pos, end)[1]
    if wire_type == LEN:
        length, pos = decode_varint(data, pos, end)
        pos += length
    elif wire_type == FIXED64:
        pos += 8
    elif wire_type == FIXED32:
        pos += 4
    else:  # groups (3, 4) are obsolete and never used by Pulsar; 6 and 7 do not exist
        raise DecodeError(f"unsupported wire type {wire_type}")
    if pos > end:
        raise DecodeError("field runs past the end of its message")
    return pos


class Field(NamedTuple):
    number: int
    name: str
    kind: int
    repeated: bool = False
    required: bool = False
    message: type[Any] | None = None  # the class of a MESSAGE field


M = TypeVar("M", bound="ProtoMessage")


class ProtoMessage:
    """Base of the protobuf messages in `messages.py` (each a slotted dataclass)."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    _BY_NUMBER: ClassVar[dict[int, Field]]
    _PLAN: ClassVar[dict[int, tuple[str, int, bool, Any]]]
    _DEFAULTS: ClassVar[dict[str, Any]]
    _TAGS: ClassVar[dict[str, bytes]]

    @classmethod
    def _prepare(cls) -> None:
        cls._BY_NUMBER = {f.number: f for f in cls.FIELDS}
        # field key (number and the wire type its kind is written with) -> what to do
        cls._PLAN = {
            f.number << 3 | _WIRE_TYPE[f.kind]: (f.name, f.kind, f.repeated, f.message)
            for f in cls.FIELDS
        }
        cls._TAGS = {f.name: tag(f.number, _WIRE_TYPE[f.kind]) for f in cls.FIELDS}
        defaults: dict[str, Any] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            if field.default is not dataclasses.MISSING:
                defaults[field.name] = field.default
        cls._DEFAULTS = defaults

    def encode(self) -> bytes:
        parts: list[bytes] = []
        self.encode_into(parts)
        return b"".join(parts)

    def encode_into(self, parts: list[bytes]) -> None:
        cls = type(self)
        defaults = cls._DEFAULTS
        tags = cls._TAGS
        for field in cls.FIELDS:
            value = getattr(self, field.name)
            if field.repeated:
                for item in value:
                    parts.append(tags[field.name])
                    _encode_value(parts, field.kind, item)
                continue
            if value is None:
                continue
            if not field.required and field.kind != MESSAGE and value == defaults.get(field.name):
                continue
            parts.append(tags[field.name])
            _encode_value(parts, field.kind, value)

    @classmethod
    def decode(
        cls: type[M], data: bytes | bytearray | memoryview, start: int = 0, end: int = -1
    ) -> M:
        """The message in data[start:end]. Every MESSAGE frame and receipt comes through
        here, so the usual cases (one-byte keys, lengths and values) are read inline; any
        other key goes the general way, and an unknown field is skipped."""
        if end < 0:
            end = len(data)
        message = cls()
        pos = start
        while pos < end:
            key = data[pos]
            if key < 0x80:
                pos += 1
            else:
                key, pos = decode_varint(data, pos, end)
            pos = cls._decode_field(message, key, data, pos, end)
        return message

    @classmethod
    def _decode_field(
        cls, message: Any, key: int, data: bytes | bytearray | memoryview, pos: int, end: int
    ) -> int:
        """The value of the field `key` at `pos` into `message`; the position after it."""
        step = cls._PLAN.get(key)
        if step is None:
            return cls._other_field(message, key, data, pos, end)
        name, kind, repeated, sub = step
        if pos >= end:
            raise DecodeError(f"{cls.__name__}: field {key >> 3} without a value")
        value: Any
        if kind <= BOOL:
            value = data[pos]
            if value < 0x80:
                pos += 1
            else:
                value, pos = decode_varint(data, pos, end)
            if kind == BOOL:
                value = value != 0
            elif kind == INT32:
                value = to_signed32(value)
            elif kind == INT64:
                value = to_signed64(value)
        elif kind == DOUBLE:
            if pos + 8 > end:
                raise DecodeError("truncated double")
            value = _DOUBLE.unpack_from(data, pos)[0]
            pos += 8
        else:
            length = data[pos]
            if length < 0x80:
                pos += 1
            else:
                length, pos = decode_varint(data, pos, end)
            stop = pos + length
            if stop > end:
                raise DecodeError(f"field {key >> 3} of {cls.__name__} runs past its end")
            if kind == STRING:
                # surrogateescape: any byte string survives a round trip (a C++ client may
                # put bytes that are not UTF-8 in a string field), and decoding never fails
                value = str(data[pos:stop], "utf-8", "surrogateescape")
            elif kind == BYTES:
                value = bytes(data[pos:stop])
            else:
                value = sub.decode(data, pos, stop)
            pos = stop
        if repeated:
            getattr(message, name).append(value)
        else:
            setattr(message, name, value)
        return pos

    @classmethod
    def _other_field(
        cls, message: Any, key: int, data: bytes | bytearray | memoryview, pos: int, end: int
    ) -> int:
        """A key the plan does not expect: packed repeated varints, or a field to skip
        (unknown, or a known one with another wire type)."""
        field = cls._BY_NUMBER.get(key >> 3)
        wire_type = key & 7
        if field is None or not (field.repeated and wire_type == LEN and field.kind <= BOOL):
            return skip_field(data, wire_type, pos, end)
        length, pos = decode_varint(data, pos, end)
        stop = pos + length
        if stop > end:
            raise DecodeError(f"field {field.number} of {cls.__name__} runs past its end")
        items = getattr(message, field.name)
        while pos < stop:
            raw, pos = decode_varint(data, pos, stop)
            items.append(_from_varint(field.kind, raw))
        return pos


def _from_varint(kind: int, raw: int) -> int | bool:
    if kind == UINT64:
        return raw
    if kind == BOOL:
        return raw != 0
    if kind == INT32:
        return to_signed32(raw)
    return to_signed64(raw)


def _encode_value(parts: list[bytes], kind: int, value: Any) -> None:
    if kind == UINT64 or kind == INT32 or kind == INT64:
        parts.append(encode_varint(int(value)))
    elif kind == BOOL:
        parts.append(b"\x01" if value else b"\x00")
    elif kind == STRING:
        raw = value.encode("utf-8", "surrogateescape")
        parts.append(encode_varint(len(raw)))
        parts.append(raw)
    elif kind == BYTES:
        parts.append(encode_varint(len(value)))
        parts.append(bytes(value))
    elif kind == MESSAGE:
        inner = value.encode()
        parts.append(encode_varint(len(inner)))
        parts.append(inner)
    else:
        parts.append(_DOUBLE.pack(value))


def proto(cls: type[M]) -> type[M]:
    """Class decorator for a message dataclass: precomputes its tags and defaults."""
    cls._prepare()
    return cls
