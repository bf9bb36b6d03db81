"""What parity compares of a record, without moving the record: digests.

Content (key, value and headers together) gets a 64-bit BLAKE2b digest: records are
matched on it, so it must not collide. Key, value and headers also get a CRC-32 each,
only to say which part of an already mismatched record differs. Every part is
length-prefixed, so (b"ab", b"c") and (b"a", b"bc") differ, and None differs from b"".
The timestamp travels as is.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Sequence

_LEN = struct.Struct(">i").pack
NONE = b"\xff\xff\xff\xff"
_blake = hashlib.blake2b
_crc = zlib.crc32


def headers_bytes(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    out = [_LEN(len(headers))]
    for name, value in headers:
        encoded = name.encode("utf-8", "surrogateescape")
        out.append(_LEN(len(encoded)))
        out.append(encoded)
        if value is None:
            out.append(NONE)
        else:
            out.append(_LEN(len(value)))
            out.append(value)
    return b"".join(out)


def fingerprint(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> tuple[int | None, int, int, int]:
    """(key CRC or None, value CRC, headers CRC, content digest)."""
    parts = []
    if key is None:
        parts.append(NONE)
        key_hash = None
    else:
        parts.append(_LEN(len(key)))
        parts.append(key)
        key_hash = _crc(key)
    if value is None:
        parts.append(NONE)
        value_hash = -1
    else:
        parts.append(_LEN(len(value)))
        parts.append(value)
        value_hash = _crc(value)
    header_part = headers_bytes(headers)
    parts.append(header_part)
    content = _blake(b"".join(parts), digest_size=8).digest()
    return key_hash, value_hash, _crc(header_part), int.from_bytes(content, "big", signed=True)
