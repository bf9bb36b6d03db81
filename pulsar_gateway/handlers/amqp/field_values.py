"""Field-table values as RabbitMQ sees them: type names, equality, identity.

pamqp decodes tables to plain Python values and drops the wire type, but
RabbitMQ's answers depend on it: error texts name the type ("signedint",
"longstr"), equality ignores the integer width but not bool-vs-int, and a
binding's identity includes its arguments. These helpers recover that from
the Python value.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Hashable, Mapping
from typing import Any

_INT32 = range(-(2**31), 2**31)


def type_name(value: Any) -> str:
    """RabbitMQ's name for the wire type a client most likely sent."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if value in _INT32 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, bytearray):
        return "binary"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if value is None:
        return "void"
    return type(value).__name__


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_string(value: Any) -> bool:
    return isinstance(value, str | bytes)


def as_text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def text_or_none(value: Any) -> str | None:
    """A string argument or property as text; None when absent or not a string,
    so a caller treats a mistyped value as unset."""
    return as_text(value) if isinstance(value, str | bytes) else None


def erlang_term(value: Any) -> str:
    """How Erlang's ~p prints the value (for texts copied from RabbitMQ)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | bytes):
        return '<<"' + as_text(value) + '">>'
    return str(value)


def describe(value: Any) -> str:
    """RabbitMQ's rabbit_misc:val/1 for a typed table value or a missing one."""
    if value is None:
        return "none"
    shown = as_text(value) if isinstance(value, str | bytes) else erlang_term(value)
    return f"the value '{shown}' of type '{type_name(value)}'"


def same_value(a: Any, b: Any) -> bool:
    """Erlang `==` on two table values: int widths and int/float mix compare
    by number; bools are not numbers; text compares by its octets."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, str | bytes | bytearray) and isinstance(b, str | bytes | bytearray):
        return _octets(a) == _octets(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def frozen(value: Any) -> Hashable:
    """A hashable, order-independent identity for a table value (binding keys)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str | bytes | bytearray):
        return ("text", _octets(value))
    if isinstance(value, Mapping):
        return ("table", tuple(sorted((str(k), frozen(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("array", tuple(frozen(v) for v in value))
    if value is None:
        return ("void",)
    return (type(value).__name__, repr(value))


def _octets(value: str | bytes | bytearray) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)
