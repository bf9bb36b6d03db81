"""Exchanges, queues and bindings of one vhost, and RabbitMQ's declare rules.

The dataclasses are plain data: the metadata store persists them and the
router reads them. `Topology` is the in-memory snapshot of one vhost, kept
indexed for routing. The `declare_*` / `check_*` functions are pure: they
answer what RabbitMQ 3.10 would answer (the entity to create, or an
`AmqpError` with RabbitMQ's reply code and text) and never change anything;
the broker layer persists and then applies the result.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar, cast

from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.field_values import (
    describe,
    erlang_term,
    frozen,
    is_string,
    type_name,
)
from pulsar_gateway.handlers.amqp.queue_arguments import (
    QUEUE_TYPES,
    argument_errors,
    equivalence_errors,
)
from pulsar_gateway.handlers.amqp.queue_arguments import queue_type as _queue_type

_T = TypeVar("_T")
DEFAULT_EXCHANGE = ""
RESERVED_PREFIX = "amq."
X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")


class ExchangeType(StrEnum):
    """The built-in types; plugin types (x-delayed-message...) are refused with 503."""

    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"


class DestinationKind(StrEnum):
    """A binding ends at a queue, or at an exchange (exchange-to-exchange)."""

    QUEUE = "queue"
    EXCHANGE = "exchange"


@dataclass(frozen=True, slots=True)
class Exchange:
    """An exchange; metadata only, nothing of it lives in Pulsar topics."""

    name: str
    type: ExchangeType
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)

    @property
    def alternate_exchange(self) -> str | None:
        value = self.arguments.get("alternate-exchange")
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue; on Pulsar, one topic with one durable Shared subscription.

    `exclusive_owner` is the id of the connection that owns an exclusive
    queue (None for shared queues).
    """

    name: str
    durable: bool = True
    exclusive_owner: str | None = None
    auto_delete: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def queue_type(self) -> str:
        return _queue_type(self.arguments)

    # Typed views of the arguments the broker layer acts on (None when unset).

    @property
    def message_ttl(self) -> int | None:
        return self._int("x-message-ttl")

    @property
    def expires(self) -> int | None:
        return self._int("x-expires")

    @property
    def max_length(self) -> int | None:
        return self._int("x-max-length")

    @property
    def max_length_bytes(self) -> int | None:
        return self._int("x-max-length-bytes")

    @property
    def overflow(self) -> str:
        return self._text("x-overflow") or "drop-head"

    @property
    def dead_letter_exchange(self) -> str | None:
        return self._text("x-dead-letter-exchange")

    @property
    def dead_letter_routing_key(self) -> str | None:
        return self._text("x-dead-letter-routing-key")

    @property
    def single_active_consumer(self) -> bool:
        return self.arguments.get("x-single-active-consumer") is True

    def _int(self, name: str) -> int | None:
        value = self.arguments.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def _text(self, name: str) -> str | None:
        value = self.arguments.get(name)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Binding:
    """A route from an exchange to a queue or exchange, with key and arguments."""

    source: str
    destination: str
    destination_kind: DestinationKind
    routing_key: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Hashable:
        """Identity as RabbitMQ sees it: same ends, key and (typed) arguments."""
        return (
            self.source,
            self.destination_kind,
            self.destination,
            self.routing_key,
            frozen(self.arguments),
        )


def predeclared_exchanges() -> list[Exchange]:
    """What every vhost has from birth (RabbitMQ's list minus amq.rabbitmq.trace)."""
    return [
        Exchange(DEFAULT_EXCHANGE, ExchangeType.DIRECT),
        Exchange("amq.direct", ExchangeType.DIRECT),
        Exchange("amq.fanout", ExchangeType.FANOUT),
        Exchange("amq.topic", ExchangeType.TOPIC),
        Exchange("amq.headers", ExchangeType.HEADERS),
        Exchange("amq.match", ExchangeType.HEADERS),
    ]


class Topology:
    """The exchanges, queues and bindings of one vhost, indexed for routing.

    Mutators keep RabbitMQ's cascades: deleting a queue or exchange drops its
    bindings, and an auto-delete exchange goes when its last binding as a
    source goes.
    """

    def __init__(
        self,
        vhost: str,
        exchanges: Iterable[Exchange] = (),
        queues: Iterable[Queue] = (),
        bindings: Iterable[Binding] = (),
    ) -> None:
        """A snapshot from stored records; the predeclared exchanges are always in."""
        self.vhost = vhost
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        self._by_source: dict[str, dict[Hashable, Binding]] = {}
        self._by_source_key: dict[tuple[str, str], dict[Hashable, Binding]] = {}
        self._derived: dict[str, dict[str, object]] = {}
        for exchange in (*predeclared_exchanges(), *exchanges):
            self.add_exchange(exchange)
        for queue in queues:
            self.add_queue(queue)
        for binding in bindings:
            self.add_binding(binding)

    # --- reading ----------------------------------------------------------------------

    def bindings(self) -> Iterator[Binding]:
        for bindings in self._by_source.values():
            yield from bindings.values()

    def bindings_from(self, exchange: str) -> Iterable[Binding]:
        return self._by_source.get(exchange, {}).values()

    def bindings_from_with_key(self, exchange: str, routing_key: str) -> Iterable[Binding]:
        """Bindings of `exchange` whose key is exactly `routing_key` (direct routing)."""
        return self._by_source_key.get((exchange, routing_key), {}).values()

    def bindings_to(self, kind: DestinationKind, name: str) -> list[Binding]:
        return [b for b in self.bindings() if b.destination_kind is kind and b.destination == name]

    def has_binding(self, binding: Binding) -> bool:
        return binding.key in self._by_source.get(binding.source, {})

    def derived(self, source: str, name: str, build: Callable[[], _T]) -> _T:
        """A value computed from `source`'s bindings (a routing index), kept
        until those bindings change."""
        cache = self._derived.setdefault(source, {})
        if name not in cache:
            cache[name] = build()
        return cast(_T, cache[name])

    # --- changing ---------------------------------------------------------------------

    def add_exchange(self, exchange: Exchange) -> None:
        self.exchanges[exchange.name] = exchange

    def add_queue(self, queue: Queue) -> None:
        self.queues[queue.name] = queue

    def add_binding(self, binding: Binding) -> bool:
        """Add a binding; False when an identical one already exists."""
        by_source = self._by_source.setdefault(binding.source, {})
        if binding.key in by_source:
            return False
        by_source[binding.key] = binding
        self._derived.pop(binding.source, None)
        self._by_source_key.setdefault((binding.source, binding.routing_key), {})[binding.key] = (
            binding
        )
        return True

    def remove_binding(self, binding: Binding) -> list[str]:
        """Remove a binding; returns the auto-delete exchanges that went with it."""
        if not self._drop_binding(binding):
            return []
        return self._auto_delete({binding.source})

    def remove_queue(self, name: str) -> list[str]:
        """Remove a queue and its bindings; returns auto-deleted exchanges."""
        if self.queues.pop(name, None) is None:
            return []
        sources = {b.source for b in self._drop_bindings_to(DestinationKind.QUEUE, name)}
        return self._auto_delete(sources)

    def remove_exchange(self, name: str) -> list[str]:
        """Remove an exchange and every binding from or to it; returns it and
        the auto-delete exchanges that went with it."""
        if self.exchanges.pop(name, None) is None:
            return []
        for binding in list(self.bindings_from(name)):
            self._drop_binding(binding)
        sources = {b.source for b in self._drop_bindings_to(DestinationKind.EXCHANGE, name)}
        return [name, *self._auto_delete(sources)]

    def _drop_binding(self, binding: Binding) -> bool:
        by_source = self._by_source.get(binding.source)
        if not by_source or by_source.pop(binding.key, None) is None:
            return False
        self._derived.pop(binding.source, None)
        if not by_source:
            del self._by_source[binding.source]
        index_key = (binding.source, binding.routing_key)
        by_key = self._by_source_key[index_key]
        del by_key[binding.key]
        if not by_key:
            del self._by_source_key[index_key]
        return True

    def _drop_bindings_to(self, kind: DestinationKind, name: str) -> list[Binding]:
        dropped = self.bindings_to(kind, name)
        for binding in dropped:
            self._drop_binding(binding)
        return dropped

    def _auto_delete(self, sources: set[str]) -> list[str]:
        deleted: list[str] = []
        for source in sorted(sources):
            exchange = self.exchanges.get(source)
            if exchange is not None and exchange.auto_delete and source not in self._by_source:
                deleted.extend(self.remove_exchange(source))
        return deleted


# --- RabbitMQ's rules for declare, bind and delete ---------------------------------------


def resource(kind: str, name: str, vhost: str) -> str:
    """rabbit_misc:rs/1: "queue 'q' in vhost '/'"."""
    return f"{kind} '{name}' in vhost '{vhost}'"


def not_found(kind: str, name: str, vhost: str) -> AmqpError:
    """RabbitMQ's 404 for a missing entity: "no queue 'q' in vhost '/'"."""
    return AmqpError(ReplyCode.NOT_FOUND, f"no {resource(kind, name, vhost)}")


def server_generated_name() -> str:
    """ "amq.gen-" and 16 random octets in URL-safe base64, like RabbitMQ."""
    return "amq.gen-" + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")


def strip_name(name: str) -> str:
    """RabbitMQ silently drops CR and LF from entity names."""
    return name.replace("\r", "").replace("\n", "")


def _inequivalent(field_name: str, what: str, received: str, current: str) -> AmqpError:
    return AmqpError(
        ReplyCode.PRECONDITION_FAILED,
        f"inequivalent arg '{field_name}' for {what}: received {received} but current is {current}",
    )


def _flag(value: bool) -> str:
    return "'true'" if value else "'false'"


def _reserved(kind: str, name: str) -> AmqpError:
    return AmqpError(
        ReplyCode.ACCESS_REFUSED, f"{kind} name '{name}' contains reserved prefix 'amq.*'"
    )


def _default_exchange_refused() -> AmqpError:
    return AmqpError(ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange")


def declare_exchange(
    topology: Topology,
    name: str,
    exchange_type: str = "direct",
    *,
    passive: bool = False,
    durable: bool = False,
    auto_delete: bool = False,
    internal: bool = False,
    arguments: Mapping[str, Any] | None = None,
) -> tuple[Exchange, bool]:
    """exchange.declare: the exchange and whether it is new (to be created)."""
    arguments = dict(arguments or {})
    name = strip_name(name)
    vhost = topology.vhost
    if passive:
        if name == DEFAULT_EXCHANGE:
            raise _default_exchange_refused()
        existing = topology.exchanges.get(name)
        if existing is None:
            raise not_found("exchange", name, vhost)
        return existing, False
    try:
        kind = ExchangeType(exchange_type)
    except ValueError:
        # A connection error in RabbitMQ (command_invalid is a hard error).
        raise AmqpError(
            ReplyCode.COMMAND_INVALID, f"unknown exchange type '{exchange_type}'"
        ) from None
    if name == DEFAULT_EXCHANGE:
        raise _default_exchange_refused()
    what = resource("exchange", name, vhost)
    existing = topology.exchanges.get(name)
    if existing is None:
        if name.startswith(RESERVED_PREFIX):
            raise _reserved("exchange", name)
        alternate = arguments.get("alternate-exchange")
        if alternate is not None and not is_string(alternate):
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"invalid type '{type_name(alternate)}' for arg 'alternate-exchange' in {what}",
            )
        return Exchange(name, kind, durable, auto_delete, internal, arguments), True
    for field_name, current, requested in (
        ("type", f"'{existing.type}'", f"'{kind}'"),
        ("durable", _flag(existing.durable), _flag(durable)),
        ("auto_delete", _flag(existing.auto_delete), _flag(auto_delete)),
        ("internal", _flag(existing.internal), _flag(internal)),
    ):
        if current != requested:
            raise _inequivalent(field_name, what, requested, current)
    old_ae, new_ae = (
        existing.arguments.get("alternate-exchange"),
        arguments.get("alternate-exchange"),
    )
    if old_ae != new_ae:
        raise _inequivalent("alternate-exchange", what, describe(new_ae), describe(old_ae))
    return existing, False


def check_exchange_delete(
    topology: Topology, name: str, if_unused: bool = False
) -> Exchange | None:
    """exchange.delete: the exchange to delete, None when there is none (not an error)."""
    name = strip_name(name)
    if name == DEFAULT_EXCHANGE:
        raise _default_exchange_refused()
    if name.startswith(RESERVED_PREFIX):
        raise AmqpError(
            ReplyCode.ACCESS_REFUSED,
            f"deletion of system {resource('exchange', name, topology.vhost)} not allowed",
        )
    existing = topology.exchanges.get(name)
    if existing is not None and if_unused and any(True for _ in topology.bindings_from(name)):
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"{resource('exchange', name, topology.vhost)} in use",
        )
    return existing


def _check_exclusive(queue: Queue, owner: str | None, strict: bool, vhost: str) -> None:
    """RabbitMQ's check_exclusive_access: strict on redeclare, lax on use."""
    if queue.exclusive_owner == owner or (not strict and queue.exclusive_owner is None):
        return
    raise AmqpError(
        ReplyCode.RESOURCE_LOCKED,
        f"cannot obtain exclusive access to locked {resource('queue', queue.name, vhost)}. "
        "It could be originally declared on another connection or the exclusive "
        "property value does not match that of the original declaration.",
    )


def declare_queue(
    topology: Topology,
    name: str,
    *,
    connection_id: str,
    passive: bool = False,
    durable: bool = False,
    exclusive: bool = False,
    auto_delete: bool = False,
    arguments: Mapping[str, Any] | None = None,
    new_name: Callable[[], str] = server_generated_name,
) -> tuple[Queue, bool]:
    """queue.declare: the queue and whether it is new (to be created).

    `connection_id` identifies the declaring connection (exclusive ownership);
    `new_name` makes the "amq.gen-..." name when `name` is empty.
    """
    arguments = dict(arguments or {})
    name = strip_name(name)
    vhost = topology.vhost
    if passive:
        existing = topology.queues.get(name)
        if existing is None:
            raise not_found("queue", name, vhost)
        _check_exclusive(existing, connection_id, strict=False, vhost=vhost)
        return existing, False
    owner = connection_id if exclusive else None
    durable = durable and not exclusive  # RabbitMQ never keeps exclusive queues
    if not name:
        kind = _queue_type(arguments) if is_string(arguments.get("x-queue-type", "")) else ""
        if kind == "quorum":
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"Cannot declare a server-named queue for type {QUEUE_TYPES[kind]}",
            )
        name = new_name()
    elif name.startswith(RESERVED_PREFIX):
        raise _reserved("queue", name)
    what = resource("queue", name, vhost)
    existing = topology.queues.get(name)
    if existing is not None:
        _check_exclusive(existing, owner, strict=True, vhost=vhost)
        if existing.durable != durable:
            raise _inequivalent("durable", what, _flag(durable), _flag(existing.durable))
        if existing.auto_delete != auto_delete:
            raise _inequivalent(
                "auto_delete", what, _flag(auto_delete), _flag(existing.auto_delete)
            )
        for arg, received, current in equivalence_errors(existing.arguments, arguments):
            raise _inequivalent(arg, what, received, current)
        return existing, False
    dlx = arguments.get("x-dead-letter-exchange")
    if dlx is not None and not is_string(dlx):
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"invalid type '{type_name(dlx)}' for arg 'x-dead-letter-exchange' in {what}",
        )
    for arg, error in argument_errors(arguments):
        if error:
            text = f"invalid arg '{arg}' for {what}: {error}"
        else:
            module = QUEUE_TYPES[_queue_type(arguments)]
            text = f"invalid arg '{arg}' for {what} of queue type {module}"
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, text)
    if _queue_type(arguments) == "quorum":
        for bad, prop in (
            (auto_delete, "auto-delete"),
            (exclusive, "exclusive-owner"),
            (not durable, "non-durable"),
        ):
            if bad:
                raise AmqpError(
                    ReplyCode.PRECONDITION_FAILED, f"invalid property '{prop}' for {what}"
                )
    return Queue(name, durable, owner, auto_delete, arguments), True


def check_queue_access(topology: Topology, name: str, connection_id: str) -> Queue:
    """The queue for basic.consume / basic.get / queue.purge: 404, or 405 if
    another connection owns it exclusively."""
    name = strip_name(name)
    queue = topology.queues.get(name)
    if queue is None:
        raise not_found("queue", name, topology.vhost)
    _check_exclusive(queue, connection_id, strict=False, vhost=topology.vhost)
    return queue


def check_queue_delete(
    topology: Topology,
    name: str,
    connection_id: str,
    *,
    if_unused: bool = False,
    if_empty: bool = False,
    consumers: int = 0,
    messages: int = 0,
) -> Queue | None:
    """queue.delete: the queue to delete, None when there is none (not an error)."""
    name = strip_name(name)
    queue = topology.queues.get(name)
    if queue is None:
        return None
    what = resource("queue", name, topology.vhost)
    _check_exclusive(queue, connection_id, strict=False, vhost=topology.vhost)
    if if_unused and consumers:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"{what} in use")
    if if_empty and messages:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"{what} not empty")
    return queue


def _binding_ends(
    topology: Topology,
    source: str,
    destination: str,
    kind: DestinationKind,
) -> tuple[str, str]:
    source, destination = strip_name(source), strip_name(destination)
    if DEFAULT_EXCHANGE in (source, destination if kind is DestinationKind.EXCHANGE else None):
        raise _default_exchange_refused()
    return source, destination


def check_bind(
    topology: Topology,
    source: str,
    destination: str,
    kind: DestinationKind,
    routing_key: str = "",
    arguments: Mapping[str, Any] | None = None,
    *,
    connection_id: str,
) -> Binding:
    """queue.bind / exchange.bind: the binding to add (adding twice is harmless)."""
    arguments = dict(arguments or {})
    source, destination = _binding_ends(topology, source, destination, kind)
    vhost = topology.vhost
    exchange = topology.exchanges.get(source)
    if exchange is None:
        raise not_found("exchange", source, vhost)
    queue = topology.queues.get(destination) if kind is DestinationKind.QUEUE else None
    if kind is DestinationKind.QUEUE and queue is None:
        raise not_found("queue", destination, vhost)
    if kind is DestinationKind.EXCHANGE and destination not in topology.exchanges:
        raise not_found("exchange", destination, vhost)
    if exchange.type is ExchangeType.HEADERS:
        _check_x_match(arguments)
    if queue is not None:
        _check_exclusive(queue, connection_id, strict=False, vhost=vhost)
    return Binding(source, destination, kind, routing_key, arguments)


def check_unbind(
    topology: Topology,
    source: str,
    destination: str,
    kind: DestinationKind,
    routing_key: str = "",
    arguments: Mapping[str, Any] | None = None,
    *,
    connection_id: str,
) -> Binding | None:
    """queue.unbind / exchange.unbind: the binding to remove, None when there is
    nothing to remove (RabbitMQ 3.10 answers unbind-ok then too)."""
    source, destination = _binding_ends(topology, source, destination, kind)
    binding = Binding(source, destination, kind, routing_key, dict(arguments or {}))
    if not topology.has_binding(binding):
        return None
    if kind is DestinationKind.QUEUE:
        _check_exclusive(
            topology.queues[destination], connection_id, strict=False, vhost=topology.vhost
        )
    return binding


def _check_x_match(arguments: Mapping[str, Any]) -> None:
    mode = arguments.get("x-match")
    if mode is None:
        return  # RabbitMQ: omitted means "all"
    if not is_string(mode):
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"Invalid x-match field type {type_name(mode)} (value {erlang_term(mode)}); "
            "expected longstr",
        )
    text = mode if isinstance(mode, str) else mode.decode("utf-8", "replace")
    if text not in X_MATCH_MODES:
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"Invalid x-match field value {erlang_term(mode)}; "
            "expected all, any, all-with-x, or any-with-x",
        )
