"""One Kafka request in, its response bytes out: sans-I/O, so tests drive it without a socket.

The listener (server.py) splits frames and parses headers; `decode` turns the body into a
request within an entry budget, `respond` looks the API up in the one table (apis/table.py),
runs its handler on the context and encodes the answer; `answer` does both. What Kafka
answers by dropping the connection raises `ConnectionClosing`.

Decoding is the one step whose cost a client chooses: a few bytes per array entry on the
wire, a few hundred bytes and about a microsecond each once decoded. So it is bounded twice:
no request may hold more than `kafka.max_request_entries` entries, and `decode_off_loop`
decodes a request with more than `INLINE_ENTRIES` in a worker thread, so that a big request,
legitimate or hostile, never holds the event loop (and every other client) for long.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import Any, NamedTuple

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.kafka.apis.table import (
    API_TABLE,
    unsupported_api_versions,
    versions_of,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

# Array entries decoded on the event loop, at about 1-4 us each: a few ms at most. Every
# Produce and Fetch of a normal client holds far fewer; more goes to a worker thread.
INLINE_ENTRIES = 2000

# What one decoded array entry costs in memory, for the listener's queued-bytes budget:
# measured 237 B for the smallest (a Produce v9 topic entry: a dict and an empty list).
ENTRY_BYTES = 256


class ConnectionClosing(Exception):
    """Kafka's answer to this request is to close the connection (the reason is logged)."""


class DecodedRequest(NamedTuple):
    """A request ready for its handler; ``body`` None means ApiVersions at a version the
    gateway does not serve (answered with v0 and UNSUPPORTED_VERSION, as Kafka does)."""

    header: protocol.RequestHeader
    body: dict[str, Any] | None
    entries: int  # array entries decoded: its memory is about entries * ENTRY_BYTES


def api_name(api_key: int) -> str:
    """A metric label: the API's name, or one shared label for every unknown key (a client
    sending keys 0..32767 must not create 32768 series)."""
    return protocol.API_NAMES.get(api_key, "unknown")


def decode(
    header: protocol.RequestHeader, frame: memoryview, max_entries: int, *, final: bool = True
) -> DecodedRequest:
    """Decode the body behind ``header`` with at most ``max_entries`` array entries.

    With ``final`` False, a request over the budget raises protocol.TooManyEntries (for the
    caller to retry with a larger budget elsewhere) instead of closing the connection.
    """
    name = api_name(header.api_key)
    low, high = versions_of(header.api_key)
    if not low <= header.api_version <= high:
        metrics.REQUESTS.labels("kafka", name, "UNSUPPORTED_VERSION").inc()
        if header.api_key == ApiKey.API_VERSIONS:
            return DecodedRequest(header, None, 0)
        metrics.BAD_INPUT.labels("kafka", "unsupported").inc()
        raise ConnectionClosing(
            f"unsupported API {name} (key {header.api_key}) v{header.api_version}"
        )
    budget = protocol.EntryBudget(max_entries)
    try:
        body = protocol.decode_request(
            header.api_key, header.api_version, frame[header.body_offset :], budget
        )
    except protocol.TooManyEntries:
        if not final:
            raise
        metrics.BAD_INPUT.labels("kafka", "too_many_entries").inc()
        raise ConnectionClosing(
            f"{name} v{header.api_version} holds more than {max_entries} array entries "
            "(kafka.max_request_entries)"
        ) from None
    except protocol.KafkaDecodeError as exc:
        metrics.BAD_INPUT.labels("kafka", "body").inc()
        raise ConnectionClosing(f"bad {name} v{header.api_version} body: {exc}") from None
    return DecodedRequest(header, body, max_entries - budget.left)


async def decode_off_loop(
    header: protocol.RequestHeader, frame: memoryview, max_entries: int, executor: Executor
) -> DecodedRequest:
    """`decode`, on the event loop while the request is small, in ``executor`` once it is not.

    The first try stops after INLINE_ENTRIES entries (a few ms); a request with more is
    decoded again in the worker, whose thread the interpreter preempts every few ms, so the
    loop keeps serving the other clients. Nearly every request is decoded once, inline.
    """
    if max_entries <= INLINE_ENTRIES:
        return decode(header, frame, max_entries)
    try:
        return decode(header, frame, INLINE_ENTRIES, final=False)
    except protocol.TooManyEntries:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, decode, header, frame, max_entries)


async def respond(context: KafkaContext, request: DecodedRequest) -> bytes | None:
    """The response frame (size prefix included) to one decoded request, or None (acks=0)."""
    header = request.header
    if request.body is None:
        return unsupported_api_versions(header.correlation_id)
    body = await API_TABLE[ApiKey(header.api_key)].handler(context, header, request.body)
    metrics.REQUESTS.labels("kafka", api_name(header.api_key), "none").inc()
    if header.api_key == ApiKey.PRODUCE and body is not None:
        _count_rejected_batches(body)
    if body is None:
        return None
    return protocol.encode_response(header.api_key, header.api_version, header.correlation_id, body)


async def answer(
    context: KafkaContext, header: protocol.RequestHeader, frame: memoryview
) -> bytes | None:
    """`decode` then `respond`: one request frame to its response (tests and tools)."""
    return await respond(context, decode(header, frame, context.settings.max_request_entries))


def _count_rejected_batches(body: dict[str, Any]) -> None:
    """gateway_produce_rejected_total: every partition of a Produce answered with an error
    stored nothing. Counted from the response, so every reason any handler gives is counted,
    labelled by the error's name (a closed set)."""
    for topic in body["responses"]:
        for partition in topic["partition_responses"]:
            code = partition["error_code"]
            if code:
                try:
                    label = ErrorCode(code).name
                except ValueError:
                    label = "UNKNOWN"
                metrics.PRODUCE_REJECTED.labels(label).inc()
