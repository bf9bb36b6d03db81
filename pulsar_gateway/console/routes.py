"""The console's HTTP answers: its static files and the JSON its pages read.

The management port (gateway/metrics.py) hands every request for `/` and `/console/...`
here with the caller it logged in (handlers/http_login.py). `GET /` is the page;
`/console/static/<file>` its script and style sheet (read once from the package; from disk
only the parity reports' own pages, `/console/reports/parity/<id>.html`, from the data
directory); `/console/api/...` the JSON: `me`, `overview`, `topics[/<name>[/messages]]`,
`groups[/<id>]`, `users`, `migrations`, `parity/<id>`, and `POST /console/api/actions`
for an administrator's actions. Every answer shows only what the caller may describe.

Rates are not kept here: `overview` gives the counters' totals with the time they were
read, and the page keeps the last hour of differences in its own memory, bounded."""

from __future__ import annotations

import importlib.resources
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pulsar_gateway.console.amqp_view import AmqpActions
from pulsar_gateway.console.kafka_view import ConsoleError, KafkaView, Viewer
from pulsar_gateway.console.migrations_view import MigrationsView
from pulsar_gateway.console.users_view import Accounts, UsersView
from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.memory import resident_bytes
from pulsar_gateway.security.rights import Rights

log = logging.getLogger("gateway.console")

STATIC_FILES = {
    "console.js": "text/javascript; charset=utf-8",
    "console-amqp.js": "text/javascript; charset=utf-8",
    "console-migrations.js": "text/javascript; charset=utf-8",
    "console-users.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
JSON_KIND = "application/json"
REPORTS = "/console/reports/parity/"  # a parity report's own HTML page: <id>.html
BUSIEST = 10

Json = Any
# (method, path, caller) -> (status, JSON): the management API (handlers/amqp/management.py)
Api = Callable[[str, str, Any], tuple[int, Json]]
Answer = tuple[int, str, bytes]


def _json(status: int, payload: Json) -> Answer:
    return status, JSON_KIND, json.dumps(payload).encode()


def _static(name: str) -> bytes:
    return importlib.resources.files("pulsar_gateway.console").joinpath("static", name).read_bytes()


def _counter_total(counter: Any) -> float:
    return sum(
        sample.value
        for family in counter.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    )


def _sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def _per_label(counter: Any, label: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                values[sample.labels[label]] = sample.value
    return values


def alarms(health: dict[str, Any]) -> list[str]:
    """What an operator must look at now, in words: the backend, the embedded broker's
    restarts, this cluster member's share, AMQP publishers held back (RabbitMQ's alarms
    block them the same way)."""
    found = []
    if not health.get("backend_reachable", True):
        found.append("the Pulsar backend is unreachable")
    elif not health.get("ok", True):
        found.append("not ready: see /health")
    restarts = health.get("broker_restarts") or 0
    if restarts:
        found.append(f"the embedded broker restarted {restarts} times")
    cluster = health.get("cluster")
    if isinstance(cluster, dict) and cluster.get("enabled") and not cluster.get("serving"):
        found.append("this cluster member is not serving its share")
    blocked = int(_sample("gateway_amqp_blocked_connections"))
    if blocked:
        found.append(f"{blocked} AMQP connections blocked: their publishes await the store")
    return found


class Console:
    """Answers the console's requests: `await console(method, path, caller, body)`."""

    def __init__(
        self,
        health: Callable[[], dict[str, Any]],
        kafka: KafkaView | None,
        api: Api | None,
        amqp: AmqpActions | None,
        user_names: Callable[[], Iterable[str]],
        rights_of: Callable[[str], Rights],
        table_users: Iterable[str],
        migrations: MigrationsView | None = None,
        accounts: Accounts | None = None,
    ) -> None:
        """`api`: the management API's handler, for the queues the overview names;
        `user_names` and `rights_of`: the users store and the authorizer; `table_users`:
        the bootstrap table `amqp.users`, administrators, named without their passwords;
        `migrations`: the migrate runs and parity reports in the data directory;
        `accounts`: the users store an administrator changes (None: read-only)."""
        self.health = health
        self.kafka = kafka
        self.api = api
        self.amqp = amqp
        self.accounts = UsersView(user_names, rights_of, table_users, accounts)
        self.migrations = migrations or MigrationsView(None)
        self.page = _static("index.html")
        self.files = {name: _static(name) for name in STATIC_FILES}

    async def __call__(self, method: str, target: str, caller: Viewer, body: bytes) -> Answer:
        parts = urllib.parse.urlsplit(target)
        path = parts.path
        query = urllib.parse.parse_qs(parts.query)
        try:
            if method == "POST" and path == "/console/api/actions":
                return _json(200, await self._action(caller, body))
            if method not in ("GET", "HEAD"):
                return _json(405, {"error": "method_not_allowed", "reason": "GET only here"})
            if path in ("/", ""):
                return 200, "text/html; charset=utf-8", self.page
            if path.startswith("/console/static/"):
                name = path.removeprefix("/console/static/")
                if name in self.files:
                    return 200, STATIC_FILES[name], self.files[name]
                return 404, "text/plain", b"not found\n"
            if path.startswith(REPORTS) and path.endswith(".html"):
                report_id = urllib.parse.unquote(path.removeprefix(REPORTS).removesuffix(".html"))
                page = self.migrations.parity_html(caller, report_id)
                return 200, "text/html; charset=utf-8", page
            if path.startswith("/console/api/"):
                words = [urllib.parse.unquote(w) for w in path.split("/")[3:]]
                return _json(200, await self._read(caller, words, query))
        except ConsoleError as exc:
            return _json(exc.status, {"error": "console", "reason": exc.reason})
        return 404, "text/plain", b"not found\n"

    # --- reads --------------------------------------------------------------------------

    async def _read(self, caller: Viewer, words: list[str], query: dict[str, list[str]]) -> Json:
        kafka = self.kafka
        match words:
            case ["me"]:
                return {
                    "user": caller.user,
                    "administrator": caller.administrator,
                    "may_monitor": bool(getattr(caller, "may_monitor", False)),
                    "kafka": kafka is not None,
                    "amqp": self.api is not None,
                    "topic_sizes": kafka is not None and kafka.sizes is not None,
                }
            case ["overview"]:
                return self.overview(caller)
            case ["users"]:
                return self.users(caller)
            case ["migrations"]:
                return self.migrations.overview(caller)
            case ["parity", report_id]:
                return self.migrations.parity_report(caller, report_id)
            case ["topics"] if kafka is not None:
                return await kafka.add_sizes(kafka.topics(caller))
            case ["topics", name] if kafka is not None:
                return await kafka.topic(caller, name)
            case ["topics", name, "messages"] if kafka is not None:
                return await kafka.messages(
                    caller,
                    name,
                    _int(query, "partition", 0),
                    _int(query, "offset", 0),
                    _int(query, "limit", 20),
                )
            case ["groups"] if kafka is not None:
                return kafka.groups(caller)
            case ["groups", group_id] if kafka is not None:
                return await kafka.group(caller, group_id)
        raise ConsoleError(404, "no such console resource")

    def overview(self, caller: Viewer) -> Json:
        """Counters' totals (the page turns them into rates), connections, memory, health,
        and the busiest topics and queues the caller may see."""
        topics: list[Json] = []
        totals = {"topics": 0, "groups": 0, "queues": 0}
        if self.kafka is not None:
            visible = self.kafka.visible_topic_names(caller)
            totals["topics"] = len(visible)
            totals["groups"] = len(self.kafka.group_ids(caller))
            records_in = _per_label(metrics.RECORDS_IN, "topic")
            records_out = _per_label(metrics.RECORDS_OUT, "topic")
            topics = [
                {
                    "name": n,
                    "records_in": records_in.get(n, 0),
                    "records_out": records_out.get(n, 0),
                }
                for n in visible
            ]
            topics.sort(key=lambda t: (-(t["records_in"] + t["records_out"]), t["name"]))
        queues: list[Json] = []
        if self.api is not None:
            status, rows = self.api("GET", "/api/queues", caller)
            queues = rows if status == 200 else []
            totals["queues"] = len(queues)
            queues = sorted(queues, key=lambda q: (-q["messages"], q["vhost"], q["name"]))
        connections = {
            protocol: _sample("gateway_open_connections", protocol=protocol)
            for protocol in ("kafka", "amqp")
        }
        health = self.health()
        return {
            "time": time.time(),
            "counters": {
                "kafka_records_in": _counter_total(metrics.RECORDS_IN),
                "kafka_records_out": _counter_total(metrics.RECORDS_OUT),
                "kafka_bytes_in": _counter_total(metrics.BYTES_IN),
                "kafka_bytes_out": _counter_total(metrics.BYTES_OUT),
                "amqp_messages_in": _sample("gateway_amqp_messages_total", direction="in"),
                "amqp_messages_out": _sample("gateway_amqp_messages_total", direction="out"),
            },
            "connections": connections,
            "resident_bytes": resident_bytes(),
            "health": health,
            "alarms": alarms(health),
            "totals": totals,
            "busiest_topics": topics[:BUSIEST],
            "busiest_queues": [
                {
                    "vhost": q["vhost"],
                    "name": q["name"],
                    "messages": q["messages"],
                    "consumers": q["consumers"],
                }
                for q in queues[:BUSIEST]
            ],
        }

    def users(self, caller: Viewer) -> Json:
        return self.accounts.listing(caller)

    # --- actions ------------------------------------------------------------------------

    async def _action(self, caller: Viewer, body: bytes) -> Json:
        """One administrator's action, named in the JSON body; rights are checked by the
        view that does it, and every action is logged with its user."""
        try:
            request = json.loads(body or b"{}")
        except ValueError as exc:
            raise ConsoleError(400, "the body is not JSON") from exc
        if not isinstance(request, dict):
            raise ConsoleError(400, "the body is a JSON object")
        action = str(request.get("action", ""))
        handler = self._actions().get(action)
        if handler is None:
            raise ConsoleError(400, f"no action '{action}' here")
        answer = await handler(caller, request)
        # the answer names what changed (never a password: no answer holds one)
        log.info("console: user '%s' did %s: %s", caller.user, action, json.dumps(answer)[:300])
        return answer

    def _actions(self) -> dict[str, Callable[[Viewer, dict[str, Any]], Awaitable[Json]]]:
        actions = self.accounts.actions()
        kafka, amqp = self.kafka, self.amqp
        if kafka is not None:
            actions["create_topic"] = lambda c, r: kafka.create_topic(
                c, _text(r, "topic"), _number(r, "partitions", 1)
            )
            actions["delete_topic"] = lambda c, r: kafka.delete_topic(c, _text(r, "topic"))
            actions["reset_offsets"] = lambda c, r: kafka.reset_offsets(
                c, _text(r, "group"), _text(r, "topic"), _text(r, "to"), _number(r, "timestamp", 0)
            )
        if amqp is not None:
            actions["purge_queue"] = lambda c, r: amqp.purge_queue(
                c, _text(r, "vhost"), _text(r, "queue")
            )
            actions["delete_queue"] = lambda c, r: amqp.delete_queue(
                c, _text(r, "vhost"), _text(r, "queue")
            )
            actions["close_connection"] = lambda c, r: amqp.close_connection(c, _text(r, "name"))
        return actions


def _text(request: dict[str, Any], key: str) -> str:
    value = request.get(key, "")
    if not isinstance(value, str) or len(value) > 1024:
        raise ConsoleError(400, f"'{key}' is a string of at most 1024 characters")
    return value


def _number(request: dict[str, Any], key: str, default: int) -> int:
    value = request.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConsoleError(400, f"'{key}' is a whole number")
    return value


def _int(query: dict[str, list[str]], key: str, default: int) -> int:
    try:
        return int(query.get(key, [str(default)])[0])
    except ValueError as exc:
        raise ConsoleError(400, f"'{key}' is a whole number") from exc
