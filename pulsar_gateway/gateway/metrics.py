"""Prometheus metrics and the health endpoint, on one HTTP port (loopback by default).

`/metrics` is Prometheus text; `/health` answers 200 once every listener is up
and the backend is reachable, 503 otherwise, so orchestrators can gate traffic;
`/api/...` is the AMQP listener's RabbitMQ management API subset when it is on (GETs,
and a POST of definitions when an upload handler is wired);
`/cluster` is the cluster view: members, lease ages, who owns what (docs/cluster.md);
`/` and `/console/...` are the web console (console/), when the composition root wires one.

`/health` and `/metrics` answer anyone (`/metrics` asks for a login with
`metrics.require_login`); the rest asks for HTTP Basic credentials, checked by the login
the composition root wires in (handlers/http_login.py; docs/security.md, "The management
port"): 401 with a Basic challenge without them, 403 for a caller who may not see it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

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
SHARE_ENTRIES = Counter(
    "gateway_share_entries_total",
    "Pulsar entries of share groups the broker dispatches, by what became of them: handed "
    "to the gateway, settled (acknowledged on the subscription), given back to the broker",
    ["outcome"],
    registry=REGISTRY,
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
HEAP_TRIMS = Counter(
    "gateway_heap_trims_total",
    "Free heap handed back to the system (gateway/memory.py), by when: idle or busy",
    ["when"],
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
AMQP_MESSAGES = Counter(
    "gateway_amqp_messages_total",
    "AMQP messages published to the gateway (in) and delivered or got from it (out)",
    ["direction"],
    registry=REGISTRY,
)
AMQP_MESSAGES_IN = AMQP_MESSAGES.labels("in")  # bound once: counted on the hot path
AMQP_MESSAGES_OUT = AMQP_MESSAGES.labels("out")
BACKEND_UP = Gauge(
    "gateway_backend_up", "1 when the Pulsar backend is reachable", registry=REGISTRY
)


_REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
# An upload is a definitions file: RabbitMQ's own default limit for one is far larger,
# but a topology this gateway serves fits easily; past it, 413 before reading the body.
MAX_UPLOAD_BYTES = 16 * 1024 * 1024
UPLOAD_SECONDS = 10.0
# A request's line and headers: at most this many bytes (431 beyond), within this long
# (closed, unanswered, after it); an answer must be taken by the client within
# ANSWER_SECONDS. Browsers and scrapers send a few hundred bytes at once and read at once.
MAX_HEAD_BYTES = 16 * 1024
HEAD_SECONDS = 5.0
ANSWER_SECONDS = 10.0
REALM = 'Basic realm="pulsar-gateway"'
_LOGIN_FAILED = {"error": "not_authorized", "reason": "Login failed"}
_NOT_ALLOWED = {"error": "not_authorized", "reason": "Not administrator"}


class Caller(Protocol):
    """Who called, as the composition root's login (handlers/http_login.py) found out;
    the API and the upload get it as it is."""

    @property
    def may_monitor(self) -> bool:
        """May read every tenant's names: `/metrics` (when it asks for a login), `/cluster`."""
        ...


# (Authorization header, the caller's address) -> the caller, or None: refused
Login = Callable[[str | None, str], Awaitable[Caller | None]]
# (method, path, caller) -> (status, JSON)
Api = Callable[[str, str, Any], tuple[int, object]]
# (path, caller, Authorization header, body) -> (status, JSON)
Upload = Callable[[str, Any, str | None, bytes], Awaitable[tuple[int, object]]]
# (method, path, caller, body) -> (status, content type, body): the web console
Console = Callable[[str, str, Any, bytes], Awaitable[tuple[int, str, bytes]]]
# A console action's body is a small JSON object; nothing more is read.
MAX_CONSOLE_BODY = 64 * 1024
# The console's pages run only the console's own script, load nothing from elsewhere
# and are framed by nobody.
CONSOLE_HEADERS = (
    "Content-Security-Policy: default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'\r\nX-Content-Type-Options: nosniff\r\n"
    "Cache-Control: no-store\r\n"
)
# A parity report's own page (`/console/reports/...`, written by the parity tool) styles
# itself inline and runs nothing: it may use its inline style sheet, and no more.
REPORT_HEADERS = (
    "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; "
    "img-src data:; frame-ancestors 'none'; sandbox\r\n"
    "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n"
)


@dataclass(frozen=True)
class _Answer:
    status: int
    kind: str
    body: bytes
    challenge: bool = False  # 401: ask for Basic credentials
    headers: str = ""  # extra header lines, each ending in CRLF


def _json(status: int, payload: object) -> _Answer:
    body = b"" if status == 204 else json.dumps(payload).encode()
    return _Answer(status, "application/json", body, challenge=status == 401)


class TlsAcceptor(Protocol):
    """A TLS listener that counts a socket in before its handshake (the composition root
    gives handlers/tls_accept.py's): `admit` on the raw socket, `serve` once its
    handshake is done, `release` when the handshake fails."""

    sockets: list[socket.socket]

    async def open(self, host: str, port: int) -> None: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


# (handshake deadline, admit, serve, release, stream buffer limit) -> the listener
TlsListen = Callable[
    [
        float,
        Callable[[socket.socket, Any], str | None],
        Callable[[asyncio.StreamReader, asyncio.StreamWriter, str], Awaitable[None]],
        Callable[[str], None],
        int,
    ],
    TlsAcceptor,
]


class MetricsServer:
    """The management port: `/health` and `/metrics` for anyone (`/metrics` behind a login
    with `require_login`), `/api/...` and `/cluster` for a caller `login` accepts; without
    a `login`, only the public two are served."""

    def __init__(
        self,
        host: str,
        port: int,
        health: Callable[[], dict[str, object]],
        api: Api | None = None,
        cluster: Callable[[], dict[str, object]] | None = None,
        upload: Upload | None = None,
        login: Login | None = None,
        require_login: bool = False,
        console: Console | None = None,
        max_connections: int = 256,
        max_connections_per_ip: int = 16,
        tls: TlsListen | None = None,
    ) -> None:
        """`api` answers `/api/...` requests: the AMQP listener's RabbitMQ management API
        subset (handlers/amqp/management.py). `upload` answers a POST under `/api/`: the
        definitions import (tools/definitions_upload.py). `login` checks an HTTP Basic
        Authorization header against the gateway's users (handlers/http_login.py);
        `require_login` puts `/metrics` behind it too. `console` answers `/` and
        `/console/...` (console/routes.py), behind the same login. `max_connections` in
        all and `max_connections_per_ip` from one address: beyond them a connection is
        closed at once, so one host's silent sockets cannot take the port (and /health
        with it) from the orchestrator and the scrapers. `tls`: the port speaks HTTPS only
        (metrics.tls_cert_file) through the listener it builds, which applies those limits
        at accept, before the handshake (within the head's deadline): a socket that never
        finishes one is counted like one that never sends its head."""
        self.host = host
        self.port = port
        self.health = health
        self.cluster = cluster
        self.api = api
        self.upload = upload
        self.login = login
        self.require_login = require_login
        self.console = console
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.head_seconds = HEAD_SECONDS
        self.tls = tls
        self._open: dict[str, int] = {}  # connections per peer address
        self._refusals_logged = 0.0  # when a refusal was last logged
        self._server: asyncio.base_events.Server | TlsAcceptor | None = None

    async def start(self) -> None:
        if self.tls is None:
            self._server = await asyncio.start_server(
                self._serve, self.host, self.port, limit=MAX_HEAD_BYTES
            )
        else:
            self._server = self.tls(
                self.head_seconds,
                self._admit_socket,
                self._serve_admitted,
                self._release,
                MAX_HEAD_BYTES,
            )
            await self._server.open(self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        scheme = "https" if self.tls is not None else "http"
        log.info("metrics and health on %s://%s:%d", scheme, self.host, self.port)

    async def stop(self) -> None:
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    async def _posted(
        self, headers: dict[str, str], path: str, caller: Any, reader: asyncio.StreamReader
    ) -> _Answer:
        """A POST's body, bounded by MAX_UPLOAD_BYTES and UPLOAD_SECONDS, handed to the
        upload handler."""
        assert self.upload is not None
        try:
            length = int(headers.get("content-length", ""))
        except ValueError:
            return _json(411, {"error": "bad_request", "reason": "Content-Length is required"})
        if not 0 <= length <= MAX_UPLOAD_BYTES:
            reason = f"an upload is at most {MAX_UPLOAD_BYTES} bytes"
            return _json(413, {"error": "bad_request", "reason": reason})
        body = await asyncio.wait_for(reader.readexactly(length), UPLOAD_SECONDS)
        return _json(*await self.upload(path, caller, headers.get("authorization"), body))

    async def _console(
        self,
        method: str,
        path: str,
        caller: Any,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
    ) -> _Answer:
        """A console page, file or JSON; a POST's small body read within UPLOAD_SECONDS."""
        assert self.console is not None
        body = b""
        if method == "POST":
            try:
                length = int(headers.get("content-length", ""))
            except ValueError:
                return _json(411, {"error": "bad_request", "reason": "Content-Length is required"})
            if not 0 <= length <= MAX_CONSOLE_BODY:
                return _json(413, {"error": "bad_request", "reason": "body too large"})
            # a browser sends this header only from the console's own script: a form on
            # another site cannot make the logged-in browser act (no CORS is answered)
            if headers.get("x-console") != "1":
                return _json(403, {"error": "forbidden", "reason": "X-Console header missing"})
            body = await asyncio.wait_for(reader.readexactly(length), UPLOAD_SECONDS)
        status, kind, content = await self.console(method, path, caller, body)
        extra = REPORT_HEADERS if path.startswith("/console/reports/") else CONSOLE_HEADERS
        return _Answer(status, kind, content, challenge=status == 401, headers=extra)

    def _public(self, route: str) -> _Answer | None:
        """The answer for a path anyone may read; None when the path needs a caller."""
        if route == "/health":
            state = self.health()
            return _json(200 if state.get("ok") else 503, state)
        if route == "/metrics" and not self.require_login:
            return _Answer(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY))
        return None

    def _protected(self, route: str) -> bool:
        """Whether the path is served here, behind a login."""
        return (
            route == "/metrics"
            or (route == "/cluster" and self.cluster is not None)
            or (self.console is not None and (route == "/" or route.startswith("/console/")))
            or (route.startswith("/api/") and (self.api is not None or self.upload is not None))
        )

    async def _answer(
        self, request: bytes, reader: asyncio.StreamReader, peer_host: str
    ) -> _Answer:
        method = request.split(b" ", 1)[0].decode(errors="replace")
        path = request.split(b" ", 2)[1].decode(errors="replace")
        route = urllib.parse.urlsplit(path).path
        if not route.startswith("/api/"):
            route = route.rstrip("/") or "/"
        public = self._public(route)
        if public is not None:
            return public
        if not self._protected(route):
            return _Answer(404, "text/plain", b"not found\n")
        headers = _headers(request)
        caller = None
        if self.login is not None:
            caller = await self.login(headers.get("authorization"), peer_host)
        if caller is None:
            return _json(401, _LOGIN_FAILED)
        if route in ("/metrics", "/cluster"):
            if not caller.may_monitor:
                return _json(403, _NOT_ALLOWED)
            if route == "/metrics":
                return _Answer(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY))
            assert self.cluster is not None
            return _json(200, self.cluster())
        if route == "/" or route.startswith("/console/"):
            return await self._console(method, path, caller, headers, reader)
        if method == "POST" and self.upload is not None:
            return await self._posted(headers, path, caller, reader)
        if self.api is None:
            return _json(405, {"error": "Method Not Allowed", "reason": "only uploads here"})
        return _json(*self.api(method, path, caller))

    def _admit(self, peer_host: str) -> str | None:
        """Count the connection in; or the limit it is over (it is then closed)."""
        if sum(self._open.values()) >= self.max_connections:
            return "max_connections"
        if self._open.get(peer_host, 0) >= self.max_connections_per_ip:
            return "max_connections_per_ip"
        self._open[peer_host] = self._open.get(peer_host, 0) + 1
        return None

    def _admit_socket(self, sock: socket.socket, peer: Any) -> str | None:
        """A TLS socket counted in before its handshake: its address, or None when it is
        over a limit (closed at once)."""
        peer_host = _host(peer)
        refused = self._admit(peer_host)
        if refused is None:
            return peer_host
        self._refuse(peer_host, refused)
        sock.close()
        return None

    def _release(self, peer_host: str) -> None:
        left = self._open.pop(peer_host, 1) - 1
        if left > 0:
            self._open[peer_host] = left

    def _refuse(self, peer_host: str, setting: str) -> None:
        CONNECTIONS_REFUSED.labels("http", setting).inc()
        now = asyncio.get_running_loop().time()
        if now - self._refusals_logged >= 10:  # a flood logs a line per 10 s, not per socket
            self._refusals_logged = now
            log.warning(
                "refusing management port connections from %s (metrics.%s)", peer_host, setting
            )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_host = _host(writer.get_extra_info("peername"))
        refused = self._admit(peer_host)
        if refused is not None:
            self._refuse(peer_host, refused)
            writer.close()
            return
        await self._serve_admitted(reader, writer, peer_host)

    async def _serve_admitted(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer_host: str
    ) -> None:
        """One request and its answer, on a connection counted in (released at the end)."""
        try:
            try:
                head = reader.readuntil(b"\r\n\r\n")
                request = await asyncio.wait_for(head, self.head_seconds)
            except asyncio.LimitOverrunError:
                reason = f"a request's line and headers are at most {MAX_HEAD_BYTES} bytes"
                answer = _json(431, {"error": "bad_request", "reason": reason})
            else:
                answer = await self._answer(request, reader, peer_host)
            status = f"{answer.status} {_REASONS.get(answer.status, '')}".rstrip()
            challenge = f"WWW-Authenticate: {REALM}\r\n" if answer.challenge else ""
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {answer.kind}\r\n"
                f"Content-Length: {len(answer.body)}\r\n{challenge}{answer.headers}"
                "Connection: close\r\n\r\n".encode()
                + answer.body
            )
            await asyncio.wait_for(writer.drain(), ANSWER_SECONDS)
        except (asyncio.IncompleteReadError, TimeoutError, IndexError):
            writer.transport.abort()  # a half-sent request or an answer left unread
        except ConnectionError:
            pass
        finally:
            writer.close()
            self._release(peer_host)


def _host(peer: Any) -> str:
    """The address of a socket's peer (a host and port tuple, or something else)."""
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def _headers(request: bytes) -> dict[str, str]:
    """An HTTP request head's header fields, names lower-cased."""
    fields = {}
    for line in request.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return fields
