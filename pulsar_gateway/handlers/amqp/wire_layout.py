"""The wire layouts of AMQP 0-9-1 method fields, field tables and basic properties,
and the exact walk of a payload against them.

pamqp decodes leniently (a truncated shortstr or a table overrunning its length decodes to
garbage), while RabbitMQ's decoder matches binaries exactly; frames.py therefore walks every
method and content-header payload here first and hands pamqp only one that fits. The walk
never recurses deeper than MAX_TABLE_DEPTH, so a hostile nesting costs a bounded stack.
"""

from __future__ import annotations

import struct

from pamqp import base, commands

MAX_TABLE_DEPTH = 64  # deeper nesting is refused rather than recursed into
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class Malformed(ValueError):
    """The payload does not fit its layout (the decoder answers 501 FRAME_ERROR)."""


_FIXED_SIZES = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}
# Field-table value types (RabbitMQ's errata set plus pamqp's b"\x00" void).
TABLE_FIXED_SIZES = {
    0x74: 1,  # t bool
    0x62: 1,  # b int8
    0x42: 1,  # B uint8
    0x73: 2,  # s int16
    0x75: 2,  # u uint16
    0x49: 4,  # I int32
    0x69: 4,  # i uint32
    0x6C: 8,  # l int64
    0x4C: 8,  # L uint64
    0x66: 4,  # f float
    0x64: 8,  # d double
    0x44: 5,  # D decimal
    0x54: 8,  # T timestamp
    0x56: 0,  # V void
    0x00: 0,  # void, seen in the wild
}
TABLE_LONG_BYTES = {0x53, 0x78}  # S longstr, x byte array
_LAYOUTS: dict[type[base.Frame], tuple[str, ...]] = {}


def method_layout(cls: type[base.Frame]) -> tuple[str, ...]:
    """Field types in wire order; up to 8 consecutive bits share one octet."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        types: list[str] = []
        bits = 0
        for attribute in cls.__slots__:
            kind = cls.amqp_type(attribute)
            if kind == "bit":
                if bits % 8 == 0:
                    types.append("octet")
                bits += 1
            else:
                bits = 0
                types.append(kind)
        layout = _LAYOUTS[cls] = tuple(types)
    return layout


def check_layout(data: bytes, pos: int, end: int, layout: tuple[str, ...], depth: int) -> None:
    for kind in layout:
        pos = skip_field(data, pos, end, kind, depth)
    if pos != end:
        raise Malformed("trailing octets")


def skip_field(data: bytes, pos: int, end: int, kind: str, depth: int) -> int:
    size = _FIXED_SIZES.get(kind)
    if size is not None:
        new = pos + size
    elif kind == "shortstr":
        if pos >= end:
            raise Malformed("shortstr length")
        new = pos + 1 + data[pos]
    elif kind == "longstr":
        new = pos + 4 + _length(data, pos, end)
    elif kind == "table":
        length = _length(data, pos, end)
        new = pos + 4 + length
        if new > end:
            raise Malformed("table overruns")
        _check_table(data, pos + 4, new, depth + 1)
    else:
        raise Malformed(f"unknown field type {kind}")
    if new > end:
        raise Malformed(f"{kind} overruns")
    return new


def _length(data: bytes, pos: int, end: int) -> int:
    if pos + 4 > end:
        raise Malformed("length overruns")
    return int(_U32.unpack_from(data, pos)[0])


def _check_table(data: bytes, pos: int, end: int, depth: int) -> None:
    if depth > MAX_TABLE_DEPTH:
        raise Malformed("tables nested too deeply")
    while pos < end:
        key_end = pos + 1 + data[pos]
        if key_end >= end:  # the key and at least a type octet
            raise Malformed("table key overruns")
        pos = skip_value(data, key_end, end, depth)


def _check_array(data: bytes, pos: int, end: int, depth: int) -> None:
    if depth > MAX_TABLE_DEPTH:
        raise Malformed("arrays nested too deeply")
    while pos < end:
        pos = skip_value(data, pos, end, depth)


def skip_value(data: bytes, pos: int, end: int, depth: int) -> int:
    kind = data[pos]
    pos += 1
    size = TABLE_FIXED_SIZES.get(kind)
    if size is not None:
        new = pos + size
    elif kind in TABLE_LONG_BYTES:
        new = pos + 4 + _length(data, pos, end)
    elif kind in (0x46, 0x41):  # F table, A array
        new = pos + 4 + _length(data, pos, end)
        if new > end:
            raise Malformed("nested value overruns")
        if kind == 0x46:
            _check_table(data, pos + 4, new, depth + 1)
        else:
            _check_array(data, pos + 4, new, depth + 1)
    else:
        raise Malformed(f"unknown field value type {kind}")
    if new > end:
        raise Malformed("field value overruns")
    return new


_PROPERTY_LAYOUT = tuple(
    (commands.Basic.Properties.flags[name], commands.Basic.Properties.amqp_type(name))
    for name in commands.Basic.Properties.__slots__
)


def check_properties(raw: bytes) -> None:
    """Walk basic properties exactly as RabbitMQ's decoder would match them."""
    if len(raw) < 2:
        raise Malformed("no property flags")
    flags = _U16.unpack_from(raw)[0]
    if flags & 1:
        # A continuation flag word: basic has 14 properties, none needs it.
        raise Malformed("property flags continuation")
    pos, end = 2, len(raw)
    for bit, kind in _PROPERTY_LAYOUT:
        if flags & bit:
            pos = skip_field(raw, pos, end, kind, 0)
    if pos != end:
        raise Malformed("trailing octets after properties")
