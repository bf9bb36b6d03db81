"""The four codecs a Pulsar entry's payload may be compressed with, as Pulsar's own clients
write them: LZ4 as a raw block (no frame, no size prefix: the size is the metadata's
`uncompressed_size`), ZLIB with its zlib header, ZSTD as a standard frame, SNAPPY in its
raw (unframed) format.

Decompression is bounded: the metadata states the size, a size over `limit` is refused
before anything is inflated, and output of any other size is an error (a payload that
inflates past what it claims is hostile or corrupt). Every codec failure is a
`DecodeError`.
"""

from __future__ import annotations

import zlib

import cramjam
import lz4.block
import zstandard

from pulsar_gateway.gateway.backend.wire.errors import DecodeError
from pulsar_gateway.gateway.backend.wire.messages import CompressionType
from pulsar_gateway.gateway.backend.wire.protobuf import decode_varint

# The largest payload a batched entry may inflate to, unless the caller says otherwise.
DEFAULT_UNCOMPRESSED_LIMIT = 64 * 1024 * 1024


def compress(kind: int, data: bytes) -> bytes:
    """`data` compressed with `kind` (a CompressionType); NONE returns it unchanged."""
    if kind == CompressionType.NONE:
        return data
    if kind == CompressionType.LZ4:
        return lz4.block.compress(data, store_size=False)
    if kind == CompressionType.ZLIB:
        return zlib.compress(data)
    if kind == CompressionType.ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    if kind == CompressionType.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    raise ValueError(f"unknown compression type {kind}")


def decompress(kind: int, data: bytes, size: int, limit: int = DEFAULT_UNCOMPRESSED_LIMIT) -> bytes:
    """The `size` bytes `data` inflates to; DecodeError for anything else."""
    if kind == CompressionType.NONE:
        return data
    if size > limit:
        raise DecodeError(f"payload claims {size} bytes uncompressed, over the limit {limit}")
    try:
        out = _inflate(kind, data, size)
    except DecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - each library has its own errors; all are ours
        raise DecodeError(f"cannot decompress {_name(kind)} payload: {exc}") from None
    if len(out) != size:
        raise DecodeError(f"{_name(kind)} payload inflated to {len(out)} bytes, not {size}")
    return out


def _inflate(kind: int, data: bytes, size: int) -> bytes:
    if kind == CompressionType.LZ4:
        if size == 0:
            return b""
        return lz4.block.decompress(data, uncompressed_size=size)
    if kind == CompressionType.ZLIB:
        return zlib.decompressobj().decompress(data, size + 1)
    if kind == CompressionType.ZSTD:
        declared = zstandard.frame_content_size(data)  # -1: not stated in the frame
        if declared not in (-1, size):
            raise DecodeError(f"zstd frame claims {declared} bytes, metadata says {size}")
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    if kind == CompressionType.SNAPPY:
        claimed = decode_varint(data, 0, len(data))[0]
        if claimed != size:
            raise DecodeError(f"snappy payload claims {claimed} bytes, metadata says {size}")
        return bytes(cramjam.snappy.decompress_raw(data))
    raise DecodeError(f"unknown compression type {kind}")


def _name(kind: int) -> str:
    try:
        return CompressionType(kind).name
    except ValueError:
        return f"compression {kind}"
