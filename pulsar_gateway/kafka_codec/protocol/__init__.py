"""Kafka wire codec: request headers and every request/response body, bytes in, dicts out.

Sans-I/O: nothing here touches a socket. The listener splits frames on the 4-byte size prefix,
calls ``parse_request_header`` on the frame, ``decode_request`` on the body behind it, and writes
what ``encode_response`` returns (size prefix included).

Bodies are decoded by construct definitions that ``generator.py`` writes into ``messages.py`` from
Kafka's own JSON message specs, one per (api key, version); each is compiled by construct on first
use. ``vocabulary.py`` holds the small vocabulary those definitions are written in (construct
classes for Kafka's types), ``wire_types.py`` the readers and writers of the primitive types both
use; this module is the public API, the codec lookup and the error boundary.

Dict keys are the spec's field names in snake_case (``TopicId`` -> ``topic_id``). A tagged field
appears in a decoded dict only when it was on the wire, and is encoded only when the caller put it
in the dict with a value other than None: old clients (librdkafka 2.0.2) choke on tagged fields
they did not expect, and this way decode-then-encode reproduces the input.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from io import BytesIO
from types import ModuleType
from typing import Any, NamedTuple

import construct

from pulsar_gateway.kafka_codec.protocol.wire_types import (
    _I32,
    _UNLIMITED,
    KafkaDecodeError,
    KafkaEncodeError,
    PartsWriter,
    TooManyEntries,
    _as_view,
    _Reader,
    _skip_tagged,
    _write_str,
)

__all__ = [
    "API_NAMES",
    "SUPPORTED",
    "EntryBudget",
    "KafkaDecodeError",
    "KafkaEncodeError",
    "RequestHeader",
    "compile_codecs",
    "TooManyEntries",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "parse_request_header",
]

API_VERSIONS_KEY = 18


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
    out = BytesIO()
    _encode_response_into(out, api_key, api_version, correlation_id, body)
    return _patched(out)


def encode_response_parts(
    api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]
) -> list[bytes | bytearray | memoryview]:
    """`encode_response` as a list of buffers for one writev: the big parts of `BlobParts`
    values (a Fetch answer's stored batches) as they are held, not copied
    (wire_types.PartsWriter). The buffers are the caller's; none is written to again."""
    out = PartsWriter()
    _encode_response_into(out, api_key, api_version, correlation_id, body)
    parts = out.finished()
    first = parts[0]
    assert isinstance(first, bytearray), "the header is written first, into a chunk"
    _I32.pack_into(first, 0, out.size - 4)
    return parts


def _encode_response_into(
    out: BytesIO | PartsWriter,
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: Mapping[str, Any],
) -> None:
    """The response, behind a size prefix of 0 for the caller to patch, written to `out`."""
    codec = _codec(api_key, api_version, True, KafkaEncodeError)
    out.write(_I32.pack(0))
    out.write(_I32.pack(correlation_id))
    flexible = _is_flexible(_messages().RESPONSE_FLEXIBLE_FROM, api_key, api_version)
    if flexible and api_key != API_VERSIONS_KEY:
        out.write(b"\x00")
    _build(codec, body, out, api_key, api_version, "Response")


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


# The APIs a Kafka client uses on every connection and on the data path (produce, fetch,
# their offsets and groups): `compile_codecs` compiles them at start, every version.
DATA_PATH_APIS = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 22)


def compile_codecs(api_keys: tuple[int, ...] = DATA_PATH_APIS) -> int:
    """Compile every version of these APIs' requests and responses now, not on first use:
    a first Fetch would otherwise pay for its response's codec (some 0.1-0.3 s under load,
    3-12% of a fetch after a restart, measured with py-spy). The rest compile on first
    use, as before. Returns how many definitions were compiled."""
    tables = _messages()
    wanted = set(api_keys)
    definitions = {
        definition
        for table in (tables.REQUESTS, tables.RESPONSES)
        for (api_key, _version), definition in table.items()
        if api_key in wanted
    }
    for definition in definitions:
        _compiled(definition)
    return len(definitions)


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
    _build(codec, body, out, api_key, api_version, kind)
    return _patched(out)


def _patched(out: BytesIO) -> bytes:
    """What `out` holds, its size prefix (the first 4 bytes) set to the bytes after it."""
    size = out.tell() - 4
    out.seek(0)
    out.write(_I32.pack(size))
    return out.getvalue()


def _build(
    codec: construct.Compiled,
    body: Mapping[str, Any],
    out: BytesIO | PartsWriter,
    api_key: int,
    api_version: int,
    kind: str,
) -> None:
    """Append the body to `out`; explain failures with the field's path."""
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


def _is_flexible(first_flexible: dict[int, int], api_key: int, api_version: int) -> bool:
    first = first_flexible.get(api_key)
    return first is not None and first <= api_version <= _messages().SUPPORTED[api_key][1]
