"""Routing a publish through a vhost's exchanges to its queues (pure).

RabbitMQ's semantics, rabbit_exchange:route/2 included: the default exchange
routes by queue name; direct, fanout, topic and headers exchanges by their
bindings; exchange-to-exchange bindings are followed with a seen-set so cycles
end and each queue gets at most one copy; an exchange that matched nothing
hands the message to its alternate exchange. CC and BCC header keys are
extra routing keys (sender-selected distribution), as in RabbitMQ.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode, not_found, resource
from pulsar_gateway.handlers.amqp.field_values import same_value
from pulsar_gateway.handlers.amqp.topology import (
    DEFAULT_EXCHANGE,
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    Topology,
)

TopicMatcher = Callable[[tuple[str, ...]], bool]


def split_topic(key: str) -> tuple[str, ...]:
    """Words of a topic key; "" has none, while "." has two empty ones."""
    return tuple(key.split(".")) if key else ()


@functools.lru_cache(maxsize=16384)
def compile_topic(pattern: str) -> TopicMatcher:
    """A matcher for a binding key: `*` is one word, `#` zero or more.

    Patterns with `#` run as a small NFA over pattern positions, so a key like
    "#.#.#.#.x" costs O(words x pattern) rather than regex backtracking.
    """
    words = _collapse_hashes(split_topic(pattern))
    if "#" not in words:
        if "*" not in words:
            return words.__eq__
        return functools.partial(_match_stars, words)
    if words == ("#",):
        return _match_everything
    return functools.partial(_match_nfa, words, _closures(words))


def topic_matches(pattern: str, routing_key: str) -> bool:
    """One binding key against one routing key (the trie does this in bulk)."""
    return compile_topic(pattern)(split_topic(routing_key))


def _collapse_hashes(words: tuple[str, ...]) -> tuple[str, ...]:
    collapsed: list[str] = []
    for word in words:
        if word == "#" and collapsed and collapsed[-1] == "#":
            continue
        collapsed.append(word)
    return tuple(collapsed)


def _match_everything(_words: tuple[str, ...]) -> bool:
    return True


def _match_stars(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    return len(pattern) == len(words) and all(
        p == "*" or p == w for p, w in zip(pattern, words, strict=True)
    )


def _closures(pattern: tuple[str, ...]) -> tuple[frozenset[int], ...]:
    """For each position, the positions reachable by letting `#` match nothing."""
    result: list[frozenset[int]] = []
    for start in range(len(pattern) + 1):
        reach = {start}
        position = start
        while position < len(pattern) and pattern[position] == "#":
            position += 1
            reach.add(position)
        result.append(frozenset(reach))
    return tuple(result)


def _match_nfa(
    pattern: tuple[str, ...], closures: tuple[frozenset[int], ...], words: tuple[str, ...]
) -> bool:
    end = len(pattern)
    states = closures[0]
    for word in words:
        following: set[int] = set()
        for position in states:
            if position == end:
                continue
            token = pattern[position]
            if token == "#":
                following.update(closures[position])  # `#` swallows this word too
            elif token == "*" or token == word:
                following.update(closures[position + 1])
        if not following:
            return False
        states = frozenset(following)
    return end in states


class _TrieNode:
    __slots__ = ("children", "bindings")

    def __init__(self) -> None:
        self.children: dict[str, _TrieNode] = {}
        self.bindings: list[Binding] = []


class TopicTrie:
    """A topic exchange's bindings as a word trie, as RabbitMQ stores them.

    A publish walks only the branches its words (or `*` / `#`) select, so the
    cost follows the key, not the number of bindings. Visited (node, word
    position) pairs are remembered, which bounds `#`-heavy patterns and means
    a binding is found at most once.
    """

    def __init__(self, bindings: Iterable[Binding]) -> None:
        self._root = _TrieNode()
        for binding in bindings:
            node = self._root
            for word in _collapse_hashes(split_topic(binding.routing_key)):
                node = node.children.setdefault(word, _TrieNode())
            node.bindings.append(binding)

    def match_keys(self, keys: Sequence[str]) -> list[Binding]:
        """Bindings matching any of the keys (a binding may repeat across keys)."""
        found: list[Binding] = []
        visited: set[tuple[int, int]] = set()
        for key in keys:
            visited.clear()
            self._walk(self._root, split_topic(key), 0, visited, found)
        return found

    def _walk(
        self,
        node: _TrieNode,
        words: tuple[str, ...],
        position: int,
        visited: set[tuple[int, int]],
        found: list[Binding],
    ) -> None:
        marker = (id(node), position)
        if marker in visited:
            return
        visited.add(marker)
        children = node.children
        if position == len(words):
            found.extend(node.bindings)
        else:
            word = words[position]
            exact = children.get(word)
            if exact is not None:
                self._walk(exact, words, position + 1, visited, found)
            star = children.get("*")
            if star is not None and star is not exact:
                self._walk(star, words, position + 1, visited, found)
        hash_node = children.get("#")
        if hash_node is not None:
            # `#` takes zero or more of the remaining words.
            for rest in range(position, len(words) + 1):
                self._walk(hash_node, words, rest, visited, found)


def headers_match(binding_arguments: Mapping[str, Any], headers: Mapping[str, Any]) -> bool:
    """RabbitMQ's headers-exchange test of one binding against message headers.

    x-match all (the default) / any compare the binding's keys that do not
    start with "x-"; all-with-x / any-with-x (RabbitMQ 3.10) compare those
    too. A void binding value only asks for the header to be present.
    """
    mode = binding_arguments.get("x-match", "all")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    with_x = mode in ("all-with-x", "any-with-x")
    wants_any = mode in ("any", "any-with-x")
    for key, expected in binding_arguments.items():
        if key == "x-match" or (key.startswith("x-") and not with_x):
            continue
        matched = key in headers and (expected is None or same_value(expected, headers[key]))
        if matched and wants_any:
            return True
        if not matched and not wants_any:
            return False
    # all: every key matched (also when there were none); any: none did.
    return not wants_any


def route(
    topology: Topology,
    exchange_name: str,
    routing_key: str,
    headers: Mapping[str, Any] | None = None,
    extra_routing_keys: Sequence[str] = (),
) -> frozenset[str]:
    """Names of the queues a publish reaches; empty when it is unroutable.

    Raises 404 for a missing exchange and 403 for an internal one, as a
    basic.publish to them would. `extra_routing_keys` are the CC and BCC
    header values.
    """
    exchange = topology.exchanges.get(exchange_name)
    if exchange is None:
        raise not_found("exchange", exchange_name, topology.vhost)
    if exchange.internal:
        raise AmqpError(
            ReplyCode.ACCESS_REFUSED,
            f"cannot publish to internal {resource('exchange', exchange_name, topology.vhost)}",
        )
    if exchange.name == DEFAULT_EXCHANGE and not extra_routing_keys:
        # the common publish straight to a queue: what the loop below gives, without it
        return frozenset((routing_key,)) if routing_key in topology.queues else frozenset()
    keys = (routing_key, *extra_routing_keys)
    message_headers = headers or {}
    queues: set[str] = set()
    seen = {exchange.name}
    pending = [exchange]
    while pending:
        current = pending.pop()
        destinations = _destinations(topology, current, keys, message_headers)
        if not destinations and current.alternate_exchange is not None:
            destinations = [(DestinationKind.EXCHANGE, current.alternate_exchange)]
        for kind, name in destinations:
            if kind is DestinationKind.QUEUE:
                if name in topology.queues:
                    queues.add(name)
            elif name not in seen:
                seen.add(name)
                target = topology.exchanges.get(name)
                if target is not None:
                    pending.append(target)
    return frozenset(queues)


def _destinations(
    topology: Topology,
    exchange: Exchange,
    keys: Sequence[str],
    headers: Mapping[str, Any],
) -> list[tuple[DestinationKind, str]]:
    if exchange.name == DEFAULT_EXCHANGE:
        return [(DestinationKind.QUEUE, key) for key in keys]
    return [
        (b.destination_kind, b.destination) for b in _matching(topology, exchange, keys, headers)
    ]


def _matching(
    topology: Topology,
    exchange: Exchange,
    keys: Sequence[str],
    headers: Mapping[str, Any],
) -> Iterable[Binding]:
    kind = exchange.routing_type
    if kind is ExchangeType.DIRECT:
        if len(keys) == 1:
            return topology.bindings_from_with_key(exchange.name, keys[0])
        return [b for key in keys for b in topology.bindings_from_with_key(exchange.name, key)]
    if kind is ExchangeType.FANOUT:
        return topology.bindings_from(exchange.name)
    if kind is ExchangeType.TOPIC:
        trie = topology.derived(
            exchange.name, "topic-trie", lambda: TopicTrie(topology.bindings_from(exchange.name))
        )
        return trie.match_keys(keys)
    return [b for b in topology.bindings_from(exchange.name) if headers_match(b.arguments, headers)]


def sender_selected_keys(headers: Mapping[str, Any] | None) -> list[str]:
    """The CC and BCC routing keys of a message (string arrays in its headers)."""
    if not headers:
        return []
    keys: list[str] = []
    for name in ("CC", "BCC"):
        values = (headers or {}).get(name)
        if isinstance(values, list):
            for value in values:
                if isinstance(value, str):
                    keys.append(value)
                elif isinstance(value, bytes):
                    keys.append(value.decode("utf-8", "replace"))
    return keys
