"""Edit a message's basic properties as octets, leaving what is not edited byte for byte.

RabbitMQ keeps the content header a publisher sent and changes only what it must: the
reply_to of a direct reply-to request (direct_reply.py), and on dead-lettering the
expiration and a few x-death headers (dead_letters.py). Decoding the properties and
encoding them again would re-type the application's own header values (pamqp writes an
int in the smallest type that holds it: a publisher's 32-bit `I` came back as an 8-bit
`b`), so these functions cut the octets at field boundaries instead, walking them with
the same layout the decoder checks (wire_layout.py).

A header table is split into (name, octets of the typed value) pairs; values the gateway
writes itself are encoded here with RabbitMQ's types (`long` counts, `longstr` names, a
`timestamp`, arrays of tables).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Iterable

from pamqp import commands

from pulsar_gateway.handlers.amqp.wire_layout import skip_field, skip_value

_PROPERTIES = commands.Basic.Properties
_ORDER = tuple(
    (name, _PROPERTIES.flags[name], _PROPERTIES.amqp_type(name)) for name in _PROPERTIES.__slots__
)
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")

FieldValue = bytes  # a table value's octets: the type octet and what follows


def split_properties(raw: bytes) -> tuple[int, dict[str, bytes]]:
    """(flags, {property name: its field octets}) of well-formed property octets (the
    decoder walked them already)."""
    flags = _U16.unpack_from(raw)[0]
    pos, end = 2, len(raw)
    fields: dict[str, bytes] = {}
    for name, bit, kind in _ORDER:
        if flags & bit:
            new = skip_field(raw, pos, end, kind, 0)
            fields[name] = raw[pos:new]
            pos = new
    return flags, fields


def join_properties(fields: dict[str, bytes]) -> bytes:
    """Property octets from {name: field octets}, in the spec's order."""
    flags = 0
    parts = [b""]
    for name, bit, _ in _ORDER:
        value = fields.get(name)
        if value is not None:
            flags |= bit
            parts.append(value)
    parts[0] = _U16.pack(flags)
    return b"".join(parts)


def shortstr(text: str) -> bytes:
    data = text.encode()
    if len(data) > 255:
        raise ValueError("shortstr over 255 octets")
    return bytes((len(data),)) + data


def read_shortstr(octets: bytes) -> str:
    return octets[1 : 1 + octets[0]].decode(errors="replace")


def replace_shortstr(raw: bytes, name: str, text: str | None) -> bytes:
    """The properties with one short-string property set to `text` (removed when None)."""
    _, fields = split_properties(raw)
    if text is None:
        fields.pop(name, None)
    else:
        fields[name] = shortstr(text)
    return join_properties(fields)


# --- header tables ----------------------------------------------------------------------


def split_table(octets: bytes) -> list[tuple[str, FieldValue]]:
    """A field table's (name, value octets) pairs in order; `octets` include the length."""
    end = 4 + _U32.unpack_from(octets)[0]
    pos = 4
    out: list[tuple[str, FieldValue]] = []
    while pos < end:
        key_end = pos + 1 + octets[pos]
        name = octets[pos + 1 : key_end].decode(errors="replace")
        new = skip_value(octets, key_end, end, 1)
        out.append((name, octets[key_end:new]))
        pos = new
    return out


def join_table(entries: Iterable[tuple[str, FieldValue]]) -> bytes:
    body = b"".join(shortstr(name) + value for name, value in entries)
    return _U32.pack(len(body)) + body


def split_array(value: FieldValue) -> list[FieldValue]:
    """The values of an `A` array value."""
    if value[:1] != b"A":
        return []
    end = 5 + _U32.unpack_from(value, 1)[0]
    pos = 5
    out = []
    while pos < end:
        new = skip_value(value, pos, end, 1)
        out.append(value[pos:new])
        pos = new
    return out


def long_value(number: int) -> FieldValue:
    """A signed 64-bit `l`, the type RabbitMQ gives counts."""
    return b"l" + _I64.pack(number)


def longstr_value(text: str) -> FieldValue:
    data = text.encode()
    return b"S" + _U32.pack(len(data)) + data


def timestamp_value(when: datetime.datetime) -> FieldValue:
    return b"T" + _U64.pack(int(when.timestamp()))


def array_value(values: Iterable[FieldValue]) -> FieldValue:
    body = b"".join(values)
    return b"A" + _U32.pack(len(body)) + body


def table_value(entries: Iterable[tuple[str, FieldValue]]) -> FieldValue:
    return b"F" + join_table(entries)


def read_text(value: FieldValue) -> str | None:
    """An `S` longstr value as text (None for another type)."""
    if value[:1] != b"S":
        return None
    return value[5 : 5 + _U32.unpack_from(value, 1)[0]].decode(errors="replace")


def read_integer(value: FieldValue) -> int | None:
    """A signed or unsigned integer value of any width (None for another type)."""
    kind = value[:1]
    formats = {b"b": ">b", b"B": ">B", b"s": ">h", b"u": ">H", b"I": ">i", b"i": ">I"}
    formats.update({b"l": ">q", b"L": ">Q"})
    fmt = formats.get(kind)
    return struct.unpack_from(fmt, value, 1)[0] if fmt else None
