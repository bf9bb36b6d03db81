"""Exchanges, queues and bindings of one vhost: the model, without RabbitMQ's rules.

The dataclasses are plain data: the metadata store persists them and the
router reads them. `Topology` is the in-memory snapshot of one vhost, kept
indexed for routing; its mutators apply RabbitMQ's cascades (a queue's
bindings go with it, an auto-delete exchange with its last binding). What
may be declared, bound or deleted is decided in topology_rules.py.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar, cast

from pulsar_gateway.handlers.amqp.field_values import frozen, is_int, text_or_none
from pulsar_gateway.handlers.amqp.queue_arguments import queue_type as _queue_type

_T = TypeVar("_T")
DEFAULT_EXCHANGE = ""


class ExchangeType(StrEnum):
    """The built-in types, and the delayed-message exchange of RabbitMQ's most used plugin
    (delayed_exchange.py); other plugin types are refused with 503."""

    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"
    DELAYED = "x-delayed-message"


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
        return text_or_none(self.arguments.get("alternate-exchange"))

    @property
    def routing_type(self) -> ExchangeType:
        """How it routes: a delayed-message exchange as its x-delayed-type says."""
        if self.type is ExchangeType.DELAYED:
            return ExchangeType(str(text_or_none(self.arguments.get("x-delayed-type"))))
        return self.type


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
    def is_stream(self) -> bool:
        return self.queue_type == "stream"

    @property
    def max_priority(self) -> int | None:
        return self._int("x-max-priority")

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
        return value if is_int(value) else None

    def _text(self, name: str) -> str | None:
        return text_or_none(self.arguments.get(name))


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
