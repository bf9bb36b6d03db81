"""RabbitMQ's rules for declare, bind, delete and queue access, over a `Topology`.

Kept apart from the model (topology.py) because they change for different
reasons: the model follows what a vhost holds, these follow what RabbitMQ 3.10
answers. Every function is pure: it returns the entity to create or act on, or
raises an `AmqpError` with RabbitMQ's reply code and text, and never changes
the topology; the broker layer persists and then applies the result.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode, not_found, resource
from pulsar_gateway.handlers.amqp.field_values import (
    describe,
    erlang_term,
    is_string,
    type_name,
)
from pulsar_gateway.handlers.amqp.queue_arguments import (
    ARGUMENT_SUPPORT,
    QUEUE_TYPES,
    REFUSED,
    argument_errors,
    equivalence_errors,
)
from pulsar_gateway.handlers.amqp.queue_arguments import queue_type as _queue_type
from pulsar_gateway.handlers.amqp.topology import (
    DEFAULT_EXCHANGE,
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    Queue,
    Topology,
)

RESERVED_PREFIX = "amq."
X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")


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


def check_delayed_type(arguments: Mapping[str, Any]) -> None:
    """A delayed-message exchange routes as its x-delayed-type, one of the built-in types
    (the plugin's 406 and text otherwise)."""
    delayed = arguments.get("x-delayed-type")
    if isinstance(delayed, bytes):
        delayed = delayed.decode("utf-8", "replace")
    builtin = {t.value for t in ExchangeType if t is not ExchangeType.DELAYED}
    if delayed not in builtin:
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            "Invalid argument, 'x-delayed-type' must be an existing exchange type",
        )


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
        if kind is ExchangeType.DELAYED:
            check_delayed_type(arguments)
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
    if _queue_type(arguments) in ("quorum", "stream"):
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


def check_supported_arguments(arguments: Mapping[str, Any], queue: str, vhost: str) -> None:
    """Queue arguments RabbitMQ has and this gateway does not implement are refused
    (406) rather than silently ignored (`ARGUMENT_SUPPORT` says which, and why the
    accepted-but-inert ones are harmless)."""
    unsupported = next(
        (name for name in arguments if ARGUMENT_SUPPORT.get(name, ("",))[0] == REFUSED), None
    )
    if unsupported:
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"{unsupported} for {resource('queue', queue, vhost)} is not supported "
            "by Pulsar Gateway",
        )
