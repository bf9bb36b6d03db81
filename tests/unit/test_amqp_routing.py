"""Routing and topology rules of the AMQP core, checked against RabbitMQ's.

The topic table is RabbitMQ 3.10's own topic_matching test; the property
test compares the compiled matcher with a plain recursive reference.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.exchange_routing import (
    TopicTrie,
    compile_topic,
    headers_match,
    route,
    sender_selected_keys,
    split_topic,
    topic_matches,
)
from pulsar_gateway.handlers.amqp.topology import (
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    Queue,
    Topology,
)
from pulsar_gateway.handlers.amqp.topology_rules import (
    check_bind,
    check_exchange_delete,
    check_queue_access,
    check_queue_delete,
    check_unbind,
    declare_exchange,
    declare_queue,
    server_generated_name,
)

Q = DestinationKind.QUEUE
X = DestinationKind.EXCHANGE


def error_of(call: object, *args: object, **kwargs: object) -> AmqpError:
    with pytest.raises(AmqpError) as info:
        call(*args, **kwargs)  # type: ignore[operator]
    return info.value


# --- topic matching ----------------------------------------------------------------------

RABBIT_BINDINGS = [
    ("a.b.c", "t1"),
    ("a.*.c", "t2"),
    ("a.#.b", "t3"),
    ("a.b.b.c", "t4"),
    ("#", "t5"),
    ("#.#", "t6"),
    ("#.b", "t7"),
    ("*.*", "t8"),
    ("a.*", "t9"),
    ("*.b.c", "t10"),
    ("a.#", "t11"),
    ("a.#.#", "t12"),
    ("b.b.c", "t13"),
    ("a.b.b", "t14"),
    ("a.b", "t15"),
    ("b.c", "t16"),
    ("", "t17"),
    ("*.*.*", "t18"),
    ("vodka.martini", "t19"),
    ("a.b.c", "t20"),
    ("*.#", "t21"),
    ("#.*.#", "t22"),
    ("*.#.#", "t23"),
    ("#.#.#", "t24"),
    ("*", "t25"),
    ("#.b.#", "t26"),
]
RABBIT_EXPECTED = {
    "a.b.c": "t1 t2 t5 t6 t10 t11 t12 t18 t20 t21 t22 t23 t24 t26",
    "a.b": "t3 t5 t6 t7 t8 t9 t11 t12 t15 t21 t22 t23 t24 t26",
    "a.b.b": "t3 t5 t6 t7 t11 t12 t14 t18 t21 t22 t23 t24 t26",
    "": "t5 t6 t17 t24",
    "b.c.c": "t5 t6 t18 t21 t22 t23 t24 t26",
    "a.a.a.a.a": "t5 t6 t11 t12 t21 t22 t23 t24",
    "vodka.gin": "t5 t6 t8 t21 t22 t23 t24",
    "vodka.martini": "t5 t6 t8 t19 t21 t22 t23 t24",
    "b.b.c": "t5 t6 t10 t13 t18 t21 t22 t23 t24 t26",
    "nothing.here.at.all": "t5 t6 t21 t22 t23 t24",
    "oneword": "t5 t6 t21 t22 t23 t24 t25",
    "args-test": "t5 t6 t21 t22 t23 t24 t25 t27",
}


def rabbit_topic_topology() -> Topology:
    topology = Topology("/")
    topology.add_exchange(Exchange("topics", ExchangeType.TOPIC))
    for key, queue in [*RABBIT_BINDINGS, ("args-test", "t27")]:
        topology.add_queue(Queue(queue))
        topology.add_binding(Binding("topics", queue, Q, key))
    # Same key and queue, other arguments: a second binding, still one copy.
    topology.add_binding(Binding("topics", "t27", Q, "args-test", {"foo": "bar"}))
    topology.add_binding(Binding("topics", "t27", Q, "args-test", {"foo": "baz"}))
    return topology


@pytest.mark.parametrize(("key", "expected"), RABBIT_EXPECTED.items())
def test_rabbitmq_topic_table(key: str, expected: str) -> None:
    assert route(rabbit_topic_topology(), "topics", key) == frozenset(expected.split())


def test_rabbitmq_topic_table_after_removing_bindings() -> None:
    topology = rabbit_topic_topology()
    for key, queue in [("a.b.c", "t1"), ("#", "t5"), ("a.#", "t11"), ("vodka.martini", "t19")]:
        topology.remove_binding(Binding("topics", queue, Q, key))
    topology.remove_binding(Binding("topics", "t21", Q, "*.#"))
    topology.remove_binding(Binding("topics", "t27", Q, "args-test", {"foo": "baz"}))
    assert route(topology, "topics", "a.b.c") == frozenset(
        "t2 t6 t10 t12 t18 t20 t22 t23 t24 t26".split()
    )
    assert route(topology, "topics", "") == frozenset({"t6", "t17", "t24"})
    assert route(topology, "topics", "args-test") == frozenset("t6 t22 t23 t24 t25 t27".split())


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("", "", True),
        ("", ".", False),
        (".", ".", True),
        ("*", "", False),
        ("*", ".", False),
        ("*.*", ".", True),  # two empty words
        ("a.*", "a.", True),
        ("#", "", True),
        ("#", "..", True),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("a.#.b", "a.b.c", False),
        ("#.a", "a", True),
        ("a*", "ab", False),  # wildcards only as whole words
        ("a*", "a*", True),
        ("a.#", "a", True),
        ("#.#.#.x", "y.y.y.y.x", True),
    ],
)
def test_topic_edge_cases(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


def reference_split(key: str) -> list[str]:
    return [] if key == "" else key.split(".")


def reference_match(pattern: list[str], words: list[str]) -> bool:
    """Straight from the semantics: * is one word, # is zero or more."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return reference_match(rest, words) or (bool(words) and reference_match(pattern, words[1:]))
    if not words:
        return False
    return (head == "*" or head == words[0]) and reference_match(rest, words[1:])


pattern_words = st.lists(st.sampled_from(["a", "b", "", "*", "#", "ab"]), max_size=7)
key_words = st.lists(st.sampled_from(["a", "b", "", "ab", "*", "#"]), max_size=8)


def test_topic_matcher_agrees_with_the_reference_on_every_short_pattern() -> None:
    """Every pattern of up to four words from a, "", * and # against every key of up to four
    words from a, b and "" (41,261 pairs, a third of a second): the small cases, all of
    them, where a random draw may miss one."""
    patterns = {
        ".".join(p) for n in range(5) for p in itertools.product(["a", "", "*", "#"], repeat=n)
    }
    keys = {".".join(k) for n in range(5) for k in itertools.product(["a", "b", ""], repeat=n)}
    for pattern in patterns:
        for key in keys:
            expected = reference_match(reference_split(pattern), reference_split(key))
            assert topic_matches(pattern, key) is expected, (pattern, key)


# longer patterns and keys, and keys holding * and #: at random (the short ones, all of them,
# above: 500 examples here where 2,000 were drawn before that test existed)
@given(pattern_words, key_words)
@settings(max_examples=examples(500), deadline=None)
def test_topic_matcher_agrees_with_the_reference(pattern: list[str], words: list[str]) -> None:
    pattern_key, routing_key = ".".join(pattern), ".".join(words)
    expected = reference_match(reference_split(pattern_key), reference_split(routing_key))
    assert topic_matches(pattern_key, routing_key) is expected


@given(st.lists(pattern_words, max_size=12), st.lists(key_words, min_size=1, max_size=3))
@settings(max_examples=examples(500), deadline=None)
def test_topic_trie_routing_agrees_with_the_reference(
    patterns: list[list[str]], keys: list[list[str]]
) -> None:
    topology = Topology("/")
    topology.add_exchange(Exchange("t", ExchangeType.TOPIC))
    for index, pattern in enumerate(patterns):
        topology.add_queue(Queue(f"q{index}"))
        topology.add_binding(Binding("t", f"q{index}", Q, ".".join(pattern)))
    routing_keys = [".".join(words) for words in keys]
    expected = {
        f"q{index}"
        for index, pattern in enumerate(patterns)
        if any(
            reference_match(reference_split(".".join(pattern)), reference_split(key))
            for key in routing_keys
        )
    }
    assert route(topology, "t", routing_keys[0], None, routing_keys[1:]) == expected


def test_topic_index_follows_binding_changes() -> None:
    topology = base_topology()
    topology.add_binding(Binding("amq.topic", "q1", Q, "a.*"))
    assert route(topology, "amq.topic", "a.b") == {"q1"}
    topology.add_binding(Binding("amq.topic", "q2", Q, "#"))
    assert route(topology, "amq.topic", "a.b") == {"q1", "q2"}
    topology.remove_binding(Binding("amq.topic", "q1", Q, "a.*"))
    assert route(topology, "amq.topic", "a.b") == {"q2"}
    topology.remove_queue("q2")
    assert route(topology, "amq.topic", "a.b") == frozenset()


def test_topic_routing_cost_follows_the_key_not_the_binding_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counted in trie steps, not seconds: a scan of the bindings would take 2,000 steps
    per publish, the trie a handful (the words of the key and the `#` at its end)."""
    topology = Topology("/")
    for index in range(2000):
        topology.add_queue(Queue(f"q{index}"))
        topology.add_binding(Binding("amq.topic", f"q{index}", Q, f"orders.{index}.#"))
    route(topology, "amq.topic", "warm.up")
    steps = 0
    walk = TopicTrie._walk

    def counted(self: TopicTrie, *args: object) -> None:
        nonlocal steps
        steps += 1
        walk(self, *args)

    monkeypatch.setattr(TopicTrie, "_walk", counted)
    for index in range(2000):
        assert route(topology, "amq.topic", f"orders.{index}.eu") == {f"q{index}"}
    assert 0 < steps <= 2000 * 8


class _CountedWord(str):
    """A routing-key word that counts the comparisons made against it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedWord.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_topic_matchers_are_cached_and_split_like_rabbitmq() -> None:
    assert compile_topic("a.#.b") is compile_topic("a.#.b")
    assert split_topic("") == ()
    assert split_topic(".") == ("", "")
    assert split_topic("a..b") == ("a", "", "b")


def test_pathological_patterns_stay_fast() -> None:
    """Counted in word comparisons, not seconds: backtracking over 21 `#` against 120
    words would be exponential; the matcher compares each word with each pattern position
    at most once."""
    pattern = ".".join(["#", "a"] * 20 + ["#", "z"])
    key = ".".join(["a"] * 120)
    assert not topic_matches(pattern, key)
    assert topic_matches(pattern, key + ".z")
    matcher = compile_topic(pattern)
    for words, expected in ((key.split("."), False), ((key + ".z").split("."), True)):
        _CountedWord.compared = 0
        assert matcher(tuple(_CountedWord(word) for word in words)) is expected
        assert 0 < _CountedWord.compared <= len(words) * (pattern.count(".") + 2)


# --- headers exchange --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "headers", "matches"),
    [
        ({}, {}, True),  # all, with nothing to compare
        ({"x-match": "any"}, {"a": 1}, False),
        ({"a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 3}, True),
        ({"a": 1, "b": "x"}, {"a": 1}, False),
        ({"x-match": "any", "a": 1, "b": "x"}, {"b": "x"}, True),
        ({"x-match": "any", "a": 1, "b": "x"}, {"b": "y"}, False),
        ({"a": 1}, {"a": 1.0}, True),  # numbers compare by value
        ({"a": 1}, {"a": True}, False),  # bool is not a number
        ({"a": "x"}, {"a": b"x"}, True),
        ({"a": None}, {"a": "anything"}, True),  # void: presence only
        ({"a": None}, {}, False),
        ({"x-tag": "1", "a": 1}, {"a": 1}, True),  # x- keys ignored by all
        ({"x-match": "any", "x-tag": "1"}, {"x-tag": "1"}, False),
        ({"x-match": "all-with-x", "x-tag": "1"}, {"x-tag": "1"}, True),
        ({"x-match": "all-with-x", "x-tag": "1", "a": 1}, {"a": 1}, False),
        ({"x-match": "any-with-x", "x-tag": "1", "a": 2}, {"x-tag": "1"}, True),
        ({"x-match": "any-with-x", "x-tag": "1"}, {"x-tag": "2"}, False),
        ({"n": {"k": [1, "v"]}}, {"n": {"k": [1, "v"]}}, True),
        ({"n": {"k": [1, "v"]}}, {"n": {"k": [1, "w"]}}, False),
    ],
)
def test_headers_match(arguments: dict, headers: dict, matches: bool) -> None:
    assert headers_match(arguments, headers) is matches


def test_headers_exchange_routes_by_message_headers() -> None:
    topology = Topology("/")
    for name in ("q1", "q2"):
        topology.add_queue(Queue(name))
    topology.add_binding(Binding("amq.headers", "q1", Q, "", {"x-match": "all", "kind": "a"}))
    topology.add_binding(Binding("amq.match", "q2", Q, "", {"x-match": "any", "kind": "b"}))
    assert route(topology, "amq.headers", "ignored", {"kind": "a"}) == {"q1"}
    assert route(topology, "amq.headers", "ignored", None) == frozenset()
    assert route(topology, "amq.match", "", {"kind": "b"}) == {"q2"}


# --- routing through exchanges -----------------------------------------------------------


def base_topology() -> Topology:
    topology = Topology("/")
    for name in ("q1", "q2", "q3"):
        topology.add_queue(Queue(name))
    return topology


def test_default_exchange_routes_by_queue_name() -> None:
    topology = base_topology()
    assert route(topology, "", "q1") == {"q1"}
    assert route(topology, "", "missing") == frozenset()


def test_direct_and_fanout() -> None:
    topology = base_topology()
    topology.add_binding(Binding("amq.direct", "q1", Q, "k1"))
    topology.add_binding(Binding("amq.direct", "q2", Q, "k1"))
    topology.add_binding(Binding("amq.direct", "q3", Q, "k2"))
    topology.add_binding(Binding("amq.fanout", "q1", Q, "whatever"))
    topology.add_binding(Binding("amq.fanout", "q3", Q, ""))
    assert route(topology, "amq.direct", "k1") == {"q1", "q2"}
    assert route(topology, "amq.direct", "k3") == frozenset()
    assert route(topology, "amq.fanout", "anything") == {"q1", "q3"}


def test_cc_and_bcc_add_routing_keys() -> None:
    topology = base_topology()
    topology.add_binding(Binding("amq.direct", "q1", Q, "k1"))
    topology.add_binding(Binding("amq.direct", "q2", Q, "k2"))
    headers = {"CC": ["k2", b"q3"], "BCC": ["nothing"], "other": ["k9"]}
    extra = sender_selected_keys(headers)
    assert extra == ["k2", "q3", "nothing"]
    assert route(topology, "amq.direct", "k1", headers, extra) == {"q1", "q2"}
    assert route(topology, "", "q1", headers, extra) == {"q1", "q3"}


def test_exchange_to_exchange_with_cycles_and_duplicates() -> None:
    topology = base_topology()
    topology.add_exchange(Exchange("front", ExchangeType.FANOUT))
    topology.add_exchange(Exchange("middle", ExchangeType.TOPIC))
    topology.add_exchange(Exchange("back", ExchangeType.DIRECT))
    topology.add_binding(Binding("front", "middle", X))
    topology.add_binding(Binding("front", "back", X))
    topology.add_binding(Binding("middle", "back", X, "#"))
    topology.add_binding(Binding("back", "front", X, "k"))  # a cycle
    topology.add_binding(Binding("back", "q1", Q, "k"))
    topology.add_binding(Binding("middle", "q1", Q, "k"))  # q1 twice: one copy
    topology.add_binding(Binding("middle", "q2", Q, "*"))
    assert route(topology, "front", "k") == {"q1", "q2"}
    assert route(topology, "back", "k") == {"q1", "q2"}
    assert route(topology, "front", "other") == {"q2"}
    assert route(topology, "front", "two.words") == frozenset()


def test_alternate_exchange_when_nothing_matched() -> None:
    topology = base_topology()
    topology.add_exchange(
        Exchange("main", ExchangeType.DIRECT, arguments={"alternate-exchange": "ae"})
    )
    topology.add_exchange(Exchange("ae", ExchangeType.FANOUT, internal=True))
    topology.add_binding(Binding("main", "q1", Q, "known"))
    topology.add_binding(Binding("ae", "q3", Q))
    assert route(topology, "main", "known") == {"q1"}
    assert route(topology, "main", "unknown") == {"q3"}


def test_alternate_exchange_only_when_the_exchange_itself_matched_nothing() -> None:
    topology = base_topology()
    topology.add_exchange(
        Exchange("main", ExchangeType.DIRECT, arguments={"alternate-exchange": "ae"})
    )
    topology.add_exchange(Exchange("ae", ExchangeType.FANOUT))
    topology.add_exchange(
        Exchange("inner", ExchangeType.DIRECT, arguments={"alternate-exchange": "ae2"})
    )
    topology.add_exchange(Exchange("ae2", ExchangeType.FANOUT))
    topology.add_binding(Binding("main", "inner", X, "k"))
    topology.add_binding(Binding("ae", "q1", Q))
    topology.add_binding(Binding("ae2", "q2", Q))
    # main matched (an exchange), inner matched nothing: inner's AE is used.
    assert route(topology, "main", "k") == {"q2"}


def test_missing_alternate_exchange_and_self_reference_are_ignored() -> None:
    topology = base_topology()
    topology.add_exchange(
        Exchange("a", ExchangeType.DIRECT, arguments={"alternate-exchange": "gone"})
    )
    topology.add_exchange(Exchange("b", ExchangeType.DIRECT, arguments={"alternate-exchange": "b"}))
    assert route(topology, "a", "k") == frozenset()
    assert route(topology, "b", "k") == frozenset()


def test_alternate_exchanges_chain() -> None:
    topology = base_topology()
    topology.add_exchange(Exchange("a", ExchangeType.DIRECT, arguments={"alternate-exchange": "b"}))
    topology.add_exchange(Exchange("b", ExchangeType.DIRECT, arguments={"alternate-exchange": "c"}))
    topology.add_exchange(Exchange("c", ExchangeType.DIRECT, arguments={"alternate-exchange": "a"}))
    topology.add_binding(Binding("c", "q2", Q, "k"))
    assert route(topology, "a", "k") == {"q2"}
    assert route(topology, "a", "other") == frozenset()


def test_publish_to_missing_or_internal_exchange() -> None:
    topology = base_topology()
    topology.add_exchange(Exchange("hidden", ExchangeType.FANOUT, internal=True))
    topology.add_exchange(Exchange("door", ExchangeType.FANOUT))
    topology.add_binding(Binding("door", "hidden", X))
    topology.add_binding(Binding("hidden", "q1", Q))
    error = error_of(route, topology, "hidden", "")
    assert (error.reply_code, error.explanation) == (
        403,
        "cannot publish to internal exchange 'hidden' in vhost '/'",
    )
    assert route(topology, "door", "") == {"q1"}  # reachable through a binding
    error = error_of(route, topology, "nope", "")
    assert (error.reply_code, error.explanation) == (404, "no exchange 'nope' in vhost '/'")


# --- topology: predeclared, declare, delete ----------------------------------------------


def test_predeclared_exchanges() -> None:
    topology = Topology("/")
    assert {name: x.type for name, x in topology.exchanges.items()} == {
        "": ExchangeType.DIRECT,
        "amq.direct": ExchangeType.DIRECT,
        "amq.fanout": ExchangeType.FANOUT,
        "amq.topic": ExchangeType.TOPIC,
        "amq.headers": ExchangeType.HEADERS,
        "amq.match": ExchangeType.HEADERS,
    }
    assert all(x.durable and not x.auto_delete for x in topology.exchanges.values())
    restored = Topology(
        "v",
        exchanges=[Exchange("logs", ExchangeType.FANOUT)],
        queues=[Queue("q")],
        bindings=[Binding("logs", "q", Q)],
    )
    assert set(restored.exchanges) == set(topology.exchanges) | {"logs"}
    assert route(restored, "logs", "") == {"q"}


def test_exchange_declare_new_and_equivalent() -> None:
    topology = Topology("/")
    exchange, created = declare_exchange(topology, "logs", "topic", durable=True)
    assert created and exchange == Exchange("logs", ExchangeType.TOPIC, durable=True)
    topology.add_exchange(exchange)
    assert declare_exchange(topology, "logs", "topic", durable=True) == (exchange, False)
    assert declare_exchange(topology, "logs", passive=True) == (exchange, False)
    # An equivalent redeclare of a predeclared exchange is fine, as in RabbitMQ.
    assert declare_exchange(topology, "amq.topic", "topic", durable=True)[1] is False


@pytest.mark.parametrize(
    ("kwargs", "field", "received", "current"),
    [
        ({"exchange_type": "fanout", "durable": True}, "type", "'fanout'", "'topic'"),
        ({"exchange_type": "topic", "durable": False}, "durable", "'false'", "'true'"),
        (
            {"exchange_type": "topic", "durable": True, "auto_delete": True},
            "auto_delete",
            "'true'",
            "'false'",
        ),
        (
            {"exchange_type": "topic", "durable": True, "internal": True},
            "internal",
            "'true'",
            "'false'",
        ),
        (
            {"exchange_type": "topic", "durable": True, "arguments": {"alternate-exchange": "x"}},
            "alternate-exchange",
            "the value 'x' of type 'longstr'",
            "none",
        ),
    ],
)
def test_exchange_inequivalent(kwargs: dict, field: str, received: str, current: str) -> None:
    topology = Topology("/")
    topology.add_exchange(Exchange("logs", ExchangeType.TOPIC, durable=True))
    error = error_of(declare_exchange, topology, "logs", **kwargs)
    assert error.reply_code == ReplyCode.PRECONDITION_FAILED
    assert error.explanation == (
        f"inequivalent arg '{field}' for exchange 'logs' in vhost '/': "
        f"received {received} but current is {current}"
    )


@pytest.mark.parametrize(
    ("name", "kwargs", "code", "text"),
    [
        ("amq.custom", {}, 403, "exchange name 'amq.custom' contains reserved prefix 'amq.*'"),
        ("", {}, 403, "operation not permitted on the default exchange"),
        ("", {"passive": True}, 403, "operation not permitted on the default exchange"),
        ("nope", {"passive": True}, 404, "no exchange 'nope' in vhost '/'"),
        (
            "x",
            {"exchange_type": "x-consistent-hash"},
            503,
            "unknown exchange type 'x-consistent-hash'",
        ),
        (
            "x",
            {"exchange_type": "x-delayed-message"},
            406,
            "Invalid argument, 'x-delayed-type' must be an existing exchange type",
        ),
        (
            "x",
            {"exchange_type": "x-delayed-message", "arguments": {"x-delayed-type": "nope"}},
            406,
            "Invalid argument, 'x-delayed-type' must be an existing exchange type",
        ),
        (
            "x",
            {"arguments": {"alternate-exchange": 5}},
            406,
            "invalid type 'signedint' for arg 'alternate-exchange' in exchange 'x' in vhost '/'",
        ),
    ],
)
def test_exchange_declare_errors(name: str, kwargs: dict, code: int, text: str) -> None:
    error = error_of(declare_exchange, Topology("/"), name, **kwargs)
    assert (error.reply_code, error.explanation) == (code, text)
    assert error.hard is (code == 503)


def test_exchange_delete_rules() -> None:
    topology = base_topology()
    topology.add_exchange(Exchange("busy", ExchangeType.DIRECT))
    topology.add_binding(Binding("busy", "q1", Q, "k"))
    assert check_exchange_delete(topology, "missing") is None
    assert check_exchange_delete(topology, "busy") == topology.exchanges["busy"]
    error = error_of(check_exchange_delete, topology, "busy", if_unused=True)
    assert (error.reply_code, error.explanation) == (406, "exchange 'busy' in vhost '/' in use")
    error = error_of(check_exchange_delete, topology, "amq.direct")
    assert (error.reply_code, error.explanation) == (
        403,
        "deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )
    assert error_of(check_exchange_delete, topology, "").reply_code == 403


def test_queue_declare_new_existing_and_server_named() -> None:
    topology = Topology("/")
    queue, created = declare_queue(
        topology, "jobs", connection_id="c1", durable=True, arguments={"x-max-length": 10}
    )
    assert created and queue.max_length == 10 and queue.durable
    topology.add_queue(queue)
    assert declare_queue(
        topology, "jobs", connection_id="c2", durable=True, arguments={"x-max-length": 10}
    ) == (queue, False)
    named, created = declare_queue(topology, "", connection_id="c1", exclusive=True)
    assert created and named.name.startswith("amq.gen-") and named.exclusive_owner == "c1"
    assert len(server_generated_name()) == len("amq.gen-") + 22
    fixed, _ = declare_queue(topology, "", connection_id="c1", new_name=lambda: "amq.gen-fixed")
    assert fixed.name == "amq.gen-fixed"
    again = declare_queue(
        topology, "jo\r\nbs", connection_id="c1", durable=True, arguments={"x-max-length": 10}
    )
    assert again == (queue, False)


def test_exclusive_queues_are_never_durable() -> None:
    queue, _ = declare_queue(
        Topology("/"), "mine", connection_id="c1", durable=True, exclusive=True
    )
    assert (queue.durable, queue.exclusive) == (False, True)


@pytest.mark.parametrize(
    ("kwargs", "field", "received", "current"),
    [
        ({"durable": False}, "durable", "'false'", "'true'"),
        ({"durable": True, "auto_delete": True}, "auto_delete", "'true'", "'false'"),
        (
            {"durable": True, "arguments": {"x-message-ttl": 2000}},
            "x-message-ttl",
            "the value '2000' of type 'signedint'",
            "the value '1000' of type 'signedint'",
        ),
        (
            {"durable": True, "arguments": {}},
            "x-message-ttl",
            "none",
            "the value '1000' of type 'signedint'",
        ),
        (
            {"durable": True, "arguments": {"x-message-ttl": 1000, "x-queue-type": "quorum"}},
            "x-queue-type",
            "the value 'quorum' of type 'longstr'",
            "none",
        ),
    ],
)
def test_queue_inequivalent(kwargs: dict, field: str, received: str, current: str) -> None:
    topology = Topology("/")
    topology.add_queue(Queue("q", durable=True, arguments={"x-message-ttl": 1000}))
    error = error_of(declare_queue, topology, "q", connection_id="c1", **kwargs)
    assert error.reply_code == ReplyCode.PRECONDITION_FAILED
    assert error.explanation == (
        f"inequivalent arg '{field}' for queue 'q' in vhost '/': "
        f"received {received} but current is {current}"
    )


def test_queue_redeclare_ignores_arguments_rabbitmq_ignores() -> None:
    """A redeclare that differs only in arguments RabbitMQ does not compare (an unknown
    x-custom, x-queue-type classic where none was given) is accepted and changes nothing."""
    topology = Topology("/")
    existing = Queue("q", durable=True, arguments={"x-custom": 1})
    topology.add_queue(existing)
    queue, new = declare_queue(
        topology,
        "q",
        connection_id="c1",
        durable=True,
        arguments={"x-custom": 2, "x-queue-type": "classic"},
    )
    assert new is False
    assert queue is existing
    assert topology.queues["q"].arguments == {"x-custom": 1}


def test_passive_and_exclusive_queue_access() -> None:
    topology = Topology("/")
    topology.add_queue(Queue("mine", durable=False, exclusive_owner="c1"))
    topology.add_queue(Queue("shared"))
    error = error_of(declare_queue, topology, "nope", connection_id="c1", passive=True)
    assert (error.reply_code, error.explanation) == (404, "no queue 'nope' in vhost '/'")
    assert declare_queue(topology, "mine", connection_id="c1", passive=True)[1] is False
    locked = (
        "cannot obtain exclusive access to locked queue 'mine' in vhost '/'. It could be "
        "originally declared on another connection or the exclusive property value does not "
        "match that of the original declaration."
    )
    for call in (
        lambda: declare_queue(topology, "mine", connection_id="c2", passive=True),
        lambda: declare_queue(topology, "mine", connection_id="c2", exclusive=True),
        lambda: declare_queue(topology, "mine", connection_id="c1"),  # exclusive flag differs
        lambda: check_queue_access(topology, "mine", "c2"),
        lambda: check_queue_delete(topology, "mine", "c2"),
    ):
        error = error_of(call)
        assert (error.reply_code, error.explanation) == (405, locked)
    error = error_of(declare_queue, topology, "shared", connection_id="c1", exclusive=True)
    assert error.reply_code == 405
    assert check_queue_access(topology, "mine", "c1").name == "mine"
    assert check_queue_access(topology, "shared", "c2").name == "shared"


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (
            {"x-max-length": -1},
            "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}",
        ),
        (
            {"x-max-length": "10"},
            "invalid arg 'x-max-length' for queue 'q' in vhost '/': "
            '"expected integer, got longstr"',
        ),
        (
            {"x-max-length": True},
            "invalid arg 'x-max-length' for queue 'q' in vhost '/': \"expected integer, got bool\"",
        ),
        (
            {"x-message-ttl": -5},
            "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-5}",
        ),
        (
            {"x-message-ttl": 10**12},
            "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': "
            "{value_too_large,1000000000000}",
        ),
        ({"x-expires": 0}, "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}"),
        (
            {"x-max-priority": 256},
            "invalid arg 'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,256}",
        ),
        (
            {"x-overflow": "nope"},
            "invalid arg 'x-overflow' for queue 'q' in vhost '/': invalid_overflow",
        ),
        (
            {"x-single-active-consumer": 1},
            "invalid arg 'x-single-active-consumer' for queue 'q' in vhost '/': "
            "{unacceptable_type,signedint}",
        ),
        (
            {"x-dead-letter-routing-key": "rk"},
            "invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost '/': "
            "routing_key_but_no_dlx_defined",
        ),
        (
            {"x-dead-letter-exchange": 7},
            "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'",
        ),
        (
            {"x-queue-mode": "eager"},
            "invalid arg 'x-queue-mode' for queue 'q' in vhost '/': "
            "\"unsupported queue mode 'eager'\"",
        ),
        (
            {"x-queue-type": "streams"},
            "invalid arg 'x-queue-type' for queue 'q' in vhost '/': "
            "\"unsupported queue type 'streams'\"",
        ),
        (
            {"x-queue-type": "stream", "x-max-length": 5},
            "invalid arg 'x-max-length' for queue 'q' in vhost '/' of queue type "
            "rabbit_stream_queue",
        ),
        (
            {"x-queue-type": "stream", "x-max-age": "1X"},
            "invalid arg 'x-max-age' for queue 'q' in vhost '/': invalid_max_age",
        ),
        (
            {"x-max-age": "1D"},
            "invalid arg 'x-max-age' for queue 'q' in vhost '/' of queue type rabbit_classic_queue",
        ),
        (
            {"x-queue-type": "quorum", "x-max-priority": 5},
            "invalid arg 'x-max-priority' for queue 'q' in vhost '/'"
            " of queue type rabbit_quorum_queue",
        ),
    ],
)
def test_queue_argument_validation(arguments: dict, text: str) -> None:
    error = error_of(
        declare_queue, Topology("/"), "q", connection_id="c1", durable=True, arguments=arguments
    )
    assert (error.reply_code, error.explanation) == (406, text)


def test_valid_queue_arguments_and_accessors() -> None:
    arguments = {
        "x-message-ttl": 0,
        "x-expires": 60000,
        "x-max-length": 0,
        "x-max-length-bytes": 10**9,
        "x-dead-letter-exchange": "dlx",
        "x-dead-letter-routing-key": "dead",
        "x-single-active-consumer": True,
        "x-overflow": "reject-publish",
        "x-max-priority": 10,
        "x-unknown-plugin-arg": {"any": "thing"},
    }
    queue, created = declare_queue(
        Topology("/"), "q", connection_id="c1", durable=True, arguments=arguments
    )
    assert created
    assert (queue.message_ttl, queue.expires, queue.max_length) == (0, 60000, 0)
    assert (queue.dead_letter_exchange, queue.dead_letter_routing_key) == ("dlx", "dead")
    assert queue.single_active_consumer and queue.overflow == "reject-publish"
    assert queue.queue_type == "classic"


def test_quorum_queue_properties() -> None:
    topology = Topology("/")
    quorum = {"x-queue-type": "quorum"}
    queue, _ = declare_queue(topology, "qq", connection_id="c1", durable=True, arguments=quorum)
    assert queue.queue_type == "quorum"
    for kwargs, prop in (
        ({"durable": True, "auto_delete": True}, "auto-delete"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": False}, "non-durable"),
    ):
        error = error_of(
            declare_queue, topology, "qq", connection_id="c1", arguments=quorum, **kwargs
        )
        assert error.explanation == f"invalid property '{prop}' for queue 'qq' in vhost '/'"
    error = error_of(
        declare_queue, topology, "", connection_id="c1", durable=True, arguments=quorum
    )
    assert error.explanation == "Cannot declare a server-named queue for type rabbit_quorum_queue"


def test_reserved_queue_names() -> None:
    topology = Topology("/")
    topology.add_queue(Queue("amq.gen-abc", durable=False, exclusive_owner="c1"))
    error = error_of(declare_queue, topology, "amq.gen-abc", connection_id="c1", exclusive=True)
    assert (error.reply_code, error.explanation) == (
        403,
        "queue name 'amq.gen-abc' contains reserved prefix 'amq.*'",
    )
    assert declare_queue(topology, "amq.gen-abc", connection_id="c1", passive=True)[1] is False


def test_queue_delete_rules() -> None:
    topology = base_topology()
    assert check_queue_delete(topology, "missing", "c1") is None
    assert check_queue_delete(topology, "q1", "c1", if_unused=True, consumers=0) is not None
    error = error_of(check_queue_delete, topology, "q1", "c1", if_unused=True, consumers=2)
    assert error.explanation == "queue 'q1' in vhost '/' in use"
    error = error_of(check_queue_delete, topology, "q1", "c1", if_empty=True, messages=5)
    assert error.explanation == "queue 'q1' in vhost '/' not empty"


# --- bindings ----------------------------------------------------------------------------


def test_bind_checks() -> None:
    topology = base_topology()
    topology.add_queue(Queue("private", durable=False, exclusive_owner="c1"))
    binding = check_bind(topology, "amq.topic", "q1", Q, "a.#", connection_id="c2")
    assert binding == Binding("amq.topic", "q1", Q, "a.#")
    assert check_bind(
        topology, "amq.topic", "amq.fanout", X, "#", connection_id="c2"
    ).destination == ("amq.fanout")
    cases = [
        (("nope", "q1", Q), 404, "no exchange 'nope' in vhost '/'"),
        (("amq.topic", "nope", Q), 404, "no queue 'nope' in vhost '/'"),
        (("amq.topic", "nope", X), 404, "no exchange 'nope' in vhost '/'"),
        (("nope", "nope", Q), 404, "no exchange 'nope' in vhost '/'"),
        (("", "q1", Q), 403, "operation not permitted on the default exchange"),
        (("amq.topic", "", X), 403, "operation not permitted on the default exchange"),
        (
            ("amq.topic", "private", Q),
            405,
            "cannot obtain exclusive access to locked queue 'private' in vhost '/'. It could be "
            "originally declared on another connection or the exclusive property value does not "
            "match that of the original declaration.",
        ),
    ]
    for ends, code, text in cases:
        error = error_of(check_bind, topology, *ends, connection_id="c2")
        assert (error.reply_code, error.explanation) == (code, text)


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (
            {"x-match": "most"},
            'Invalid x-match field value <<"most">>; expected all, any, all-with-x, or any-with-x',
        ),
        ({"x-match": 1}, "Invalid x-match field type signedint (value 1); expected longstr"),
    ],
)
def test_headers_binding_validation(arguments: dict, text: str) -> None:
    error = error_of(
        check_bind, base_topology(), "amq.headers", "q1", Q, "", arguments, connection_id="c1"
    )
    assert (error.reply_code, error.explanation) == (406, text)


def test_unbind_is_idempotent() -> None:
    topology = base_topology()
    binding = Binding("amq.direct", "q1", Q, "k", {"a": 1})
    assert topology.add_binding(binding)
    assert not topology.add_binding(Binding("amq.direct", "q1", Q, "k", {"a": 1}))
    assert check_unbind(topology, "amq.direct", "q1", Q, "k", {"a": 2}, connection_id="c1") is None
    assert check_unbind(topology, "nope", "nope", Q, "k", connection_id="c1") is None
    assert (
        check_unbind(topology, "amq.direct", "q1", Q, "k", {"a": 1}, connection_id="c1") == binding
    )
    assert topology.remove_binding(binding) == []
    assert route(topology, "amq.direct", "k") == frozenset()


def test_deletes_cascade_to_bindings_and_auto_delete_exchanges() -> None:
    topology = base_topology()
    topology.add_exchange(Exchange("auto", ExchangeType.FANOUT, auto_delete=True))
    topology.add_exchange(Exchange("auto2", ExchangeType.FANOUT, auto_delete=True))
    topology.add_binding(Binding("auto", "q1", Q))
    topology.add_binding(Binding("auto", "auto2", X))
    topology.add_binding(Binding("auto2", "q2", Q))
    topology.add_binding(Binding("amq.fanout", "q1", Q))
    # Deleting q2 leaves auto2 without source bindings: it goes.
    assert topology.remove_queue("q2") == ["auto2"]
    # auto lost its binding to auto2, keeps the one to q1.
    assert "auto" in topology.exchanges
    assert topology.remove_queue("q1") == ["auto"]
    assert list(topology.bindings()) == []
    assert topology.remove_queue("q1") == []


def test_exchange_delete_drops_bindings_both_ways() -> None:
    topology = base_topology()
    topology.add_exchange(Exchange("mid", ExchangeType.FANOUT))
    topology.add_binding(Binding("amq.fanout", "mid", X))
    topology.add_binding(Binding("mid", "q1", Q))
    assert topology.remove_exchange("mid") == ["mid"]
    assert list(topology.bindings()) == []
    assert route(topology, "amq.fanout", "") == frozenset()
    assert topology.remove_exchange("mid") == []
