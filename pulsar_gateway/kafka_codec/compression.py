"""The four Kafka compression codecs, byte-compatible with what real clients write and read.

Codec ids are the low three bits of a RecordBatch's attributes: 0 none, 1 gzip, 2 snappy,
3 lz4, 4 zstd. Every decoder takes a ``max_size`` so that a small hostile batch cannot make the
gateway allocate gigabytes (a decompression bomb); each one stops at the limit instead of
inflating first and measuring afterwards.

Wire formats, and why:

* gzip: RFC 1952 gzip members (Java's ``GZIPOutputStream``, librdkafka's zlib). We also read a
  zlib stream and concatenated members, as librdkafka's ``inflateInit2(15+32)`` does.
* snappy: two framings exist in the wild. librdkafka and aiokafka/kafka-python (when told to)
  write *raw* snappy; the Java client, kafka-python's default and aiokafka's default write the
  *xerial* (snappy-java ``SnappyOutputStream``) framing: ``b"\\x82SNAPPY\\x00"``, two big-endian
  int32s (version 1, compat 1), then blocks of ``BE int32 length + raw snappy``. We read both.
  We write xerial: librdkafka detects it by the same 8-byte magic
  (``rd_kafka_snappy_java_uncompress``), kafka-python and aiokafka detect it by header, Java reads
  it natively, and it is what a Java broker writes when it recompresses. Raw snappy would also
  be read by all of them, but only through fallbacks (Java's ``SnappyInputStream`` falls back to
  raw when the header is absent); xerial is the one format every reader treats as primary.
* lz4: the LZ4 *frame* format with independent blocks (KIP-57; Java's
  ``KafkaLZ4BlockInputStream`` rejects linked blocks). The broken header checksum of old Kafka
  only applies to magic v0/v1 message sets, never to v2 batches, so it is not handled here.
* zstd: one zstd frame, with or without a content-size field (librdkafka's streaming encoder may
  leave it out, so we cannot rely on it to size the output).
"""

from __future__ import annotations

import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard

from pulsar_gateway.kafka_codec.errors import ErrorCode

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

#: Default ceiling for one decompressed batch. Kafka's own limits are on the *compressed*
#: size (message.max.bytes, 1 MiB by default); 64 MiB leaves room for very compressible data.
DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_BE_INT32 = struct.Struct(">i")

# Levels: librdkafka's defaults for compression.level=-1 (zlib's 6, LZ4 fast mode, zstd 3).
_GZIP_LEVEL = 6
_LZ4_LEVEL = 0
_ZSTD_LEVEL = 3


class CompressionError(Exception):
    """Compressed data could not be produced or read; ``code`` is the Kafka error to answer."""

    def __init__(self, message: str, code: int = ErrorCode.CORRUPT_MESSAGE) -> None:
        super().__init__(message)
        self.code = code


class DecompressionLimitError(CompressionError):
    """The output would exceed ``max_size``: refuse rather than allocate it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.MESSAGE_TOO_LARGE)


class InflateBudget:
    """What the compressed batches of one request may still inflate to, together.

    The per-batch ceiling alone lets one small request of many tiny, very compressible
    batches inflate to gigabytes; a Produce request shares one budget among all its
    batches (the Kafka setting's idea: `kafka.max_produce_inflated_bytes`). A request's
    budget may draw on its connection's (`parent`, `kafka.max_connection_inflated_bytes`),
    so pipelined requests cannot each take the whole per-request amount at once; the
    request gives its share back when it is answered (`release`).
    """

    __slots__ = ("_left", "parent", "taken")

    def __init__(self, limit: int, parent: InflateBudget | None = None) -> None:
        self._left = limit
        self.parent = parent
        self.taken = 0

    @property
    def remaining(self) -> int:
        if self.parent is None:
            return self._left
        return min(self._left, self.parent.remaining)

    def take(self, size: int) -> None:
        self._left -= size
        self.taken += size
        if self.parent is not None:
            self.parent.take(size)

    def release(self) -> None:
        """Give what this budget took back to its parent (a request that is done)."""
        if self.parent is not None and self.taken:
            self.parent.give_back(self.taken)
        self.taken = 0

    def give_back(self, size: int) -> None:
        self._left += size
        self.taken -= size


class UnsupportedCodecError(CompressionError):
    """Attribute bits 0-2 name a codec that does not exist (5, 6, 7)."""

    def __init__(self, codec: int) -> None:
        super().__init__(
            f"unknown compression codec {codec}", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        )
        self.codec = codec


# zstandard contexts are not thread-safe but are worth reusing (each holds a few hundred KiB of
# state), so keep one pair per thread.
_local = threading.local()


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "zc", None)
    if cache is None:
        cache = _local.zc = {}
    c = cache.get(level)
    if c is None:
        c = cache[level] = zstandard.ZstdCompressor(level=level)
    return c


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "zd", None)
    if d is None:
        d = _local.zd = zstandard.ZstdDecompressor()
    return d


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` the way a Kafka producer would for a v2 batch with this codec."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return zlib.compress(data, _GZIP_LEVEL if level is None else level, wbits=31)
    if codec == SNAPPY:
        return _xerial_snappy_compress(data)
    if codec == LZ4:
        return lz4.frame.compress(
            data,
            compression_level=_LZ4_LEVEL if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == ZSTD:
        return _zstd_compressor(_ZSTD_LEVEL if level is None else level).compress(data)
    raise UnsupportedCodecError(codec)


def _xerial_snappy_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts: list[bytes | cramjam.Buffer] = [_XERIAL_HEADER]
    pack = _BE_INT32.pack
    raw = cramjam.snappy.compress_raw
    # An empty input still gets one (empty) block: librdkafka only takes the xerial path when
    # there is at least one block after the 16-byte header.
    for i in range(0, max(len(view), 1), _XERIAL_BLOCK):
        block = raw(view[i : i + _XERIAL_BLOCK])
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    max_size: int = DEFAULT_MAX_DECOMPRESSED,
) -> bytes:
    """Inflate one batch's records section; raise CompressionError, never anything else.

    Raises DecompressionLimitError (MESSAGE_TOO_LARGE) when the output would be larger than
    ``max_size`` bytes.
    """
    try:
        if codec == NONE:
            if len(data) > max_size:
                raise DecompressionLimitError(f"{len(data)} bytes exceed limit {max_size}")
            return bytes(data)
        if codec == GZIP:
            return _gzip_decompress(data, max_size)
        if codec == SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == LZ4:
            return _lz4_decompress(data, max_size)
        if codec == ZSTD:
            return _zstd_decompress(data, max_size)
    except CompressionError:
        raise
    except (
        zlib.error,
        cramjam.DecompressionError,
        zstandard.ZstdError,
        RuntimeError,  # lz4.frame reports corrupt frames as RuntimeError
        ValueError,
        TypeError,
        OverflowError,
        MemoryError,
        struct.error,
    ) as e:
        raise CompressionError(f"{CODEC_NAMES[codec]}: corrupt input: {e}") from e
    raise UnsupportedCodecError(codec)


def _gzip_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest: bytes | bytearray | memoryview = data
    while True:
        # 47 = 32 (detect gzip or zlib header) + 15 (max window): what librdkafka accepts.
        d = zlib.decompressobj(47)
        chunk = d.decompress(rest, max_size - total + 1)
        total += len(chunk)
        if total > max_size:
            raise DecompressionLimitError(f"gzip output exceeds limit {max_size}")
        out.append(chunk)
        if not d.eof:
            raise CompressionError("gzip: truncated stream")
        rest = d.unused_data
        # Concatenated members are legal gzip (Java's GZIPInputStream reads them); trailing
        # zero padding is tolerated the way gzip(1) does.
        if not rest or not rest.strip(b"\x00"):
            break
    return out[0] if len(out) == 1 else b"".join(out)


def _snappy_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if len(view) < 16 or view[:8] != XERIAL_MAGIC:
        need = cramjam.snappy.decompress_raw_len(view)
        if need > max_size:
            raise DecompressionLimitError(f"snappy output {need} exceeds limit {max_size}")
        return bytes(cramjam.snappy.decompress_raw(view))
    # xerial framing. The version/compat words are ignored on purpose: some producers (e.g.
    # redpanda) write them little-endian, and nobody has ever shipped a version other than 1.
    pos = 16
    end = len(view)
    total = 0
    parts: list[bytes] = []
    unpack = _BE_INT32.unpack_from
    raw_len = cramjam.snappy.decompress_raw_len
    raw = cramjam.snappy.decompress_raw
    while pos < end:
        if end - pos < 4:
            raise CompressionError("snappy: truncated xerial block header")
        (n,) = unpack(view, pos)
        pos += 4
        if n < 0 or n > end - pos:
            raise CompressionError(f"snappy: xerial block length {n} out of range")
        block = view[pos : pos + n]
        pos += n
        total += raw_len(block)
        if total > max_size:
            raise DecompressionLimitError(f"snappy output exceeds limit {max_size}")
        parts.append(bytes(raw(block)))
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest: bytes | bytearray | memoryview = data
    while True:
        d = lz4.frame.LZ4FrameDecompressor()
        chunk = d.decompress(rest, max_length=max_size - total + 1)
        total += len(chunk)
        if total > max_size:
            raise DecompressionLimitError(f"lz4 output exceeds limit {max_size}")
        out.append(chunk)
        if not d.eof:
            raise CompressionError("lz4: truncated frame")
        rest = d.unused_data
        if not rest:
            break
    return out[0] if len(out) == 1 else b"".join(out)


def _zstd_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    d = _zstd_decompressor()
    size = zstandard.frame_content_size(data)  # raises ZstdError on a bad frame header
    if size > max_size:
        raise DecompressionLimitError(f"zstd frame declares {size} bytes, limit {max_size}")
    try:
        if size >= 0:
            # One-shot into a buffer of exactly the declared size: a frame that lies about
            # its size fails with "destination too small" instead of growing.
            return d.decompress(data)
        return d.decompress(data, max_output_size=max_size)
    except zstandard.ZstdError:
        if size < 0 and _zstd_exceeds(data, max_size):
            raise DecompressionLimitError(f"zstd output exceeds limit {max_size}") from None
        raise


def _zstd_exceeds(data: bytes | bytearray | memoryview, max_size: int) -> bool:
    """Tell a too-large frame from a corrupt one (only on the error path, so cost is moot)."""
    try:
        reader = _zstd_decompressor().stream_reader(data)
        got = 0
        while got <= max_size:
            chunk = reader.read(min(1 << 20, max_size + 1 - got))
            if not chunk:
                return False
            got += len(chunk)
        return True
    except zstandard.ZstdError:
        return False
