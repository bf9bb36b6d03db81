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
import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, NamedTuple

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.kafka.apis.table import (
    API_TABLE,
    api_versions_frame,
    unsupported_api_versions,
    versions_of,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    ClientQuotas,
)
from pulsar_gateway.handlers.kafka.request_order import OrderedTurn, ProduceTurn
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

# Array entries decoded on the event loop, at about 1-4 us each: a few ms at most. Every
# Produce and Fetch of a normal client holds far fewer; more goes to a worker thread.
INLINE_ENTRIES = 2000

# What one decoded array entry costs in memory, for the listener's queued-bytes budget:
# measured 237 B for the smallest (a Produce v9 topic entry: a dict and an empty list).
ENTRY_BYTES = 256

# a response frame for the socket, size prefix included: one buffer, or (a Fetch answer)
# buffers to write one after another (protocol.encode_response_parts)
Answer = bytes | list[bytes | bytearray | memoryview]


def answer_size(frame: Answer) -> int:
    """The bytes of a response frame, in one buffer or several."""
    if isinstance(frame, bytes):
        return len(frame)
    return sum(part.nbytes if isinstance(part, memoryview) else len(part) for part in frame)


class ConnectionClosing(Exception):
    """Kafka's answer to this request is to close the connection (the reason is logged)."""


class DecodedRequest(NamedTuple):
    """A request ready for its handler; ``body`` None means ApiVersions at a version the
    gateway does not serve (answered with v0 and UNSUPPORTED_VERSION, as Kafka does)."""

    header: protocol.RequestHeader
    body: dict[str, Any] | None
    entries: int  # array entries decoded: its memory is about entries * ENTRY_BYTES
    size: int = 0  # bytes of the frame (what a producer_byte_rate quota counts)


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
    return DecodedRequest(header, body, max_entries - budget.left, len(frame))


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


async def respond(
    context: KafkaContext,
    request: DecodedRequest,
    throttle_ms: int = 0,
    turn: ProduceTurn | OrderedTurn | None = None,
) -> Answer | None:
    """The response frame (size prefix included) to one decoded request, or None (acks=0).

    `throttle_ms`: what `charge_produce` gave this request (a Produce over its quota).
    `turn`: its place in its connection's line (request_order.py), given up however it ends."""
    header = request.header
    if request.body is None:
        return unsupported_api_versions(header.correlation_id)
    started = time.monotonic()
    try:
        return await _respond(context, request, throttle_ms, turn)
    finally:
        metrics.REQUEST_SECONDS.labels("kafka", api_name(header.api_key)).observe(
            time.monotonic() - started
        )


async def _respond(
    context: KafkaContext,
    request: DecodedRequest,
    throttle_ms: int,
    turn: ProduceTurn | OrderedTurn | None,
) -> Answer | None:
    header = request.header
    assert request.body is not None
    try:
        if isinstance(turn, OrderedTurn):
            await turn.wait()
        elif turn is not None:
            context = dataclasses.replace(context, produce_turn=turn)
        if header.api_key == ApiKey.API_VERSIONS:  # the same answer each time (table.py)
            metrics.REQUESTS.labels("kafka", api_name(header.api_key), "none").inc()
            return api_versions_frame(header.api_version, header.correlation_id)
        body = await API_TABLE[ApiKey(header.api_key)].handler(context, header, request.body)
    finally:
        if turn is not None:
            turn.close()
    metrics.REQUESTS.labels("kafka", api_name(header.api_key), "none").inc()
    if header.api_key == ApiKey.PRODUCE and body is not None:
        _count_rejected_batches(body)
        if throttle_ms:
            body["throttle_time_ms"] = max(body["throttle_time_ms"], throttle_ms)
    if header.api_key == ApiKey.FETCH and context.quotas is not None and body is not None:
        return _fetch_measured(context, context.quotas, header, body)
    if body is None:
        return None
    # a Fetch answer goes out as the stored batches are held (protocol.encode_response_parts)
    encode: Callable[[int, int, int, dict[str, Any]], Answer] = (
        protocol.encode_response_parts
        if header.api_key == ApiKey.FETCH
        else protocol.encode_response
    )
    if header.api_key != ApiKey.PRODUCE and _many_entries(body):
        # a big answer (Metadata of thousands of topics) is encoded off the event loop, as a
        # big request is decoded: the body is this task's alone
        return await asyncio.get_running_loop().run_in_executor(
            None, encode, header.api_key, header.api_version, header.correlation_id, body
        )
    return encode(header.api_key, header.api_version, header.correlation_id, body)


def _many_entries(body: dict[str, Any], limit: int = INLINE_ENTRIES) -> bool:
    """Whether the response's arrays hold more than ``limit`` entries (counted until the
    limit: cheap for the small answers nearly every request gets)."""
    left = limit
    stack: list[Any] = [body]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(v for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            left -= len(value)
            if left < 0:
                return True
            stack.extend(v for v in value if isinstance(v, (dict, list)))
    return False


def charge_produce(context: KafkaContext, request: DecodedRequest) -> int:
    """Count a Produce against the client's producer_byte_rate quota as it is read
    (docs/quotas.md); over it, the connection reads nothing more for the returned time
    (KIP-219's muted channel), and the response says so."""
    quotas = context.quotas
    if quotas is None or request.header.api_key != ApiKey.PRODUCE:
        return 0
    client_id = request.header.client_id or ""
    throttle = quotas.throttle_ms(PRODUCER_BYTE_RATE, context.access.user, client_id, request.size)
    if throttle:
        _mute(context, ApiKey.PRODUCE, throttle)
    return throttle


def _fetch_measured(
    context: KafkaContext, quotas: ClientQuotas, header: protocol.RequestHeader, body: dict
) -> Answer:
    """A Fetch response counted against the client's consumer_byte_rate quota; over it, it
    goes without its records (as Kafka sends a throttled Fetch: the client fetches them
    again after its back-off) and the connection is muted for the throttle time."""
    encoded = protocol.encode_response_parts(
        header.api_key, header.api_version, header.correlation_id, body
    )
    size = answer_size(encoded)
    user, client_id = context.access.user, header.client_id or ""
    throttle = quotas.throttle_ms(CONSUMER_BYTE_RATE, user, client_id, size)
    if not throttle:
        return encoded
    quotas.refund(CONSUMER_BYTE_RATE, user, client_id, size)  # not sent after all
    for topic in body["responses"]:
        for partition in topic["partitions"]:
            partition["records"] = b""
    body["throttle_time_ms"] = max(body["throttle_time_ms"], throttle)
    _mute(context, ApiKey.FETCH, throttle)
    return protocol.encode_response(header.api_key, header.api_version, header.correlation_id, body)


def _mute(context: KafkaContext, api: ApiKey, throttle_ms: int) -> None:
    metrics.THROTTLED.labels(api_name(api)).inc()
    if context.mute is not None:
        context.mute.extend(throttle_ms, asyncio.get_running_loop().time())


async def answer(
    context: KafkaContext, header: protocol.RequestHeader, frame: memoryview
) -> bytes | None:
    """`decode`, `charge_produce` and `respond`, as the listener runs them: one request frame
    to its response (tests and tools), in line behind the requests `answer` was given before
    on the context's connection (`context.order`), if it has one."""
    request = decode(header, frame, context.settings.max_request_entries)
    response = await respond(
        context, request, charge_produce(context, request), admit(context, request)
    )
    return response if response is None or isinstance(response, bytes) else b"".join(response)


def admit(context: KafkaContext, request: DecodedRequest) -> ProduceTurn | OrderedTurn | None:
    """The request's place in its connection's line; call in the order requests were read."""
    if context.order is None:
        return None
    return context.order.admit(request.header.api_key, request.body)


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


# Requests that change nothing, dropped unanswered when their client has gone: those whose
# work grows with what they name (the paced handlers of loop_turns.py) and Fetch
_READS = frozenset(
    {ApiKey.METADATA, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_CONFIGS}
)


def droppable(api_key: int, body: dict[str, Any] | None) -> bool:
    """Whether a request may be dropped unanswered once its client is gone: a read (a
    Metadata only when it may not create topics)."""
    if api_key not in _READS:
        return False
    return api_key != ApiKey.METADATA or not (body or {}).get("allow_auto_topic_creation", True)
