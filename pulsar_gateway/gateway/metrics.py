"""Prometheus metrics and the health endpoint, on one loopback HTTP port.

`/metrics` is Prometheus text; `/health` answers 200 once every listener is up
and the backend is reachable, 503 otherwise, so orchestrators can gate traffic;
`/api/...` is the AMQP listener's RabbitMQ management API subset when it is on (GETs,
and a POST of definitions when an upload handler is wired);
`/cluster` is the cluster view: members, lease ages, who owns what (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger("gateway.metrics")

REGISTRY = CollectorRegistry()

CONNECTIONS = Gauge(
    "gateway_open_connections", "Open client connections", ["protocol"], registry=REGISTRY
)
CONNECTIONS_TOTAL = Counter(
    "gateway_connections_total", "Client connections accepted", ["protocol"], registry=REGISTRY
)
REQUESTS = Counter(
    "gateway_requests_total",
    "Requests handled, by API and error",
    ["protocol", "api", "error"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "gateway_request_seconds",
    "Time from a request being read to its answer being ready (waits for storage and the "
    "connection's earlier requests included), by API",
    ["protocol", "api"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
BYTES_IN = Counter(
    "gateway_bytes_in_total", "Record bytes in, per topic", ["topic"], registry=REGISTRY
)
BYTES_OUT = Counter(
    "gateway_bytes_out_total", "Record bytes out, per topic", ["topic"], registry=REGISTRY
)
RECORDS_IN = Counter(
    "gateway_records_in_total", "Records in, per topic", ["topic"], registry=REGISTRY
)
RECORDS_OUT = Counter(
    "gateway_records_out_total", "Records out, per topic", ["topic"], registry=REGISTRY
)
BAD_INPUT = Counter(
    "gateway_bad_input_total",
    "Malformed or refused frames",
    ["protocol", "reason"],
    registry=REGISTRY,
)
# outcome: success or failure; mechanism: the SASL mechanism (a closed set, "unknown" beyond)
AUTHENTICATIONS = Counter(
    "gateway_authentications_total",
    "Client authentication attempts, by protocol, mechanism and outcome",
    ["protocol", "mechanism", "outcome"],
    registry=REGISTRY,
)
AUTHORIZATION_DENIALS = Counter(
    "gateway_authorization_denials_total",
    "Operations refused by the authorizer (docs/security.md), by protocol, resource and operation",
    ["protocol", "resource", "operation"],
    registry=REGISTRY,
)
PRODUCE_REJECTED = Counter(
    "gateway_produce_rejected_total",
    "Produce partitions (record batches) refused and not stored, by Kafka error",
    ["error"],
    registry=REGISTRY,
)
THROTTLED = Counter(
    "gateway_kafka_throttled_total",
    "Produce and Fetch answers throttled for a client over its byte-rate quota (docs/quotas.md)",
    ["api"],
    registry=REGISTRY,
)
CONNECTIONS_REFUSED = Counter(
    "gateway_connections_refused_total",
    "Client connections refused at accept (max_connections, max_connections_per_ip)",
    ["protocol", "reason"],
    registry=REGISTRY,
)
QUEUED_REQUEST_BYTES = Gauge(
    "gateway_queued_request_bytes",
    "Request bytes read and not yet answered (frames plus decoded estimate)",
    ["protocol"],
    registry=REGISTRY,
)
OPEN_PARTITIONS = Gauge("gateway_open_partitions", "Partition logs open", registry=REGISTRY)
AMQP_PUBLISH_HELD_BYTES = Gauge(
    "gateway_amqp_publish_held_bytes",
    "Bytes AMQP connections hold of publishes not yet stored: bodies still arriving, "
    "open transactions, publishes awaiting the store",
    ["stage"],
    registry=REGISTRY,
)
AMQP_BLOCKED_CONNECTIONS = Gauge(
    "gateway_amqp_blocked_connections",
    "AMQP connections not read (connection.blocked) while their publishes await the store",
    registry=REGISTRY,
)
AMQP_HANDOFFS = Counter(
    "gateway_amqp_handoffs_total",
    "AMQP connections for a vhost another cluster member serves: handed_off, failed (the "
    "owner could not be reached), no_owner (nobody served it in time), closed_moved (closed "
    "with 320 because its vhost moved away)",
    ["outcome"],
    registry=REGISTRY,
)
METADATA_UNREADABLE = Gauge(
    "gateway_metadata_unreadable_records",
    "Records of the metadata log its last load skipped because they were not JSON",
    registry=REGISTRY,
)
CLUSTER_MEMBERS = Gauge(
    "gateway_cluster_members", "Live cluster members as this one sees them", registry=REGISTRY
)
CLUSTER_SERVING = Gauge(
    "gateway_cluster_serving",
    "1 while this member serves its share (joined, lease fresh, caught up)",
    registry=REGISTRY,
)
CLUSTER_FENCED = Gauge(
    "gateway_cluster_fenced",
    "Times this member found its own lease stale and stopped serving",
    registry=REGISTRY,
)
BACKEND_UP = Gauge(
    "gateway_backend_up", "1 when the Pulsar backend is reachable", registry=REGISTRY
)


_REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
}
# An upload is a definitions file: RabbitMQ's own default limit for one is far larger,
# but a topology this gateway serves fits easily; past it, 413 before reading the body.
MAX_UPLOAD_BYTES = 16 * 1024 * 1024
UPLOAD_SECONDS = 10.0
Upload = Callable[[str, str | None, bytes], Awaitable[tuple[int, object]]]


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        health: Callable[[], dict[str, object]],
        api: Callable[[str, str], tuple[int, object]] | None = None,
        cluster: Callable[[], dict[str, object]] | None = None,
        upload: Upload | None = None,
    ) -> None:
        """`api` answers `/api/...` requests (method, path) -> (status, JSON): the AMQP
        listener's RabbitMQ management API subset (handlers/amqp/management.py).
        `upload` answers a POST under `/api/` (path, Authorization header, body): the
        definitions import (tools/definitions_upload.py)."""
        self.host = host
        self.port = port
        self.health = health
        self.cluster = cluster
        self.api = api
        self.upload = upload
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics and health on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    async def _posted(
        self, request: bytes, path: str, reader: asyncio.StreamReader
    ) -> tuple[int, object]:
        """A POST's body, bounded by MAX_UPLOAD_BYTES and UPLOAD_SECONDS, handed to the
        upload handler."""
        assert self.upload is not None
        headers = _headers(request)
        try:
            length = int(headers.get("content-length", ""))
        except ValueError:
            return 411, {"error": "bad_request", "reason": "Content-Length is required"}
        if not 0 <= length <= MAX_UPLOAD_BYTES:
            reason = f"an upload is at most {MAX_UPLOAD_BYTES} bytes"
            return 413, {"error": "bad_request", "reason": reason}
        body = await asyncio.wait_for(reader.readexactly(length), UPLOAD_SECONDS)
        return await self.upload(path, headers.get("authorization"), body)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            path = request.split(b" ", 2)[1].decode(errors="replace")
            method = request.split(b" ", 1)[0].decode(errors="replace")
            if path.startswith("/metrics"):
                status, kind, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
            elif self.upload is not None and method == "POST" and path.startswith("/api/"):
                code, payload = await self._posted(request, path, reader)
                status = f"{code} {_REASONS.get(code, '')}".rstrip()
                kind = "application/json"
                body = b"" if code == 204 else json.dumps(payload).encode()
            elif self.api is not None and path.startswith("/api/"):
                code, payload = self.api(method, path)
                status = f"{code} {_REASONS.get(code, '')}".rstrip()
                kind, body = "application/json", json.dumps(payload).encode()
            elif self.cluster is not None and path.startswith("/cluster"):
                status, kind = "200 OK", "application/json"
                body = json.dumps(self.cluster()).encode()
            elif path.startswith("/health"):
                state = self.health()
                status = "200 OK" if state.get("ok") else "503 Service Unavailable"
                kind, body = "application/json", json.dumps(state).encode()
            else:
                status, kind, body = "404 Not Found", "text/plain", b"not found\n"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, IndexError):
            pass
        except ConnectionError:
            pass
        finally:
            writer.close()


def _headers(request: bytes) -> dict[str, str]:
    """An HTTP request head's header fields, names lower-cased."""
    fields = {}
    for line in request.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return fields
