"""A whole basic.publish from one read buffer: method, content header and body frames.

A publisher's frames come three by three (docs/backend.md, "What an AMQP publish
costs"): taken one at a time, each is copied out, decoded into a frame object, passed
through the channel table's checks and the content assembler, and only the third makes
the message. `next_publish` looks at the reader's unread bytes and, when they start with
the common case in full (basic.publish + a content header whose properties the fast path
decodes + one body frame with exactly the announced size, all on one channel, each
within frame_max and properly ended), returns the message's parts in one go without
consuming anything. The channel table then takes it only when the frame-by-frame path
would have accepted the same frames without a word (`ChannelTable.take_publish`).
Anything else (a malformed or split frame, a body over several frames, an empty body,
properties with a table) returns None and goes frame by frame through frames.py, which
gives the protocol's errors: both paths give the same events and output
(tests/unit/test_amqp_publish_run.py checks it on mutated streams).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from pamqp import commands

from pulsar_gateway.handlers.amqp.frames import (
    BASIC_CLASS_ID,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    FRAME_METHOD,
    MAX_KNOWN_PROPERTIES,
    FrameReader,
    fast_properties,
    fast_publish,
)

_FRAME_HEADER = struct.Struct(">BHI")
_PUBLISH_ID = struct.pack(">HH", BASIC_CLASS_ID, commands.Basic.Publish.index & 0xFFFF)
_CONTENT_HEADER = struct.Struct(">HHQ")  # class id, weight, body size
_MIN_HEADER = _CONTENT_HEADER.size + 2  # and the property flags

_T = TypeVar("_T")


class PublishRun(NamedTuple):
    """A basic.publish read whole; `end` is where its body frame ends in the buffer."""

    channel: int
    method: commands.Basic.Publish
    properties: commands.Basic.Properties
    properties_raw: bytes
    body: bytes
    end: int


def next_publish(reader: FrameReader) -> PublishRun | None:
    """The publish the reader's unread bytes start with, when it takes the common case
    (see the module docstring); None otherwise. Consumes nothing: `FrameReader.skip`
    does once it is taken."""
    buf, pos, known = reader.unread()
    limit = len(buf)
    frame_max = reader.frame_max
    # the method frame
    if limit - pos < FRAME_HEADER_SIZE:
        return None
    kind, channel, size = _FRAME_HEADER.unpack_from(buf, pos)
    start = pos + FRAME_HEADER_SIZE
    end = start + size
    if (
        kind != FRAME_METHOD
        or (frame_max and size > frame_max)
        or end >= limit
        or buf[end] != FRAME_END
        or buf[start : start + 4] != _PUBLISH_ID
    ):
        return None
    payload = bytes(buf[start:end])
    # a publisher mostly repeats its exchange and routing key: decoded once, shared by its
    # messages as the properties are
    publishes = reader.known_publishes
    method = publishes.get(payload) or _remembered(publishes, payload, fast_publish)
    if method is None:
        return None
    # the content header frame
    pos = end + 1
    if limit - pos < FRAME_HEADER_SIZE:
        return None
    kind, header_channel, size = _FRAME_HEADER.unpack_from(buf, pos)
    start = pos + FRAME_HEADER_SIZE
    end = start + size
    if (
        kind != FRAME_HEADER
        or header_channel != channel
        or (frame_max and size > frame_max)
        or size < _MIN_HEADER
        or end >= limit
        or buf[end] != FRAME_END
    ):
        return None
    class_id, weight, body_size = _CONTENT_HEADER.unpack_from(buf, start)
    if class_id != BASIC_CLASS_ID or weight != 0 or body_size == 0:
        return None
    raw = bytes(buf[start + _CONTENT_HEADER.size : end])
    # as frames._decode_header keeps them
    properties = known.get(raw) or _remembered(known, raw, fast_properties)
    if properties is None:
        return None
    # the body frame: the whole body
    pos = end + 1
    if limit - pos < FRAME_HEADER_SIZE:
        return None
    kind, body_channel, size = _FRAME_HEADER.unpack_from(buf, pos)
    start = pos + FRAME_HEADER_SIZE
    end = start + size
    if (
        kind != FRAME_BODY
        or body_channel != channel
        or size != body_size
        or (frame_max and size > frame_max)
        or end >= limit
        or buf[end] != FRAME_END
    ):
        return None
    return PublishRun(channel, method, properties, raw, bytes(buf[start:end]), end + 1)


def _remembered(
    known: dict[bytes, _T], raw: bytes, decode: Callable[[bytes], _T | None]
) -> _T | None:
    """`decode(raw)`, kept in `known` (emptied when full) unless it is None: called only on
    a miss, so that a hit costs the caller one dict look-up."""
    value = decode(raw)
    if value is not None:
        if len(known) >= MAX_KNOWN_PROPERTIES:
            known.clear()
        known[raw] = value
    return value
