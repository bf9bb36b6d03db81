"""The read-only subset of RabbitMQ's management HTTP API that monitoring tools read.

`GET /api/overview`, `/api/vhosts[/{vhost}]`, `/api/queues[/{vhost}[/{name}]]`,
`/api/exchanges[/{vhost}[/{name}]]`, `/api/bindings[/{vhost}]`,
`/api/definitions[/{vhost}]` (an export), `/api/connections[/{name}[/channels]]` and
`/api/channels` answer with the JSON fields RabbitMQ's management plugin gives (the ones
Celery Flower, Prometheus exporters and `rabbitmqadmin list` read), from this process's
`AmqpBroker`: the vhosts some connection has opened since the gateway started, their
topology, their queue engines' counts and counters (`message_stats`: totals since the
queue's engine started here, queue_stats.py; no rates: a reader works them out from two
readings), and the listener's connections with their channels. Names in the path are
percent-encoded as in RabbitMQ (`%2F` is the vhost `/`). Nothing is changed through it:
other methods get 405, except a
POST of definitions, which the composition root routes to tools/definitions_upload.py.

`ManagementApi` is the pure part (method, path and caller in, status and JSON out); the
metrics HTTP server (gateway/metrics.py) serves it under `/api/`, on its port, to callers
that logged in with HTTP Basic (handlers/http_login.py). As on AMQP, a caller sees only the
vhosts it has some right on (an administrator: every one), and only an administrator sees
other users' connections and any connection's client properties (which may carry tokens);
a vhost it may not see is answered 404, as one that does not exist.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.topology import DEFAULT_EXCHANGE, DestinationKind, Queue
from pulsar_gateway.handlers.amqp.vhost_state import VhostState

# What tools read to pick their code paths (Flower and rabbitmqadmin check the version).
RABBITMQ_VERSION = "3.13.0"
PRODUCT_NAME = "Pulsar Gateway"
NODE_NAME = "pulsar-gateway@localhost"

Json = Any
_EXCHANGE_FIELDS = ("name", "vhost", "type", "durable", "auto_delete", "internal", "arguments")


@dataclass(frozen=True)
class ChannelSummary:
    """One open channel of a connection, as `/api/channels` shows it."""

    number: int
    prefetch: int  # basic.qos for consumers created from now on
    global_prefetch: int
    unacked: int
    consumers: int
    confirm: bool
    transactional: bool
    flow: bool  # channel.flow lets deliveries go


@dataclass(frozen=True)
class ConnectionSummary:
    """One open AMQP connection as `/api/connections` shows it (the listener makes these)."""

    peer_host: str
    peer_port: int
    host: str
    port: int
    user: str | None
    vhost: str | None
    channels: int
    blocked: bool
    tls: bool
    connected_at_ms: int
    client_properties: Mapping[str, Any] = field(default_factory=dict)
    channel_list: tuple[ChannelSummary, ...] = ()

    @property
    def name(self) -> str:
        """RabbitMQ's connection name: "peer:port -> host:port"."""
        return f"{self.peer_host}:{self.peer_port} -> {self.host}:{self.port}"


class Viewer(Protocol):
    """Who asks (handlers/http_login.py's HttpCaller)."""

    user: str

    @property
    def administrator(self) -> bool: ...

    def may_see_namespace(self, namespace: str) -> bool: ...


class ManagementApi:
    """Answers the API's GET requests from the broker's in-memory state and, for
    `/api/connections`, the listener's open connections."""

    def __init__(
        self,
        broker: AmqpBroker,
        connections: Callable[[], Iterable[ConnectionSummary]] = tuple,
        vhost_namespace: Callable[[str], str] = str,
    ) -> None:
        """`vhost_namespace` maps a vhost onto the namespace its rights are kept on (the
        store's mapping, as the AMQP listener's)."""
        self.broker = broker
        self.connections = connections
        self.vhost_namespace = vhost_namespace

    def handle(self, method: str, target: str, caller: Viewer) -> tuple[int, Json]:
        """(HTTP status, JSON body) for one request; `target` is the request path."""
        return _Request(self, caller).handle(method, target)


class _Request:
    """One request's view: the API's state as `caller` may see it."""

    def __init__(self, api: ManagementApi, caller: Viewer) -> None:
        self.broker = api.broker
        self.api = api
        self.caller = caller

    def _visible(self, vhost: str) -> bool:
        return self.caller.administrator or self.caller.may_see_namespace(
            self.api.vhost_namespace(vhost)
        )

    def _connections(self) -> list[ConnectionSummary]:
        """The open connections the caller may see: an administrator every one, a user its own."""
        administrator = self.caller.administrator
        found = [c for c in self.api.connections() if administrator or c.user == self.caller.user]
        return sorted(found, key=lambda c: c.name)

    def _connection_rows(self) -> list[Json]:
        administrator = self.caller.administrator
        return [_connection_row(c, with_properties=administrator) for c in self._connections()]

    def handle(self, method: str, target: str) -> tuple[int, Json]:
        path = urllib.parse.urlsplit(target).path
        parts = [urllib.parse.unquote(p) for p in path.split("/")[1:]]
        if not parts or parts[0] != "api":
            return 404, {"error": "Object Not Found", "reason": "Not Found"}
        if method not in ("GET", "HEAD"):
            return 405, {"error": "Method Not Allowed", "reason": "this API is read-only"}
        resource, args = (parts[1] if len(parts) > 1 else ""), parts[2:]
        if path.endswith("/") and args and args[-1] == "":
            args = args[:-1]
        if resource == "overview" and not args:
            return 200, self.overview()
        if resource == "channels" and not args:
            return 200, [row for c in self._connections() for row in _channel_rows(c)]
        if resource == "connections" and (len(args) <= 1 or args[1:] == ["channels"]):
            if not args:
                return 200, self._connection_rows()
            found = [c for c in self._connections() if c.name == args[0]]
            if not found:
                return 404, {"error": "Object Not Found", "reason": "Not Found"}
            if args[1:]:
                return 200, _channel_rows(found[0])
            return 200, _connection_row(found[0], with_properties=self.caller.administrator)
        if resource == "definitions" and len(args) <= 1:
            vhost = args[0] if args else None
            if vhost is not None and not self._known(vhost):
                return 404, {"error": "Object Not Found", "reason": "Not Found"}
            return 200, self.definitions(vhost)
        listing = {
            "vhosts": (self._vhost_rows, 1),
            "queues": (self._queue_rows, 2),
            "exchanges": (self._exchange_rows, 2),
            "bindings": (self._binding_rows, 1),
        }.get(resource)
        if listing is None or len(args) > listing[1]:
            return 404, {"error": "Object Not Found", "reason": "Not Found"}
        rows_of, depth = listing
        vhost = args[0] if args else None
        if vhost is not None and not self._known(vhost):
            return 404, {"error": "Object Not Found", "reason": "Not Found"}
        rows = list(rows_of(self._vhosts(vhost)))
        if len(args) == depth and resource in ("queues", "exchanges", "vhosts"):
            wanted = args[-1]
            found = [row for row in rows if row["name"] == wanted]
            if not found:
                return 404, {"error": "Object Not Found", "reason": "Not Found"}
            return 200, found[0]
        return 200, rows

    def _known(self, vhost: str) -> bool:
        """Open here and visible to the caller (a vhost it may not see does not exist)."""
        return vhost in self.broker.vhosts and self._visible(vhost)

    def _vhosts(self, name: str | None) -> list[VhostState]:
        states = sorted(self.broker.vhosts.values(), key=lambda v: v.name)
        return [v for v in states if (name is None or v.name == name) and self._visible(v.name)]

    # --- resources ---------------------------------------------------------------------

    def overview(self) -> Json:
        queues = [row for row in self._queue_rows(self._vhosts(None))]
        exchanges = list(self._exchange_rows(self._vhosts(None)))
        return {
            "management_version": RABBITMQ_VERSION,
            "rabbitmq_version": RABBITMQ_VERSION,
            "product_name": PRODUCT_NAME,
            "product_version": RABBITMQ_VERSION,
            "cluster_name": NODE_NAME,
            "node": NODE_NAME,
            "object_totals": {
                "queues": len(queues),
                "exchanges": len(exchanges),
                "consumers": sum(q["consumers"] for q in queues),
            },
            "queue_totals": _totals(queues),
            "message_stats": {},
            "listeners": [],
            "contexts": [],
        }

    def definitions(self, vhost: str | None) -> Json:
        """A RabbitMQ definitions export of the topology (`GET /api/definitions`), which
        `pulsar-gateway amqp import-definitions` and RabbitMQ itself can load: durable and
        transient queues that are not exclusive, the exchanges a client declared (not the
        default or `amq.*` ones), and the bindings between them. Users and permissions
        live in the gateway's users store, not here, so those sections are empty."""
        states = self._vhosts(vhost)
        queues = [
            {key: row[key] for key in ("name", "vhost", "durable", "auto_delete", "arguments")}
            for row in self._queue_rows(states)
            if not row["exclusive"]
        ]
        exchanges = [
            {key: row[key] for key in _EXCHANGE_FIELDS}
            for row in self._exchange_rows(states)
            if row["name"] and not row["name"].startswith("amq.")
        ]
        bindings = [
            {key: value for key, value in row.items() if key != "properties_key"}
            for row in self._binding_rows(states)
            if row["source"]
        ]
        return {
            "rabbit_version": RABBITMQ_VERSION,
            "rabbitmq_version": RABBITMQ_VERSION,
            "product_name": PRODUCT_NAME,
            "product_version": RABBITMQ_VERSION,
            "users": [],
            "vhosts": [{"name": state.name} for state in states],
            "permissions": [],
            "topic_permissions": [],
            "parameters": [],
            "global_parameters": [],
            "policies": [],
            "queues": queues,
            "exchanges": exchanges,
            "bindings": bindings,
        }

    def _vhost_rows(self, vhosts: Iterable[VhostState]) -> Iterable[Json]:
        for vhost in vhosts:
            totals = _totals(self._queue_rows([vhost]))
            yield {"name": vhost.name, "tracing": False, "description": "", "tags": [], **totals}

    def _queue_rows(self, vhosts: Iterable[VhostState]) -> Iterable[Json]:
        for vhost in vhosts:
            for name in sorted(vhost.topology.queues):
                yield _queue_row(vhost, vhost.topology.queues[name])

    def _exchange_rows(self, vhosts: Iterable[VhostState]) -> Iterable[Json]:
        for vhost in vhosts:
            exchanges = vhost.topology.exchanges
            for name in sorted(exchanges):
                exchange = exchanges[name]
                yield {
                    "name": exchange.name,
                    "vhost": vhost.name,
                    "type": str(exchange.type),
                    "durable": exchange.durable,
                    "auto_delete": exchange.auto_delete,
                    "internal": exchange.internal,
                    "arguments": _json_table(exchange.arguments),
                    "user_who_performed_action": "",
                }

    def _binding_rows(self, vhosts: Iterable[VhostState]) -> Iterable[Json]:
        """Every binding, the default exchange's implicit one per queue first, as
        RabbitMQ lists them."""
        for vhost in vhosts:
            for name in sorted(vhost.topology.queues):
                yield _binding_row(vhost.name, DEFAULT_EXCHANGE, name, "queue", name, {})
            for binding in sorted(vhost.topology.bindings(), key=_binding_order):
                kind = "queue" if binding.destination_kind is DestinationKind.QUEUE else "exchange"
                yield _binding_row(
                    vhost.name,
                    binding.source,
                    binding.destination,
                    kind,
                    binding.routing_key,
                    binding.arguments,
                )


def _connection_row(connection: ConnectionSummary, with_properties: bool) -> Json:
    properties = connection.client_properties if with_properties else {}
    return {
        "name": connection.name,
        "node": NODE_NAME,
        "type": "network",
        "protocol": "AMQP 0-9-1",
        "user": connection.user,
        "vhost": connection.vhost,
        "state": "blocked" if connection.blocked else "running",
        "channels": connection.channels,
        "peer_host": connection.peer_host,
        "peer_port": connection.peer_port,
        "host": connection.host,
        "port": connection.port,
        "ssl": connection.tls,
        "connected_at": connection.connected_at_ms,
        "client_properties": _json_table(properties),
    }


def _channel_rows(connection: ConnectionSummary) -> list[Json]:
    return [
        {
            "name": f"{connection.name} ({channel.number})",
            "node": NODE_NAME,
            "number": channel.number,
            "user": connection.user,
            "vhost": connection.vhost,
            "connection_details": {
                "name": connection.name,
                "peer_host": connection.peer_host,
                "peer_port": connection.peer_port,
            },
            "prefetch_count": channel.prefetch,
            "global_prefetch_count": channel.global_prefetch,
            "messages_unacknowledged": channel.unacked,
            "consumer_count": channel.consumers,
            "confirm": channel.confirm,
            "transactional": channel.transactional,
            "state": "running" if channel.flow else "flow",
        }
        for channel in connection.channel_list
    ]


def _queue_row(vhost: VhostState, queue: Queue) -> Json:
    engine = vhost.engines.get(queue.name)
    ready = engine.message_count if engine is not None else 0
    unacked = engine.outstanding if engine is not None else 0
    consumers = engine.consumer_count if engine is not None else 0
    return {
        "name": queue.name,
        "vhost": vhost.name,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive,
        "arguments": _json_table(queue.arguments),
        "type": "classic",
        "state": "running",
        "node": NODE_NAME,
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "consumers": consumers,
        "policy": None,
        "message_stats": engine.stats.to_json() if engine is not None else {},
    }


def _binding_row(
    vhost: str,
    source: str,
    destination: str,
    kind: str,
    routing_key: str,
    arguments: Mapping[str, Any],
) -> Json:
    return {
        "source": source,
        "vhost": vhost,
        "destination": destination,
        "destination_type": kind,
        "routing_key": routing_key,
        "arguments": _json_table(arguments),
        # what the API's binding URLs take; RabbitMQ's "~" for no key and no arguments
        "properties_key": urllib.parse.quote(routing_key, safe="") or "~",
    }


def _binding_order(binding: Any) -> tuple[str, str, str]:
    return (binding.source, binding.destination, binding.routing_key)


def _totals(queues: Iterable[Json]) -> Json:
    rows = list(queues)
    return {
        "messages": sum(q["messages"] for q in rows),
        "messages_ready": sum(q["messages_ready"] for q in rows),
        "messages_unacknowledged": sum(q["messages_unacknowledged"] for q in rows),
    }


def _json_table(table: Mapping[str, Any] | None) -> Json:
    """An AMQP field table as the management API shows it (bytes as text, decimals and
    timestamps as numbers and strings)."""
    return {str(k): _json_value(v) for k, v in (table or {}).items()}


def _json_value(value: Any) -> Json:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return _json_table(value)
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.replace(tzinfo=datetime.UTC).timestamp())
    return value
