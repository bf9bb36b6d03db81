"""ApiVersions: the first request of every client.

The body carries no tagged fields: librdkafka 2.0.2 (kcat in Debian) fails with
"Read underflow" on tagged fields it does not expect in a v3 response.
"""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.apis.versions import API_VERSIONS, served_versions
from pulsar_gateway.kafka_codec import errors, protocol


async def handle(context: Any, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    return {"error_code": errors.NONE, "api_keys": served_versions(), "throttle_time_ms": 0}


def unsupported_version(correlation_id: int) -> bytes:
    """Kafka answers an ApiVersions version it does not know with v0 and its own list."""
    return protocol.encode_response(
        API_VERSIONS,
        0,
        correlation_id,
        {"error_code": errors.UNSUPPORTED_VERSION, "api_keys": served_versions()},
    )
