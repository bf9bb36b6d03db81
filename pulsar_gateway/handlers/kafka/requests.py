"""One Kafka request in, its response bytes out: sans-I/O, so tests drive it without a socket.

The listener (server.py) splits frames and parses headers; this decodes the body, looks the
API up in the one table (apis/table.py), runs its handler on the context and encodes the
answer. What Kafka answers by dropping the connection raises `ConnectionClosing`.
"""

from __future__ import annotations

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.kafka.apis.table import (
    API_TABLE,
    unsupported_api_versions,
    versions_of,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey


class ConnectionClosing(Exception):
    """Kafka's answer to this request is to close the connection (the reason is logged)."""


def api_name(api_key: int) -> str:
    """A metric label: the API's name, or one shared label for every unknown key."""
    return protocol.API_NAMES.get(api_key, "unknown")


async def answer(
    context: KafkaContext, header: protocol.RequestHeader, frame: memoryview
) -> bytes | None:
    """The response frame (size prefix included) to one request, or None (acks=0)."""
    name = api_name(header.api_key)
    low, high = versions_of(header.api_key)
    if not low <= header.api_version <= high:
        metrics.REQUESTS.labels("kafka", name, "UNSUPPORTED_VERSION").inc()
        if header.api_key == ApiKey.API_VERSIONS:
            return unsupported_api_versions(header.correlation_id)
        metrics.BAD_INPUT.labels("kafka", "unsupported").inc()
        raise ConnectionClosing(
            f"unsupported API {name} (key {header.api_key}) v{header.api_version}"
        )
    try:
        request = protocol.decode_request(
            header.api_key, header.api_version, frame[header.body_offset :]
        )
    except protocol.KafkaDecodeError as exc:
        metrics.BAD_INPUT.labels("kafka", "body").inc()
        raise ConnectionClosing(f"bad {name} v{header.api_version} body: {exc}") from None
    body = await API_TABLE[ApiKey(header.api_key)].handler(context, header, request)
    metrics.REQUESTS.labels("kafka", name, "none").inc()
    if body is None:
        return None
    return protocol.encode_response(header.api_key, header.api_version, header.correlation_id, body)
