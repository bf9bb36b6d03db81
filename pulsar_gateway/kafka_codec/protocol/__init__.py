"""Kafka wire codec: request headers and every request/response body, bytes in, dicts out.

Sans-I/O: nothing here touches a socket. The listener splits frames on the 4-byte size prefix,
calls ``parse_request_header`` on the frame, ``decode_request`` on the body behind it, and writes
what ``encode_response`` returns (size prefix included).

Bodies are decoded by construct definitions that ``generator.py`` writes into ``messages.py`` from
Kafka's own JSON message specs, one per (api key, version); each is compiled by construct on first
use. The second half of this module is the small vocabulary those definitions are written in:
construct classes for Kafka's types (compact and nullable strings, arrays, tagged-field sections),
because construct's own classes know nothing of them and their compiled forms do not check for
short reads.

Dict keys are the spec's field names in snake_case (``TopicId`` -> ``topic_id``). A tagged field
appears in a decoded dict only when it was on the wire, and is encoded only when the caller put it
in the dict with a value other than None: old clients (librdkafka 2.0.2) choke on tagged fields
they did not expect, and this way decode-then-encode reproduces the input.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable, Mapping
from io import BytesIO
from types import ModuleType
from typing import Any, NamedTuple

import construct

__all__ = [
    "API_NAMES",
    "SUPPORTED",
    "EntryBudget",
    "KafkaDecodeError",
    "KafkaEncodeError",
    "RequestHeader",
    "TooManyEntries",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "parse_request_header",
]

API_VERSIONS_KEY = 18


class KafkaDecodeError(Exception):
    """Malformed, truncated or oversized input; the only exception decoding raises."""


class TooManyEntries(KafkaDecodeError):
    """The message holds more array entries than the decode's EntryBudget allowed.

    Its own class so that a caller can try a small budget first (cheap, on the event loop) and
    decode again with a larger one elsewhere, telling "too big for here" from "malformed".
    """


class EntryBudget:
    """How many array entries (of every array, nested ones included) a decode may still create.

    The wire bounds every count by the bytes left, but a 3-byte entry decodes to a ~240-byte
    dict: a 6 MB request of 2M tiny entries took 500 MB and 9 s to decode. Decoding spends from
    the budget (once per array, O(1)) and raises TooManyEntries before building an array that
    would overspend it; afterwards ``left`` says what the message cost.
    """

    __slots__ = ("left",)

    def __init__(self, entries: int) -> None:
        self.left = entries


class KafkaEncodeError(ValueError):
    """A body dict that cannot be encoded (wrong type, out of range); names the field."""


class RequestHeader(NamedTuple):
    """The request header; the body starts at ``body_offset`` in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------

_HEADER = struct.Struct(">hhih")
_REQUEST_PREFIX = struct.Struct(">hhi")


def parse_request_header(frame: memoryview | bytes) -> RequestHeader:
    """Parse the header at the start of ``frame`` (one request, size prefix already removed).

    Uses struct, not construct: it runs for every request. Unknown api keys and versions still
    get a header (v1 layout) so that the server can answer with an error.
    """
    try:
        api_key, api_version, correlation_id, length = _HEADER.unpack_from(frame, 0)
        pos = 10
        client_id = None
        if length >= 0:  # a non-compact nullable string, even in header v2
            end = pos + length
            if end > len(frame):
                raise KafkaDecodeError(f"client id of {length} bytes overruns the frame")
            client_id = str(frame[pos:end], "utf-8")
            pos = end
        if _is_flexible(_messages().REQUEST_FLEXIBLE_FROM, api_key, api_version):
            if frame[pos] == 0:  # the usual empty tagged section
                pos += 1
            else:
                reader = _Reader(_as_view(frame), pos)
                _skip_tagged(reader)
                pos = reader.pos
    except KafkaDecodeError as exc:
        raise KafkaDecodeError(f"request header: {exc}") from None
    except Exception as exc:  # any failure on untrusted bytes is a decode error
        raise KafkaDecodeError(f"request header truncated or malformed ({exc!r})") from exc
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def decode_request(
    api_key: int,
    api_version: int,
    body: memoryview | bytes,
    budget: EntryBudget | None = None,
) -> dict[str, Any]:
    """Decode a request body (the frame from ``body_offset`` on); trailing bytes are ignored.

    Kafka ignores them too. ``records`` come back as memoryviews into ``body``. With a
    ``budget``, at most ``budget.left`` array entries are decoded (TooManyEntries beyond) and
    ``budget.left`` is what remains; without one only the bytes bound the entries.
    """
    codec = _codec(api_key, api_version, False, KafkaDecodeError)
    return _decode(codec, api_key, api_version, "Request", body, 0, budget=budget)


def decode_response(api_key: int, api_version: int, frame: memoryview | bytes) -> dict[str, Any]:
    """Decode a response frame (size prefix removed; header included) into its body dict.

    The correlation id is the frame's first int32, for the caller to match before decoding.
    """
    codec = _codec(api_key, api_version, True, KafkaDecodeError)
    flexible = _is_flexible(_messages().RESPONSE_FLEXIBLE_FROM, api_key, api_version)
    tagged_header = flexible and api_key != API_VERSIONS_KEY
    return _decode(codec, api_key, api_version, "Response", frame, 4, tagged_header)


def encode_response(
    api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]
) -> bytes:
    """Encode a response, size prefix included, ready for the socket.

    Header v1 (with an empty tagged section) for flexible versions, v0 otherwise; ApiVersions
    always uses v0 so that a client can read it whatever version it asked for.
    """
    codec = _codec(api_key, api_version, True, KafkaEncodeError)
    out = BytesIO()
    out.write(_I32.pack(0))
    out.write(_I32.pack(correlation_id))
    flexible = _is_flexible(_messages().RESPONSE_FLEXIBLE_FROM, api_key, api_version)
    if flexible and api_key != API_VERSIONS_KEY:
        out.write(b"\x00")
    return _finish(codec, body, out, api_key, api_version, "Response")


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: Mapping[str, Any],
) -> bytes:
    """Encode a request, size prefix included (for tests and for the gateway as a client)."""
    codec = _codec(api_key, api_version, False, KafkaEncodeError)
    out = BytesIO()
    out.write(_I32.pack(0))
    out.write(_REQUEST_PREFIX.pack(api_key, api_version, correlation_id))
    try:
        _write_str(out, client_id, False, True)
    except (TypeError, ValueError) as exc:
        raise KafkaEncodeError(f"client_id: {exc}") from None
    if _is_flexible(_messages().REQUEST_FLEXIBLE_FROM, api_key, api_version):
        out.write(b"\x00")
    return _finish(codec, body, out, api_key, api_version, "Request")


# --------------------------------------------------------------------------------------------
# Codec lookup, compilation and the error boundary
# --------------------------------------------------------------------------------------------


@functools.cache
def _messages() -> ModuleType:
    """messages.py, imported on first use so that the generator runs even when it is stale."""
    from . import messages

    return messages


def __getattr__(name: str) -> Any:
    """SUPPORTED and API_NAMES live in the generated tables."""
    if name in ("SUPPORTED", "API_NAMES"):
        return getattr(_messages(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _compiled(definition: construct.Construct) -> construct.Compiled:
    """Compiled once per definition: the versions of a message that are alike share one."""
    return definition.compile()


def _codec(
    api_key: int, api_version: int, response: bool, error: type[Exception]
) -> construct.Compiled:
    """The compiled definition of one message version; compiled once, on first use."""
    tables = _messages()
    definition = (tables.RESPONSES if response else tables.REQUESTS).get((api_key, api_version))
    if definition is None:
        name = tables.API_NAMES.get(api_key, f"api key {api_key}")
        kind = "response" if response else "request"
        raise error(f"no {kind} definition for {name} v{api_version}")
    return _compiled(definition)


def _decode(
    codec: construct.Compiled,
    api_key: int,
    api_version: int,
    kind: str,
    data: memoryview | bytes,
    offset: int,
    tagged_header: bool = False,
    budget: EntryBudget | None = None,
) -> dict[str, Any]:
    """Run a compiled parser; every failure on untrusted bytes becomes KafkaDecodeError.

    Calls the compiled function itself: construct's parse_stream() would first build a context
    container that our definitions never read (about 1 us, a quarter of a Produce decode).
    """
    reader = _Reader(_as_view(data), offset, _UNLIMITED if budget is None else budget.left)
    try:
        if reader.pos > len(reader.buf):
            raise KafkaDecodeError("header truncated")
        if tagged_header:
            _skip_tagged(reader)
        return codec.parsefunc(reader, None)
    except Exception as exc:  # any failure on untrusted bytes is a decode error
        name = f"{_messages().API_NAMES.get(api_key, api_key)}{kind} v{api_version}"
        if isinstance(exc, KafkaDecodeError):
            raise type(exc)(f"{name}: {exc}") from None
        raise KafkaDecodeError(f"{name}: truncated or malformed ({exc!r})") from exc
    finally:
        if budget is not None:
            budget.left = reader.entries


def _finish(
    codec: construct.Compiled,
    body: Mapping[str, Any],
    out: BytesIO,
    api_key: int,
    api_version: int,
    kind: str,
) -> bytes:
    """Append the body, back-patch the size prefix; explain failures with the field's path."""
    try:
        codec.buildfunc(body, out, None)  # as in _decode, without construct's context
    except Exception as exc:
        name = f"{_messages().API_NAMES.get(api_key, api_key)}{kind} v{api_version}"
        try:  # the uncompiled build tracks the field path for the message
            codec.defersubcon._build(body, BytesIO(), None, name)
        except KafkaEncodeError:
            raise
        except Exception:
            pass
        raise KafkaEncodeError(f"{name}: {exc}") from exc
    size = out.tell() - 4
    out.seek(0)
    out.write(_I32.pack(size))
    return out.getvalue()


def _is_flexible(first_flexible: dict[int, int], api_key: int, api_version: int) -> bool:
    first = first_flexible.get(api_key)
    return first is not None and first <= api_version <= _messages().SUPPORTED[api_key][1]


def _as_view(data: memoryview | bytes) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


# --------------------------------------------------------------------------------------------
# Reading and writing Kafka's primitive types (shared by the compiled and uncompiled paths)
# --------------------------------------------------------------------------------------------

_I8 = struct.Struct(">b")
_U8 = struct.Struct(">B")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_ONE_BYTE = [bytes((i,)) for i in range(128)]
ZERO_UUID = uuid.UUID(int=0)
_UNLIMITED = 1 << 62  # an entry budget no message can spend: the bytes bound it first


class _Reader:
    """Read cursor over received bytes; values are read in place and blobs are views, not copies.

    ``entries`` is the array entries the decode may still create (see EntryBudget).
    """

    __slots__ = ("buf", "entries", "pos")

    def __init__(self, buf: memoryview, pos: int = 0, entries: int = _UNLIMITED) -> None:
        self.buf = buf
        self.pos = pos
        self.entries = entries


def _read(r: _Reader, fmt: struct.Struct) -> Any:
    pos = r.pos
    r.pos = pos + fmt.size
    return fmt.unpack_from(r.buf, pos)[0]


def _read_uvarint(r: _Reader) -> int:
    buf = r.buf
    pos = r.pos
    byte = buf[pos]
    if byte < 0x80:
        r.pos = pos + 1
        return byte
    value = byte & 0x7F
    shift = 7
    while True:
        pos += 1
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            r.pos = pos + 1
            return value
        shift += 7
        if shift > 28:
            raise KafkaDecodeError("unsigned varint longer than 5 bytes")


def _read_length(r: _Reader, compact: bool, nullable: bool, wide: bool) -> int:
    """A length or count prefix, -1 for null; never larger than the bytes left."""
    if compact:
        n = _read_uvarint(r) - 1
    else:
        n = _read(r, _I32 if wide else _I16)
    if n < 0:
        if nullable:
            return -1
        raise KafkaDecodeError("null where the field is not nullable")
    if n > len(r.buf) - r.pos:
        raise KafkaDecodeError(f"length {n} exceeds the {len(r.buf) - r.pos} bytes left")
    return n


def _read_count(r: _Reader, compact: bool, nullable: bool, min_size: int) -> int:
    """An array's entry count, -1 for null, checked before anything is allocated or looped.

    Every entry takes at least ``min_size`` bytes (its type's smallest encoding), so a count the
    bytes left cannot hold is refused at once rather than after decoding the entries that fit;
    and the count is spent from the reader's entry budget. Two comparisons per array, not per
    entry, so the hot paths do not notice.
    """
    n = _read_uvarint(r) - 1 if compact else _read(r, _I32)
    if n < 0:
        if nullable:
            return -1
        raise KafkaDecodeError("null where the field is not nullable")
    left = len(r.buf) - r.pos
    if n * min_size > left:
        raise KafkaDecodeError(
            f"{n} array entries of at least {min_size} bytes each exceed the {left} bytes left"
        )
    r.entries -= n
    if r.entries < 0:
        raise TooManyEntries(f"an array of {n} entries overspends the decode's entry budget")
    return n


def _read_str(r: _Reader, compact: bool, nullable: bool) -> str | None:
    n = _read_length(r, compact, nullable, False)
    if n < 0:
        return None
    if n > 0x7FFF:
        raise KafkaDecodeError(f"string length {n} exceeds 32767")
    pos = r.pos
    r.pos = pos + n
    return str(r.buf[pos : pos + n], "utf-8")


def _read_blob(r: _Reader, compact: bool, nullable: bool) -> memoryview | None:
    n = _read_length(r, compact, nullable, True)
    if n < 0:
        return None
    pos = r.pos
    r.pos = pos + n
    return r.buf[pos : pos + n]


def _read_bytes(r: _Reader, compact: bool, nullable: bool) -> bytes | None:
    blob = _read_blob(r, compact, nullable)
    return None if blob is None else bytes(blob)


def _read_uuid(r: _Reader) -> uuid.UUID:
    pos = r.pos
    if pos + 16 > len(r.buf):
        raise KafkaDecodeError("uuid truncated")
    r.pos = pos + 16
    return uuid.UUID(bytes=bytes(r.buf[pos : pos + 16]))


def _read_ints(r: _Reader, n: int, code: str) -> list[int]:
    """An array of fixed-size integers in one unpack."""
    fmt = f">{n}{code}"
    pos = r.pos
    r.pos = pos + struct.calcsize(fmt)
    return list(struct.unpack_from(fmt, r.buf, pos))


def _skip_tagged(r: _Reader) -> None:
    for _ in range(_read_uvarint(r)):
        _read_uvarint(r)
        end = _read_uvarint(r) + r.pos
        if end > len(r.buf):
            raise KafkaDecodeError("tagged field overruns the message")
        r.pos = end


def _write_uvarint(w: BytesIO, value: int) -> None:
    if 0 <= value < 0x80:
        w.write(_ONE_BYTE[value])
        return
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    w.write(out)


def _write_length(w: BytesIO, n: int, compact: bool, wide: bool) -> None:
    """A length or count prefix; -1 writes null."""
    if compact:
        _write_uvarint(w, n + 1)
    else:
        w.write((_I32 if wide else _I16).pack(n))


def _write_null(w: BytesIO, nullable: bool, compact: bool, wide: bool) -> None:
    if not nullable:
        raise ValueError("None where the field is not nullable")
    _write_length(w, -1, compact, wide)


def _write_str(w: BytesIO, value: str | None, compact: bool, nullable: bool) -> None:
    if value is None:
        _write_null(w, nullable, compact, False)
        return
    if not isinstance(value, str):
        raise TypeError(f"expected str, got {type(value).__name__}")
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes exceeds 32767")
    _write_length(w, len(data), compact, False)
    w.write(data)


def _write_blob(w: BytesIO, value: Any, compact: bool, nullable: bool) -> None:
    """Bytes and records: accepts bytes, bytearray or memoryview."""
    if value is None:
        _write_null(w, nullable, compact, True)
        return
    if isinstance(value, memoryview):
        n = value.nbytes
    elif isinstance(value, bytes | bytearray):
        n = len(value)
    else:
        raise TypeError(f"expected bytes, bytearray or memoryview, got {type(value).__name__}")
    _write_length(w, n, compact, True)
    w.write(value)


def _write_uuid(w: BytesIO, value: Any) -> None:
    data = value.bytes if isinstance(value, uuid.UUID) else bytes(value)
    if len(data) != 16:
        raise ValueError(f"uuid must be 16 bytes, got {len(data)}")
    w.write(data)


def _write_tagged(w: BytesIO, tags: list[tuple[int, bytes]]) -> None:
    _write_uvarint(w, len(tags))
    for tag, data in tags:
        _write_uvarint(w, tag)
        _write_uvarint(w, len(data))
        w.write(data)


# --------------------------------------------------------------------------------------------
# The construct vocabulary messages.py is written in
# --------------------------------------------------------------------------------------------
# Each class implements construct's _parse/_build (uncompiled; the build also reports the field
# path of an error) and _emitparse/_emitbuild, so that Construct.compile() inlines whole messages
# into straight-line Python. Parsing always runs on a _Reader, building on a BytesIO.

_RUNTIME_IMPORT = (
    f"from {__name__} import (_read, _read_uvarint, _read_length, _read_count, _read_str, "
    "_read_bytes, "
    "_read_blob, _read_uuid, _read_ints, _skip_tagged, _write_uvarint, _write_length, "
    "_write_null, _write_str, _write_blob, _write_uuid, _write_tagged, KafkaDecodeError, "
    "ZERO_UUID, _I8, _U8, _I16, _U16, _I32, _U32, _I64, _F64)"
)


class KafkaConstruct(construct.Construct):
    """Base of the vocabulary: ``default`` is what a missing dict entry encodes as.

    ``min_size`` is the fewest bytes any value of the type takes on the wire (a null or empty
    one); arrays use their entry type's to refuse counts the message cannot hold.
    """

    default: Any = None
    min_size = 0

    def parse(self, data: bytes | memoryview, **contextkw: Any) -> Any:
        """Parse bytes (for debugging; the codec calls the compiled form)."""
        return self._parse(_Reader(_as_view(data)), None, "(parsing)")

    def _emitparse(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        return self._emit_read()

    def _emitbuild(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        return self._emit_write()

    def _emit_read(self) -> str:
        raise NotImplementedError

    def _emit_write(self) -> str:
        raise NotImplementedError


class Fixed(KafkaConstruct):
    """A fixed-width number: int8..int64, uint16, uint32, float64."""

    def __init__(self, name: str, fmt: struct.Struct, default: int | float = 0) -> None:
        super().__init__()
        self.fmt_name = name
        self.fmt = fmt
        self.default = default
        self.min_size = fmt.size

    def _parse(self, stream: _Reader, context: Any, path: str) -> Any:
        return _read(stream, self.fmt)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        stream.write(self.fmt.pack(obj))
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        return self.fmt.size

    def _emit_read(self) -> str:
        return f"_read(io, {self.fmt_name})"

    def _emit_write(self) -> str:
        return f"io.write({self.fmt_name}.pack(obj))"


class BoolField(KafkaConstruct):
    """One byte; any non-zero value reads as true, like Kafka's readByte() != 0."""

    default = False
    min_size = 1

    def _parse(self, stream: _Reader, context: Any, path: str) -> bool:
        return _read(stream, _U8) != 0

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        stream.write(b"\x01" if obj else b"\x00")
        return obj

    def _emit_read(self) -> str:
        return "(_read(io, _U8) != 0)"

    def _emit_write(self) -> str:
        return "io.write(b'\\x01' if obj else b'\\x00')"


class UuidField(KafkaConstruct):
    """16 bytes, decoded to uuid.UUID; encodes a UUID or 16 bytes."""

    default = ZERO_UUID
    min_size = 16

    def _parse(self, stream: _Reader, context: Any, path: str) -> uuid.UUID:
        return _read_uuid(stream)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        _write_uuid(stream, obj)
        return obj

    def _emit_read(self) -> str:
        return "_read_uuid(io)"

    def _emit_write(self) -> str:
        return "_write_uuid(io, obj)"


class StringField(KafkaConstruct):
    """UTF-8 string: int16 length, or unsigned varint length+1 when compact; null is -1 / 0."""

    def __init__(self, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.compact = compact
        self.nullable = nullable
        self.default = None if nullable else ""
        self.min_size = 1 if compact else 2

    def _parse(self, stream: _Reader, context: Any, path: str) -> str | None:
        return _read_str(stream, self.compact, self.nullable)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        _write_str(stream, obj, self.compact, self.nullable)
        return obj

    def _emit_read(self) -> str:
        return f"_read_str(io, {self.compact}, {self.nullable})"

    def _emit_write(self) -> str:
        return f"_write_str(io, obj, {self.compact}, {self.nullable})"


class BytesField(KafkaConstruct):
    """Bytes (int32 or compact length); ``records`` decode to a view of the input, not a copy."""

    def __init__(self, compact: bool, nullable: bool, records: bool = False) -> None:
        super().__init__()
        self.compact = compact
        self.nullable = nullable
        self.records = records
        self.default = None if nullable else b""
        self.min_size = 1 if compact else 4
        self._reader = _read_blob if records else _read_bytes

    def _parse(self, stream: _Reader, context: Any, path: str) -> Any:
        return self._reader(stream, self.compact, self.nullable)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        _write_blob(stream, obj, self.compact, self.nullable)
        return obj

    def _emit_read(self) -> str:
        return f"{self._reader.__name__}(io, {self.compact}, {self.nullable})"

    def _emit_write(self) -> str:
        return f"_write_blob(io, obj, {self.compact}, {self.nullable})"


_INT_CODES = {"_I8": "b", "_I16": "h", "_I32": "i", "_I64": "q", "_U16": "H", "_U32": "I"}


class ArrayField(KafkaConstruct):
    """Array: int32 count, or unsigned varint count+1 when compact; null is -1 / 0."""

    def __init__(self, subcon: construct.Construct, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.subcon = subcon
        self.compact = compact
        self.nullable = nullable
        self.default = None if nullable else []
        self.min_size = 1 if compact else 4
        # an entry of no bytes (an empty struct) still counts one, as in Kafka's own check
        self.entry_size = max(1, subcon.min_size)

    def _parse(self, stream: _Reader, context: Any, path: str) -> list[Any] | None:
        n = _read_count(stream, self.compact, self.nullable, self.entry_size)
        if n < 0:
            return None
        return [self.subcon._parse(stream, context, path) for _ in range(n)]

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            _write_null(stream, self.nullable, self.compact, True)
            return obj
        _write_length(stream, len(obj), self.compact, True)
        for i, item in enumerate(obj):
            _build_reporting(self.subcon, item, stream, f"{path}[{i}]")
        return obj

    def _emitparse(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        sub = self.subcon
        if isinstance(sub, Fixed) and sub.fmt_name in _INT_CODES:
            items = f"_read_ints(io, n, {_INT_CODES[sub.fmt_name]!r})"
        else:
            items = f"[{sub._compileparse(code)} for _ in range(n)]"
        name = f"parse_kafka_array_{code.allocateId()}"
        code.append(
            f"def {name}(io, this):\n"
            f"    n = _read_count(io, {self.compact}, {self.nullable}, {self.entry_size})\n"
            f"    return None if n < 0 else {items}\n"
        )
        return f"{name}(io, this)"

    def _emitbuild(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        name = f"build_kafka_array_{code.allocateId()}"
        code.append(
            f"def {name}(obj, io, this):\n"
            f"    if obj is None:\n"
            f"        return _write_null(io, {self.nullable}, {self.compact}, True)\n"
            f"    _write_length(io, len(obj), {self.compact}, True)\n"
            f"    for obj in obj:\n"
            f"        {self.subcon._compilebuild(code)}\n"
        )
        return f"{name}(obj, io, this)"


class NullableStructField(KafkaConstruct):
    """A struct that may be null: an int8 marker (-1 null, 1 present), uvarint when tagged."""

    def __init__(self, subcon: construct.Construct, tagged: bool = False) -> None:
        super().__init__()
        self.subcon = subcon
        self.tagged = tagged
        self.min_size = 1  # the null marker

    def _parse(self, stream: _Reader, context: Any, path: str) -> Any:
        present = _read_uvarint(stream) > 0 if self.tagged else _read(stream, _I8) >= 0
        return self.subcon._parse(stream, context, path) if present else None

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            stream.write(b"\x00" if self.tagged else b"\xff")
        else:
            stream.write(b"\x01")
            self.subcon._build(obj, stream, context, path)
        return obj

    def _emitparse(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        marker = "_read_uvarint(io) > 0" if self.tagged else "_read(io, _I8) >= 0"
        return f"({self.subcon._compileparse(code)} if {marker} else None)"

    def _emitbuild(self, code: construct.CodeGen) -> str:
        null = "b'\\x00'" if self.tagged else "b'\\xff'"
        sub = self.subcon._compilebuild(code)
        return f"(io.write({null}) if obj is None else (io.write(b'\\x01'), {sub}))"


class Tagged:
    """Marks a KafkaStruct member as a tagged field with this tag (flexible versions only)."""

    def __init__(self, tag: int, member: construct.Renamed) -> None:
        self.tag = tag
        self.member = member


def _unwrap(member: construct.Renamed) -> tuple[str, construct.Construct, Any]:
    """``"name" / Default(sub, value)`` -> (name, sub, value); the value defaults to sub's."""
    sub = member.subcon
    if isinstance(sub, construct.Default):
        return member.name, sub.subcon, sub.value
    return member.name, sub, sub.default


def _literal(value: Any) -> str:
    """Python source for a default value in compiled code."""
    if value is ZERO_UUID:
        return "ZERO_UUID"
    if isinstance(value, list | dict) and not value:
        return repr(value)
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return repr(value)
    raise ValueError(f"no literal for default {value!r}")


def _build_reporting(sub: construct.Construct, value: Any, stream: BytesIO, path: str) -> None:
    """Uncompiled build of one member; failures become KafkaEncodeError naming the path."""
    try:
        sub._build(value, stream, None, path)
    except KafkaEncodeError:
        raise
    except Exception as exc:
        raise KafkaEncodeError(f"{path}: {exc}") from exc


class KafkaStruct(KafkaConstruct):
    """Fields in order, then (flexible versions) the tagged-field section.

    Members are ``"name" / construct`` or ``Tagged(tag, "name" / construct)``; construct's
    ``Default`` gives a spec default. Missing or None entries encode as the default.
    """

    def __init__(self, *members: construct.Renamed | Tagged, flexible: bool = False) -> None:
        super().__init__()
        self.flexible = flexible
        self.fields = [_unwrap(m) for m in members if not isinstance(m, Tagged)]
        tagged = sorted((m.tag, _unwrap(m.member)) for m in members if isinstance(m, Tagged))
        self.tagged = {tag: (name, sub) for tag, (name, sub, _) in tagged}
        if self.tagged and not flexible:
            raise ValueError("tagged fields need a flexible version")
        self.default = {}
        # tagged fields are optional; the tagged section's count is one byte at least
        self.min_size = sum(sub.min_size for _, sub, _ in self.fields) + int(flexible)

    def _parse(self, stream: _Reader, context: Any, path: str) -> dict[str, Any]:
        result = {}
        for name, sub, _ in self.fields:
            result[name] = sub._parse(stream, context, path)
        if self.flexible:
            for _ in range(_read_uvarint(stream)):
                tag = _read_uvarint(stream)
                end = _read_uvarint(stream) + stream.pos
                if end > len(stream.buf):
                    raise KafkaDecodeError("tagged field overruns the message")
                if tag in self.tagged:
                    name, sub = self.tagged[tag]
                    result[name] = sub._parse(stream, context, path)
                    if stream.pos > end:
                        raise KafkaDecodeError(f"tagged field {name} overruns its size")
                stream.pos = end
        return result

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if not isinstance(obj, Mapping):
            raise KafkaEncodeError(f"{path}: expected a dict, got {type(obj).__name__}")
        for name, sub, default in self.fields:
            value = obj.get(name)
            _build_reporting(sub, default if value is None else value, stream, f"{path}.{name}")
        if self.flexible:
            tags = []
            for tag, (name, sub) in self.tagged.items():
                value = obj.get(name)
                if value is not None:
                    buffer = BytesIO()
                    _build_reporting(sub, value, buffer, f"{path}.{name}")
                    tags.append((tag, buffer.getvalue()))
            _write_tagged(stream, tags)
        return obj

    def _emitparse(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        name = f"parse_kafka_struct_{code.allocateId()}"
        lines = [f"def {name}(io, this):", "    result = {}"]
        for field, sub, _ in self.fields:
            lines.append(f"    result[{field!r}] = {sub._compileparse(code)}")
        if self.flexible and not self.tagged:
            lines.append("    _skip_tagged(io)")
        elif self.flexible:
            lines += [
                "    for _ in range(_read_uvarint(io)):",
                "        tag = _read_uvarint(io)",
                "        end = _read_uvarint(io) + io.pos",
                "        if end > len(io.buf):",
                "            raise KafkaDecodeError('tagged field overruns the message')",
            ]
            for i, (tag, (field, sub)) in enumerate(self.tagged.items()):
                lines += [
                    f"        {'elif' if i else 'if'} tag == {tag}:",
                    f"            result[{field!r}] = {sub._compileparse(code)}",
                    "            if io.pos > end:",
                    f"                raise KafkaDecodeError('tagged {field} overruns its size')",
                ]
            lines.append("        io.pos = end")
        lines.append("    return result")
        code.append("\n".join(lines) + "\n")
        return f"{name}(io, this)"

    def _emitbuild(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        name = f"build_kafka_struct_{code.allocateId()}"
        lines = [f"def {name}(obj, io, this):", "    objdict = obj"]
        for field, sub, default in self.fields:
            lines.append(f"    obj = objdict.get({field!r})")
            if default is not None:
                lines.append(f"    if obj is None: obj = {_literal(default)}")
            lines.append(f"    {sub._compilebuild(code)}")
        if self.flexible and not self.tagged:
            lines.append("    io.write(b'\\x00')")
        elif self.flexible:
            lines.append("    tags = []")
            for tag, (field, sub) in self.tagged.items():
                lines += [
                    f"    obj = objdict.get({field!r})",
                    "    if obj is not None:",
                    "        outer, io = io, BytesIO()",
                    f"        {sub._compilebuild(code)}",
                    f"        tags.append(({tag}, io.getvalue()))",
                    "        io = outer",
                ]
            lines.append("    _write_tagged(io, tags)")
        lines.append("    return objdict")
        code.append("\n".join(lines) + "\n")
        return f"{name}(obj, io, this)"


Bool = BoolField()
Int8 = Fixed("_I8", _I8)
Int16 = Fixed("_I16", _I16)
Uint16 = Fixed("_U16", _U16)
Int32 = Fixed("_I32", _I32)
Uint32 = Fixed("_U32", _U32)
Int64 = Fixed("_I64", _I64)
Float64 = Fixed("_F64", _F64, 0.0)
Uuid = UuidField()
String = StringField(compact=False, nullable=False)
NullableString = StringField(compact=False, nullable=True)
CompactString = StringField(compact=True, nullable=False)
CompactNullableString = StringField(compact=True, nullable=True)
Bytes = BytesField(compact=False, nullable=False)
NullableBytes = BytesField(compact=False, nullable=True)
CompactBytes = BytesField(compact=True, nullable=False)
CompactNullableBytes = BytesField(compact=True, nullable=True)
Records = BytesField(compact=False, nullable=False, records=True)
NullableRecords = BytesField(compact=False, nullable=True, records=True)
CompactRecords = BytesField(compact=True, nullable=False, records=True)
CompactNullableRecords = BytesField(compact=True, nullable=True, records=True)


def _array_kind(compact: bool, nullable: bool) -> Callable[[construct.Construct], ArrayField]:
    def make(subcon: construct.Construct) -> ArrayField:
        return ArrayField(subcon, compact, nullable)

    return make


Array = _array_kind(compact=False, nullable=False)
NullableArray = _array_kind(compact=False, nullable=True)
CompactArray = _array_kind(compact=True, nullable=False)
CompactNullableArray = _array_kind(compact=True, nullable=True)
