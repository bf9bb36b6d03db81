"""The RabbitMQ management API subset (handlers/amqp/management.py) over an in-memory
store: the fields tools read, per resource, and the HTTP listener around it."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from pamqp import commands

from harness.amqp_memory_store import MemoryStore
from harness.amqp_peer import open_peer
from pulsar_gateway.gateway.metrics import MetricsServer
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.connection_broker import ConnectionBroker
from pulsar_gateway.handlers.amqp.events import ConnectionOpened
from pulsar_gateway.handlers.amqp.management import (
    ChannelSummary,
    ConnectionSummary,
    ManagementApi,
)
from pulsar_gateway.tools.amqp_definitions import load


@dataclass(frozen=True)
class Viewer:
    """A caller of the API (handlers/http_login.py's HttpCaller, without a login)."""

    user: str = "admin"
    administrator: bool = True
    namespaces: frozenset[str] = frozenset()
    may_monitor: bool = True

    def may_see_namespace(self, namespace: str) -> bool:
        return namespace in self.namespaces


ADMIN = Viewer()


async def _broker_with_topology() -> tuple[AmqpBroker, ConnectionBroker]:
    """Vhost "/" with a fanout exchange "logs" bound to durable queue "q" (with
    x-max-length), and a consumer on "q"."""
    peer = open_peer()
    broker = AmqpBroker(MemoryStore())
    handler = ConnectionBroker(broker, peer.conn, lambda: None, lambda: 0, lambda: None)
    await handler.handle([e for e in peer.events if isinstance(e, ConnectionOpened)])
    steps = [
        commands.Channel.Open(),
        commands.Exchange.Declare(exchange="logs", exchange_type="fanout"),
        commands.Queue.Declare(queue="q", durable=True, arguments={"x-max-length": 5}),
        commands.Queue.Bind(queue="q", exchange="logs", routing_key="k"),
        commands.Basic.Consume(queue="q", consumer_tag="c1"),
    ]
    for step in steps:
        await handler.handle(peer.send(step, channel=1))
    return broker, handler


def test_queues_exchanges_bindings_vhosts_and_overview() -> None:
    async def scenario() -> None:
        broker, handler = await _broker_with_topology()
        api = ManagementApi(broker)
        status, queues = api.handle("GET", "/api/queues", ADMIN)
        assert status == 200
        assert [
            (q["name"], q["vhost"], q["durable"], q["consumers"], q["messages"], q["arguments"])
            for q in queues
        ] == [("q", "/", True, 1, 0, {"x-max-length": 5})]
        assert api.handle("GET", "/api/queues/%2F/q", ADMIN)[1]["name"] == "q"
        assert api.handle("GET", "/api/queues/%2F/missing", ADMIN)[0] == 404
        assert api.handle("GET", "/api/queues/nope", ADMIN)[0] == 404
        status, exchanges = api.handle("GET", "/api/exchanges/%2F", ADMIN)
        logs = [x for x in exchanges if x["name"] == "logs"]
        assert logs == [
            {
                "name": "logs",
                "vhost": "/",
                "type": "fanout",
                "durable": False,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
                "user_who_performed_action": "",
            }
        ]
        assert {"amq.direct", "amq.topic"} <= {x["name"] for x in exchanges}
        status, bindings = api.handle("GET", "/api/bindings", ADMIN)
        assert [
            (b["source"], b["destination"], b["destination_type"], b["routing_key"])
            for b in bindings
        ] == [("", "q", "queue", "q"), ("logs", "q", "queue", "k")]
        assert api.handle("GET", "/api/vhosts", ADMIN)[1][0]["name"] == "/"
        overview = api.handle("GET", "/api/overview", ADMIN)[1]
        assert overview["object_totals"]["queues"] == 1
        assert overview["object_totals"]["consumers"] == 1
        assert overview["queue_totals"]["messages"] == 0
        assert api.handle("DELETE", "/api/queues/%2F/q", ADMIN)[0] == 405
        assert api.handle("GET", "/api/nothing", ADMIN)[0] == 404
        await handler.connection_closed()
        await broker.close()

    asyncio.run(scenario())


def test_the_metrics_http_server_serves_it_as_json() -> None:
    async def scenario() -> None:
        broker, handler = await _broker_with_topology()

        async def login(authorization: str | None, peer_host: str) -> Viewer | None:
            good = "Basic " + base64.b64encode(b"admin:pw").decode()
            return ADMIN if authorization == good and peer_host == "127.0.0.1" else None

        api = ManagementApi(broker).handle
        server = MetricsServer("127.0.0.1", 0, lambda: {"ok": True}, api, login=login)
        await server.start()
        url = f"http://127.0.0.1:{server.port}/api/queues/%2F"

        def fetch(credentials: bytes | None) -> tuple[int, str, object]:
            request = urllib.request.Request(url)
            if credentials:
                request.add_header(
                    "Authorization", "Basic " + base64.b64encode(credentials).decode()
                )
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    kind = response.headers["Content-Type"]
                    return response.status, kind, json.loads(response.read())
            except urllib.error.HTTPError as refused:
                return refused.code, refused.headers["WWW-Authenticate"], None

        status, kind, body = await asyncio.to_thread(fetch, b"admin:pw")
        assert (status, kind) == (200, "application/json")
        assert [q["name"] for q in body] == ["q"]  # type: ignore[union-attr]
        for credentials in (None, b"admin:wrong"):
            refused = await asyncio.to_thread(fetch, credentials)
            assert refused == (401, 'Basic realm="pulsar-gateway"', None)
        await server.stop()
        await handler.connection_closed()
        await broker.close()

    asyncio.run(scenario())


def test_definitions_export_loads_back_as_an_import(tmp_path) -> None:
    """GET /api/definitions is a RabbitMQ export that the gateway's own importer (and so
    RabbitMQ's format checks it mirrors) accepts: the client's exchange, the durable queue
    with its arguments and the binding between them; no default or amq.* exchange."""

    async def scenario() -> None:
        broker, _handler = await _broker_with_topology()
        api = ManagementApi(broker)
        status, exported = api.handle("GET", "/api/definitions", ADMIN)
        assert status == 200
        assert [(x["name"], x["type"]) for x in exported["exchanges"]] == [("logs", "fanout")]
        assert [(q["name"], q["arguments"]) for q in exported["queues"]] == [
            ("q", {"x-max-length": 5})
        ]
        assert [
            (b["source"], b["destination"], b["routing_key"]) for b in exported["bindings"]
        ] == [("logs", "q", "k")]
        assert api.handle("GET", "/api/definitions/%2F", ADMIN)[1] == exported
        assert api.handle("GET", "/api/definitions/nope", ADMIN)[0] == 404
        path = tmp_path / "export.json"
        path.write_text(json.dumps(exported))
        plan = load(path)
        assert list(plan.vhosts) == ["/"]
        assert [q["name"] for q in plan.vhosts["/"].queues] == ["q"]
        assert [b["destination"] for b in plan.vhosts["/"].bindings] == ["q"]

    asyncio.run(scenario())


def test_a_caller_sees_only_the_vhosts_it_has_rights_on_and_its_own_connections() -> None:
    """As on AMQP (issue 33): a caller without rights on the vhost's namespace sees nothing
    of it (404, as a vhost that does not exist); only an administrator sees other users'
    connections and client properties."""

    async def scenario() -> None:
        broker, handler = await _broker_with_topology()
        summaries = [
            ConnectionSummary(
                "127.0.0.1", port, "127.0.0.1", 5672, user, "/", 1, False, False, 0,
                {"product": "client", "token": "s3cr3t"},
            )
            for port, user in ((1001, "guest"), (1002, "bob"))
        ]  # fmt: skip
        api = ManagementApi(broker, lambda: summaries, vhost_namespace=lambda v: f"public{v}")
        bob = Viewer(user="bob", administrator=False)
        assert api.handle("GET", "/api/queues", bob) == (200, [])
        assert api.handle("GET", "/api/vhosts", bob) == (200, [])
        assert api.handle("GET", "/api/queues/%2F", bob)[0] == 404
        assert api.handle("GET", "/api/queues/%2F/q", bob)[0] == 404
        assert api.handle("GET", "/api/definitions/%2F", bob)[0] == 404
        assert api.handle("GET", "/api/definitions", bob)[1]["queues"] == []
        assert api.handle("GET", "/api/overview", bob)[1]["object_totals"]["queues"] == 0
        status, rows = api.handle("GET", "/api/connections", bob)
        assert [(r["user"], r["client_properties"]) for r in rows] == [("bob", {})]
        guests = urllib.parse.quote(summaries[0].name, safe="")
        assert api.handle("GET", f"/api/connections/{guests}", bob)[0] == 404
        # with a right on the vhost's namespace (public/ for "/"), its topology shows
        granted = Viewer(user="bob", administrator=False, namespaces=frozenset({"public/"}))
        assert [q["name"] for q in api.handle("GET", "/api/queues/%2F", granted)[1]] == ["q"]
        status, rows = api.handle("GET", "/api/connections", ADMIN)
        assert [r["client_properties"]["token"] for r in rows] == ["s3cr3t", "s3cr3t"]
        await handler.connection_closed()
        await broker.close()

    asyncio.run(scenario())


def test_channels_per_connection_for_whom_may_see_the_connection() -> None:
    """`/api/channels` and `/api/connections/{name}/channels`: prefetch, unacked,
    consumers, confirm and tx per channel, of the connections the caller may see."""

    async def scenario() -> None:
        broker, handler = await _broker_with_topology()
        channels = (
            ChannelSummary(1, 10, 0, 3, 1, True, False, True),
            ChannelSummary(2, 0, 50, 0, 0, False, True, False),
        )
        summaries = [
            ConnectionSummary(
                "127.0.0.1", port, "127.0.0.1", 5672, user, "/", 2, False, False, 0, {},
                channels,
            )
            for port, user in ((1001, "guest"), (1002, "bob"))
        ]  # fmt: skip
        api = ManagementApi(broker, lambda: summaries)
        status, rows = api.handle("GET", "/api/channels", ADMIN)
        assert status == 200 and len(rows) == 4
        first = rows[0]
        assert first["name"] == f"{summaries[0].name} (1)"
        assert first["connection_details"]["name"] == summaries[0].name
        assert (
            first["prefetch_count"],
            first["messages_unacknowledged"],
            first["consumer_count"],
            first["confirm"],
            first["state"],
        ) == (10, 3, 1, True, "running")
        assert (rows[1]["global_prefetch_count"], rows[1]["transactional"]) == (50, True)
        assert rows[1]["state"] == "flow"
        bob = Viewer(user="bob", administrator=False)
        mine = api.handle("GET", "/api/channels", bob)[1]
        assert {r["user"] for r in mine} == {"bob"} and len(mine) == 2
        guests = urllib.parse.quote(summaries[0].name, safe="")
        assert len(api.handle("GET", f"/api/connections/{guests}/channels", ADMIN)[1]) == 2
        assert api.handle("GET", f"/api/connections/{guests}/channels", bob)[0] == 404
        assert api.handle("GET", f"/api/connections/{guests}/other", ADMIN)[0] == 404
        # the queue's counters, zero before any traffic
        queue = api.handle("GET", "/api/queues/%2F/q", ADMIN)[1]
        assert queue["message_stats"] == {"publish": 0, "deliver_get": 0, "ack": 0}
        await handler.connection_closed()
        await broker.close()

    asyncio.run(scenario())
