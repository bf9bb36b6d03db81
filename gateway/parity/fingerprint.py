"""What parity compares of a record, without moving the record: 64-bit digests.

Each side's reader turns a record into (key, value, headers, content) digests, where
content covers key, value and headers together; the timestamp travels as is. Digests
are length-prefixed, so (b"ab", b"c") and (b"a", b"bc") differ, and None differs from
b"".
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

_LEN = struct.Struct(">i")
NONE = _LEN.pack(-1)


def _part(data: bytes | None) -> bytes:
    return NONE if data is None else _LEN.pack(len(data)) + data


def digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


def headers_bytes(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    out = [_LEN.pack(len(headers))]
    for name, value in headers:
        out.append(_part(name.encode("utf-8", "surrogateescape")))
        out.append(_part(value))
    return b"".join(out)


def fingerprint(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> tuple[int | None, int, int, int]:
    """(key digest or None, value digest, headers digest, content digest)."""
    key_part, value_part, header_part = _part(key), _part(value), headers_bytes(headers)
    return (
        None if key is None else digest(key_part),
        digest(value_part),
        digest(header_part),
        digest(key_part + value_part + header_part),
    )
