"""`pulsar-gateway amqp import-definitions`: a RabbitMQ definitions export, declared on
a running gateway over AMQP (aiormq), all or nothing.

1. The file is checked as a whole: unknown sections and fields, plugin exchange types,
   policies and parameters the gateway cannot apply, and every declare and bind
   replayed on an in-memory topology with the gateway's own rules (handlers/amqp), so
   one run lists every problem.
2. Binding ends the file does not declare are looked up on the gateway (passive).
3. Everything is declared; what this run created is remembered, and on any failure it
   is deleted again, so a refused import leaves the gateway as it was.
Users, permissions and cluster parameters are reported as skipped: the gateway's users
live in conf/gateway.toml.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiormq
from rich.console import Console

from pulsar_gateway.handlers.amqp.errors import AmqpError
from pulsar_gateway.handlers.amqp.topology import (
    DestinationKind,
    Exchange,
    ExchangeType,
    Queue,
    Topology,
)
from pulsar_gateway.handlers.amqp.topology_rules import check_bind, declare_exchange, declare_queue

SKIPPED_SECTIONS = ("users", "permissions", "topic_permissions", "global_parameters")
VERSION_FIELDS = ("rabbit_version", "rabbitmq_version", "product_name", "product_version")
REFUSED_IF_PRESENT = {
    "policies": "policies are not applied by the gateway; put their settings in queue arguments",
    "parameters": "runtime parameters (shovels, federation) are not supported",
}
EXCHANGE_FIELDS = {"name", "vhost", "type", "durable", "auto_delete", "internal", "arguments"}
QUEUE_FIELDS = {"name", "vhost", "durable", "auto_delete", "arguments", "type"}
BINDING_FIELDS = {"source", "vhost", "destination", "destination_type", "routing_key", "arguments"}
IMPORTER = "import-definitions"


class DefinitionsError(Exception):
    """Nothing was imported; the message lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(f"  - {p}" for p in problems))
        self.problems = problems


@dataclass
class VhostPlan:
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    queues: list[dict[str, Any]] = field(default_factory=list)
    bindings: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Plan:
    vhosts: dict[str, VhostPlan] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)


def load(path: Path) -> Plan:
    """Parse and check the export; DefinitionsError lists everything wrong with it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DefinitionsError([f"{path}: {exc}"]) from exc
    return check(data, str(path))


def load_upload(body: bytes, vhost: str | None) -> Plan:
    """An export uploaded to the management API (`POST /api/definitions[/{vhost}]`). With
    a vhost in the path RabbitMQ loads every queue, exchange and binding into that vhost,
    whatever vhost the file names, so this does the same."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise DefinitionsError([f"the upload is not JSON: {exc}"]) from exc
    if vhost is not None and isinstance(data, dict):
        data["vhosts"] = [{"name": vhost}]
        for section in ("exchanges", "queues", "bindings"):
            for item in data.get(section) or []:
                if isinstance(item, dict):
                    item["vhost"] = vhost
    return check(data, "the upload")


def check(data: object, source: str) -> Plan:
    """Check a parsed export as a whole (every problem listed at once) and plan it."""
    if not isinstance(data, dict):
        raise DefinitionsError([f"{source}: not a RabbitMQ definitions object"])
    problems: list[str] = []
    plan = Plan()
    known = {*SKIPPED_SECTIONS, *VERSION_FIELDS, *REFUSED_IF_PRESENT, "vhosts", "queues"}
    known |= {"exchanges", "bindings"}
    for key in sorted(set(data) - known):
        problems.append(f"unknown section '{key}'")
    for key, why in REFUSED_IF_PRESENT.items():
        for item in data.get(key) or []:
            name = item.get("name", "?") if isinstance(item, dict) else "?"
            problems.append(f"{key[:-1]} '{name}': {why}")
    for key in SKIPPED_SECTIONS:
        if data.get(key):
            plan.skipped[key] = len(data[key])
    for item in data.get("vhosts") or []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            problems.append(f"vhost entry {item!r}: needs a name")
            continue
        plan.vhosts.setdefault(item["name"], VhostPlan())
    for section, fields, required in (
        ("exchanges", EXCHANGE_FIELDS, ("name", "vhost", "type")),
        ("queues", QUEUE_FIELDS, ("name", "vhost")),
        ("bindings", BINDING_FIELDS, ("source", "vhost", "destination", "destination_type")),
    ):
        for item in data.get(section) or []:
            what = _describe(section, item)
            if not isinstance(item, dict):
                problems.append(f"{what}: not an object")
                continue
            extra = sorted(set(item) - fields)
            if extra:
                problems.append(f"{what}: unknown fields {', '.join(extra)}")
            missing = [name for name in required if not isinstance(item.get(name), str)]
            if missing:
                problems.append(f"{what}: needs {', '.join(missing)}")
                continue
            if not isinstance(item.get("arguments") or {}, dict):
                problems.append(f"{what}: arguments must be an object")
                continue
            if item["vhost"] not in plan.vhosts:
                problems.append(f"{what}: vhost '{item['vhost']}' is not in the vhosts section")
                continue
            getattr(plan.vhosts[item["vhost"]], section).append(item)
    for vhost, vplan in plan.vhosts.items():
        problems += _replay(vhost, vplan, external=set())
    if problems:
        raise DefinitionsError(problems)
    return plan


def _describe(section: str, item: Any) -> str:
    if not isinstance(item, dict):
        return f"{section[:-1]} {item!r}"
    where = f" in vhost '{item.get('vhost')}'"
    if section == "bindings":
        return (
            f"binding '{item.get('source')}' -> {item.get('destination_type')} "
            f"'{item.get('destination')}'{where}"
        )
    return f"{section[:-1]} '{item.get('name')}'{where}"


def _replay(vhost: str, plan: VhostPlan, external: set[tuple[str, str]]) -> list[str]:
    """Every declare and bind on a scratch topology, by the gateway's own rules.
    `external`: (kind, name) that exist on the gateway though the file lacks them."""
    problems = []
    topology = Topology(vhost)
    for kind, name in external:
        if kind == "exchange":
            topology.add_exchange(Exchange(name, ExchangeType.DIRECT))
        else:
            topology.add_queue(Queue(name))
    for item in plan.exchanges:
        if item["name"] in topology.exchanges and item["name"].startswith("amq."):
            continue  # predeclared: RabbitMQ exports list them only when changed
        try:
            exchange, _ = declare_exchange(
                topology,
                item["name"],
                item["type"],
                durable=bool(item.get("durable", True)),
                auto_delete=bool(item.get("auto_delete", False)),
                internal=bool(item.get("internal", False)),
                arguments=item.get("arguments") or {},
            )
            topology.add_exchange(exchange)
        except AmqpError as exc:
            problems.append(f"{_describe('exchanges', item)}: {exc.reply_text}")
    for item in plan.queues:
        arguments = dict(item.get("arguments") or {})
        try:
            queue, _ = declare_queue(
                topology,
                item["name"],
                durable=bool(item.get("durable", True)),
                auto_delete=bool(item.get("auto_delete", False)),
                arguments=arguments,
                connection_id=IMPORTER,
            )
            topology.add_queue(queue)
        except AmqpError as exc:
            problems.append(f"{_describe('queues', item)}: {exc.reply_text}")
    for item in plan.bindings:
        try:
            kind = DestinationKind(item["destination_type"])
            binding = check_bind(
                topology,
                item["source"],
                item["destination"],
                kind,
                item.get("routing_key", ""),
                item.get("arguments") or {},
                connection_id=IMPORTER,
            )
            topology.add_binding(binding)
        except ValueError:
            problems.append(f"{_describe('bindings', item)}: unknown destination_type")
        except AmqpError as exc:
            problems.append(f"{_describe('bindings', item)}: {exc.reply_text}")
    return problems


def _vhost_url(base: str, vhost: str) -> str:
    parts = urllib.parse.urlsplit(base)
    path = "/" + urllib.parse.quote(vhost, safe="")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class _Session:
    """One connection per vhost; a fresh channel after every refusal."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.connection: Any = None
        self.channel: Any = None

    async def open(self) -> None:
        self.connection = await aiormq.connect(self.url)
        self.channel = await self.connection.channel()

    async def ensure_channel(self) -> Any:
        if self.channel is None or self.channel.is_closed:
            self.channel = await self.connection.channel()
        return self.channel

    async def exists(self, kind: str, name: str) -> bool:
        channel = await self.ensure_channel()
        try:
            if kind == "exchange":
                await channel.exchange_declare(name, passive=True)
            else:
                await channel.queue_declare(name, passive=True)
            return True
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False

    async def close(self) -> None:
        if self.connection is not None:
            await self.connection.close()


@dataclass
class _Created:
    session: _Session
    exchanges: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)


async def import_definitions(path: Path, url: str, console: Console | None = None) -> str:
    return await import_plan(load(path), url, console)


async def import_plan(plan: Plan, url: str, console: Console | None = None) -> str:
    """Declare a checked plan on the gateway at `url`, all or nothing; what was done."""
    console = console or Console(stderr=True)
    sessions: dict[str, _Session] = {}
    created: list[_Created] = []
    try:
        problems = []
        for vhost, vplan in plan.vhosts.items():
            session = sessions[vhost] = _Session(_vhost_url(url, vhost))
            try:
                await session.open()
            except Exception as exc:  # noqa: BLE001 - refused vhost, bad credentials...
                problems.append(f"vhost '{vhost}': cannot connect: {exc}")
                continue
            external = await _external_ends(session, vplan)
            problems += _replay(vhost, vplan, external)
        if problems:
            raise DefinitionsError(problems)
        counts = {"vhosts": len(plan.vhosts), "exchanges": 0, "queues": 0, "bindings": 0}
        with console.status("declaring"):
            for vhost, vplan in plan.vhosts.items():
                done = _Created(sessions[vhost])
                created.append(done)
                await _apply(done, vplan, counts)
    except DefinitionsError:
        await _roll_back(created)
        raise
    except Exception as exc:  # noqa: BLE001 - whatever failed, undo
        await _roll_back(created)
        raise DefinitionsError([f"the gateway refused: {exc}"]) from exc
    finally:
        for session in sessions.values():
            try:
                await session.close()
            except Exception:  # noqa: BLE001, S110 - closing after a refusal
                pass
    skipped = ", ".join(f"{n} {k}" for k, n in plan.skipped.items())
    text = (
        f"imported {counts['vhosts']} vhosts, {counts['exchanges']} exchanges, "
        f"{counts['queues']} queues, {counts['bindings']} bindings"
    )
    return text + (f" (skipped: {skipped})" if skipped else "")


async def _external_ends(session: _Session, plan: VhostPlan) -> set[tuple[str, str]]:
    declared = {("exchange", e["name"]) for e in plan.exchanges}
    declared |= {("queue", q["name"]) for q in plan.queues}
    wanted = set()
    for item in plan.bindings:
        wanted.add(("exchange", item["source"]))
        wanted.add((item["destination_type"], item["destination"]))
    found = set()
    for kind, name in sorted(wanted - declared):
        if kind in ("exchange", "queue") and name and await session.exists(kind, name):
            found.add((kind, name))
    return found


async def _apply(done: _Created, plan: VhostPlan, counts: dict[str, int]) -> None:
    session = done.session
    for item in plan.exchanges:
        name = item["name"]
        if name.startswith("amq."):
            continue
        existed = await session.exists("exchange", name)
        channel = await session.ensure_channel()
        await channel.exchange_declare(
            name,
            exchange_type=item["type"],
            durable=bool(item.get("durable", True)),
            auto_delete=bool(item.get("auto_delete", False)),
            internal=bool(item.get("internal", False)),
            arguments=item.get("arguments") or {},
        )
        if not existed:
            done.exchanges.append(name)
        counts["exchanges"] += 1
    for item in plan.queues:
        name = item["name"]
        existed = await session.exists("queue", name)
        channel = await session.ensure_channel()
        await channel.queue_declare(
            name,
            durable=bool(item.get("durable", True)),
            auto_delete=bool(item.get("auto_delete", False)),
            arguments=item.get("arguments") or {},
        )
        if not existed:
            done.queues.append(name)
        counts["queues"] += 1
    for item in plan.bindings:
        channel = await session.ensure_channel()
        if item["destination_type"] == "queue":
            await channel.queue_bind(
                item["destination"],
                item["source"],
                item.get("routing_key", ""),
                arguments=item.get("arguments") or {},
            )
        else:
            await channel.exchange_bind(
                item["destination"],
                item["source"],
                item.get("routing_key", ""),
                arguments=item.get("arguments") or {},
            )
        counts["bindings"] += 1


async def _roll_back(created: list[_Created]) -> None:
    """Delete what this run created; their bindings go with them. A binding between
    things that existed before stays: it may have existed before too."""
    for done in reversed(created):
        try:
            channel = await done.session.ensure_channel()
            for name in reversed(done.queues):
                await channel.queue_delete(name)
            for name in reversed(done.exchanges):
                await channel.exchange_delete(name)
        except Exception:  # noqa: BLE001, S110 - best effort; the error is reported
            pass
