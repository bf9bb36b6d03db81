"""Kafka's ACL model on the in-memory ports (security/rights.py, docs/security.md): LITERAL
and PREFIXED patterns, DENY over ALLOW, `User:*`, hosts, Kafka's implications, the
ACL APIs' filters (ANY, MATCH), the upgrade of stored namespace grants, and the AMQP side
reading the same rules."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.amqp.authorization import authorize_method, authorize_publish, may_open
from pulsar_gateway.handlers.amqp.errors import AmqpError
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.rights import Rights, RightsError, RightsTable
from pulsar_gateway.storage.users import check_user_name
from pulsar_gateway.tools.users_cli import change_rights, describe_rights
from tests.unit.test_authorization import (
    ALL,
    DENY,
    LITERAL,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    Guarded,
    any_filter,
    creation,
)
from tests.unit.test_kafka_apis import run

REFUSED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def rule(name: str, operation: str, **fields: Any) -> model.Rule:
    return model.make_rule(
        fields.get("resource", model.TOPIC),
        fields.get("pattern", model.LITERAL),
        name,
        operation,
        fields.get("permission", model.ALLOW),
        fields.get("host", "*"),
    )


def test_deny_wins_and_implications_are_kafkas() -> None:
    rights = model.with_rules(
        Rights(),
        [
            rule("orders-", model.ALL, pattern=model.PREFIXED),
            rule("orders-secret", model.READ, permission=model.DENY),
            rule("audit", model.ALTER_CONFIGS),
            rule("logs", model.ALL, permission=model.DENY),
            rule("logs", model.READ),
        ],
    )
    assert rights.allows(model.TOPIC, "orders-1", model.WRITE)
    assert not rights.allows(model.TOPIC, "orders-secret", model.READ)
    assert rights.allows(model.TOPIC, "orders-secret", model.WRITE)
    # a DENY of READ does not deny DESCRIBE (implications are for ALLOW only)
    assert rights.allows(model.TOPIC, "orders-secret", model.DESCRIBE)
    assert rights.allows(model.TOPIC, "audit", model.DESCRIBE_CONFIGS)
    assert not rights.allows(model.TOPIC, "audit", model.DESCRIBE)
    assert not rights.allows(model.TOPIC, "logs", model.READ)
    assert not rights.allows(model.TOPIC, "logs", model.DESCRIBE)
    assert not rights.allows(model.TOPIC, "other", model.READ)
    # a topic answering to two names: a DENY of either refuses
    assert not rights.allows(model.TOPIC, ("public/default/orders-secret", "orders-secret"), "read")
    assert Rights(rights.rules, superuser=True).allows(model.TOPIC, "logs", model.READ)


OPERATIONS = [
    model.READ,
    model.WRITE,
    model.DELETE,
    model.ALTER,
    model.DESCRIBE,
    model.ALTER_CONFIGS,
    model.DESCRIBE_CONFIGS,
    model.ALL,
]
patterns = st.sampled_from(
    [(model.LITERAL, name) for name in ("a", "ab", "abc", "b", "*")]
    + [(model.PREFIXED, name) for name in ("a", "ab", "b")]
)
random_rules = st.lists(
    st.tuples(
        patterns,
        st.sampled_from(OPERATIONS),
        st.sampled_from([model.ALLOW, model.DENY]),
        st.sampled_from(["*", "10.0.0.1"]),
    ).map(lambda t: model.make_rule(model.TOPIC, t[0][0], t[0][1], t[1], t[2], t[3])),
    max_size=8,
)


def spec(rules: list[model.Rule], name: str, operation: str, host: str) -> bool:
    """Kafka's decision, said plainly: no DENY applies, and some ALLOW does."""

    def applies(r: model.Rule) -> bool:
        named = name.startswith(r.name) if r.pattern == model.PREFIXED else r.name in (name, "*")
        return named and r.host in ("*", host)

    implied = {
        model.DESCRIBE: {model.READ, model.WRITE, model.DELETE, model.ALTER},
        model.DESCRIBE_CONFIGS: {model.ALTER_CONFIGS},
    }
    denied = any(
        applies(r) and r.permission == model.DENY and r.operation in (operation, model.ALL)
        for r in rules
    )
    granted = any(
        applies(r)
        and r.permission == model.ALLOW
        and (r.operation in (operation, model.ALL) or r.operation in implied.get(operation, ()))
        for r in rules
    )
    return granted and not denied


@settings(max_examples=examples(300), deadline=None)
@given(
    random_rules,
    st.sampled_from(["a", "ab", "abc", "b", "c"]),
    st.sampled_from(OPERATIONS[:-1]),
    st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    st.randoms(use_true_random=False),
)
def test_the_decision_is_kafkas_in_any_order_and_survives_its_record(
    rules: list[model.Rule], name: str, operation: str, host: str, shuffler: Any
) -> None:
    rights = model.with_rules(Rights(), rules)
    expected = spec(rules, name, operation, host)
    assert rights.allows(model.TOPIC, name, operation, host) == expected
    shuffled = list(rights.rules)
    shuffler.shuffle(shuffled)
    assert Rights(tuple(shuffled)).allows(model.TOPIC, name, operation, host) == expected
    record = json.loads(json.dumps(model.to_record(rights)))
    assert model.from_record(record) == rights


def test_allows_any_and_namespaces_see_through_rules() -> None:
    rights = model.with_rules(
        Rights(),
        [
            rule("t/", model.WRITE, pattern=model.PREFIXED),
            rule("t/", model.WRITE, pattern=model.PREFIXED, permission=model.DENY),
        ],
    )
    assert not rights.allows_any(model.TOPIC, model.WRITE)  # the DENY hides every name
    rights = model.with_rules(Rights(), [rule("x", model.WRITE)])
    assert rights.allows_any(model.TOPIC, model.WRITE)
    assert not rights.allows_any(model.TOPIC, model.READ)
    ns = model.with_rules(Rights(), [rule("team/a/", model.READ, pattern=model.PREFIXED)])
    assert ns.allows_some_topic_in("team/a", short=False)
    assert not ns.allows_some_topic_in("team/b", short=False)
    short = model.with_rules(Rights(), [rule("orders", model.READ)])
    assert short.allows_some_topic_in("public/default", short=True)
    assert not short.allows_some_topic_in("public/other", short=False)


def test_hosts_and_user_star() -> None:
    table = RightsTable(
        {
            "*": model.with_rules(Rights(), [rule("shared", model.READ)]),
            "bob": model.with_rules(
                Rights(),
                [
                    rule("lab", model.WRITE, host="10.0.0.7"),
                    rule("shared", model.READ, permission=model.DENY, host="192.0.2.9"),
                ],
            ),
        }
    )
    authorizer = Authorizer(table, superusers=["root"])
    from_lab = authorizer.bound("kafka", "10.0.0.7:5000", "bob")
    elsewhere = authorizer.bound("kafka", "192.0.2.9:5000", "bob")
    carol = authorizer.bound("kafka", "[::ffff:10.0.0.7]:1", "carol")
    assert from_lab.may(model.TOPIC, "lab", model.WRITE)
    assert not elsewhere.may(model.TOPIC, "lab", model.WRITE)
    assert from_lab.may(model.TOPIC, "shared", model.READ)  # User:*'s rule
    assert not elsewhere.may(model.TOPIC, "shared", model.READ)  # bob's DENY from there
    assert carol.may(model.TOPIC, "shared", model.READ)
    assert not carol.may(model.TOPIC, "lab", model.WRITE)
    assert model.normal_host("::ffff:10.0.0.7") == "10.0.0.7"
    with pytest.raises(RightsError):
        model.normal_host("lab.example")
    with pytest.raises(ValueError, match="every user"):
        check_user_name("*")
    # a change to User:*'s rules reaches an open connection at its next check
    run(lambda: table.set_rights("*", Rights()))
    assert not carol.may(model.TOPIC, "shared", model.READ)


def test_stored_namespace_grants_are_upgraded_to_rules() -> None:
    old = {
        "superuser": False,
        "grants": [
            {"resource": "namespace", "name": "team/a", "operations": ["read", "describe"]},
            {"resource": "namespace", "name": "team/*", "operations": ["alter"]},
            {
                "resource": "namespace",
                "name": "*",
                "operations": ["read", "write", "describe", "create", "delete", "alter"],
            },
            {"resource": "group", "name": "a-*", "operations": ["read"]},
            {"resource": "cluster", "name": "", "operations": ["describe"]},
            {"resource": "transactional_id", "name": "tx", "operations": ["write"]},
        ],
    }
    rights = model.from_record(old)
    seen = {(r.resource, r.pattern, r.name, r.operation) for r in rights.rules}
    assert seen == {
        (model.TOPIC, model.PREFIXED, "team/a/", model.READ),
        (model.TOPIC, model.PREFIXED, "team/a/", model.DESCRIBE),
        (model.TOPIC, model.PREFIXED, "team/a/", model.DESCRIBE_CONFIGS),
        (model.TOPIC, model.PREFIXED, "team/", model.ALTER),
        (model.TOPIC, model.PREFIXED, "team/", model.ALTER_CONFIGS),
        (model.TOPIC, model.LITERAL, "*", model.ALL),
        (model.GROUP, model.PREFIXED, "a-", model.READ),
        (model.CLUSTER, model.LITERAL, "kafka-cluster", model.DESCRIBE),
        (model.CLUSTER, model.LITERAL, "kafka-cluster", model.DESCRIBE_CONFIGS),
        (model.TRANSACTIONAL_ID, model.LITERAL, "tx", model.WRITE),
    }
    record = json.loads(json.dumps(model.to_record(rights)))
    assert "grants" not in record and model.from_record(record) == rights
    with pytest.raises(RightsError):
        model.from_record({"acls": [{"resource": "topic", "pattern": "match", "name": "x"}]})


def test_literal_prefixed_and_deny_acls_apply_to_the_next_request() -> None:
    async def scenario() -> None:
        broker = Guarded("root")
        for name in ("orders", "orders-eu", "payments", "team-b/orders/t"):
            await broker.storage.topics.create(broker.context.pulsar_name(name), 1)
        created = await broker.call(
            ApiKey.CREATE_ACLS,
            3,
            {
                "creations": [
                    creation(TOPIC, "payments", LITERAL, WRITE),
                    creation(TOPIC, "orders", PREFIXED, READ),
                    creation(TOPIC, "orders-eu", LITERAL, ALL, permission=DENY),
                ]
            },
        )
        assert [r["error_code"] for r in created["results"]] == [ErrorCode.NONE] * 3
        broker.login("bob")
        assert (await broker.produce("payments", [b"v"]))["error_code"] == ErrorCode.NONE
        assert (await broker.produce("orders", [b"v"]))["error_code"] == REFUSED
        assert (await broker.fetch("orders", 0))["error_code"] == ErrorCode.NONE
        assert (await broker.fetch("orders-eu", 0))["error_code"] == REFUSED  # DENY wins
        assert (await broker.fetch("payments", 0))["error_code"] == REFUSED
        # the same topic spelled in full is the same topic: the DENY holds
        full = broker.context.pulsar_name("orders-eu").split("://")[1]
        assert (await broker.fetch(full, 0))["error_code"] == REFUSED
        listed = await broker.metadata(None)
        assert sorted(t["name"] for t in listed["topics"]) == ["orders", "payments"]
        # the next request after a DeleteAcls is refused
        broker.login("root")
        deleted = await broker.call(
            ApiKey.DELETE_ACLS,
            3,
            {"filters": [any_filter(kind=TOPIC, name="payments", pattern=LITERAL)]},
        )
        [result] = deleted["filter_results"]
        assert [(a["resource_name"], a["operation"]) for a in result["matching_acls"]] == [
            ("payments", WRITE)
        ]
        broker.login("bob")
        assert (await broker.produce("payments", [b"v"]))["error_code"] == REFUSED

    run(scenario)


def test_describe_filters_match_and_any_and_delete_answers_what_it_removed() -> None:
    async def scenario() -> None:
        broker = Guarded("root")
        await broker.call(
            ApiKey.CREATE_ACLS,
            3,
            {
                "creations": [
                    creation(TOPIC, "orders", PREFIXED, READ),
                    creation(TOPIC, "orders-eu", LITERAL, READ, permission=DENY),
                    creation(TOPIC, "*", LITERAL, WRITE, principal="User:*"),
                    creation(TOPIC, "other", LITERAL, READ),
                    creation(TOPIC, "orders-eu", LITERAL, WRITE, host="10.0.0.1"),
                ]
            },
        )

        async def described(**fields: Any) -> set[tuple[str, int, str, int]]:
            answer = await broker.call(ApiKey.DESCRIBE_ACLS, 3, any_filter(**fields))
            assert answer["error_code"] == ErrorCode.NONE
            return {
                (r["resource_name"], r["pattern_type"], a["principal"], a["operation"])
                for r in answer["resources"]
                for a in r["acls"]
                if a["principal"] != "User:alice"
            }

        match = await described(kind=TOPIC, name="orders-eu", pattern=2)
        assert match == {
            ("orders", PREFIXED, "User:bob", READ),
            ("orders-eu", LITERAL, "User:bob", READ),
            ("orders-eu", LITERAL, "User:bob", WRITE),
            ("*", LITERAL, "User:*", WRITE),
        }
        exact = await described(kind=TOPIC, name="orders-eu", pattern=1)  # ANY: the name
        assert {entry[0] for entry in exact} == {"orders-eu"}
        assert await described(kind=TOPIC, pattern=PREFIXED) == {
            ("orders", PREFIXED, "User:bob", READ)
        }
        denies = await broker.call(ApiKey.DESCRIBE_ACLS, 3, {**any_filter(), "permission_type": 2})
        assert [r["resource_name"] for r in denies["resources"]] == ["orders-eu"]
        hosts = await broker.call(
            ApiKey.DESCRIBE_ACLS, 3, {**any_filter(), "host_filter": "10.0.0.1"}
        )
        assert [a["host"] for r in hosts["resources"] for a in r["acls"]] == ["10.0.0.1"]
        deleted = await broker.call(
            ApiKey.DELETE_ACLS,
            3,
            {
                "filters": [
                    any_filter(kind=TOPIC, name="orders-eu", pattern=2, principal="User:bob"),
                    {**any_filter(), "resource_type_filter": 0},
                ]
            },
        )
        matched, invalid = deleted["filter_results"]
        assert invalid["error_code"] == ErrorCode.INVALID_REQUEST
        assert len(matched["matching_acls"]) == 3
        assert all(a["principal"] == "User:bob" for a in matched["matching_acls"])
        left = {r.name for r in broker.table.rights_of("bob").rules}
        assert left == {"other"}
        assert broker.table.rights_of("*").rules  # User:*'s untouched

    run(scenario)


def test_amqp_honours_the_same_rules_and_a_deny() -> None:
    rights = model.grant(Rights(), model.NAMESPACE, "public/default", ["all"])
    rights = model.with_rules(rights, [rule("secret", model.ALL, permission=model.DENY)])
    table = RightsTable(
        {"bob": rights, "carol": model.with_rules(Rights(), [rule("jobs", "read")])}
    )
    authorizer = Authorizer(table, short_namespace="public/default")
    bob = authorizer.bound("amqp", "192.0.2.1:5000", "bob")
    assert may_open(bob, "public/default", "/")
    authorize_method(bob, "public/default", "/", commands.Queue.Declare(queue="jobs"))
    authorize_publish(bob, "public/default", "/", "", "jobs")
    for method in (
        commands.Queue.Declare(queue="secret"),
        commands.Basic.Consume(queue="secret"),
        commands.Basic.Get(queue="secret"),
    ):
        with pytest.raises(AmqpError, match="queue 'secret'"):
            authorize_method(bob, "public/default", "/", method)
    with pytest.raises(AmqpError, match="exchange 'amq.default'"):
        authorize_publish(bob, "public/default", "/", "", "secret")
    carol = authorizer.bound("amqp", "192.0.2.1:5000", "carol")
    assert may_open(carol, "public/default", "/")  # a short-name rule reaches vhost `/`
    assert not may_open(carol, "public/other", "other")
    authorize_method(carol, "public/default", "/", commands.Basic.Get(queue="jobs"))
    with pytest.raises(AmqpError):
        authorize_method(carol, "public/default", "/", commands.Basic.Get(queue="other"))


def test_users_command_writes_and_shows_rules() -> None:
    def args(action: str, **fields: Any) -> argparse.Namespace:
        base = dict(
            users_command=action,
            superuser=False,
            namespace=None,
            topic=None,
            group=None,
            transactional_id=None,
            operations=None,
            deny=False,
            host="*",
        )
        return argparse.Namespace(**{**base, **fields})

    rights = change_rights(args("grant", topic="orders-*", operations="read,write"), Rights())
    rights = change_rights(args("grant", topic="orders-eu", operations="all", deny=True), rights)
    rights = change_rights(
        args("grant", namespace="team/a", operations="describe", host="10.0.0.1"), rights
    )
    assert describe_rights("bob", rights) == [
        "bob  allow topic prefixed orders-: read,write",
        "bob  deny topic literal orders-eu: all",
        "bob  allow topic prefixed team/a/ from 10.0.0.1: describe",
    ]
    rights = change_rights(args("revoke", topic="orders-eu", deny=True), rights)
    rights = change_rights(args("revoke", topic="orders-*", operations="write"), rights)
    assert describe_rights("bob", rights)[0] == "bob  allow topic prefixed orders-: read"
    with pytest.raises(RightsError):
        change_rights(args("grant", topic="orders", operations="idempotent_write"), rights)
    with pytest.raises(RightsError):
        change_rights(args("grant", topic="x", operations="read", host="a.b"), rights)


def test_authorized_operations_are_reported_when_asked() -> None:
    """KIP-430: Metadata's, DescribeCluster's and DescribeGroups's bit fields."""

    async def scenario() -> None:
        broker = Guarded("root")
        await broker.storage.topics.create(broker.context.pulsar_name("orders"), 1)
        rights = model.with_rules(
            Rights(),
            [
                rule("orders", model.READ),
                rule("orders", model.ALTER_CONFIGS),
                rule("orders", model.DESCRIBE_CONFIGS, permission=model.DENY),
                rule("kafka-cluster", model.DESCRIBE, resource=model.CLUSTER),
                rule("g", model.READ, resource=model.GROUP),
            ],
        )
        await broker.table.set_rights("bob", rights)
        broker.login("bob")

        async def topic_bits(asked: bool) -> int:
            body = {
                "topics": [{"name": "orders", "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": asked,
            }
            answer = await broker.call(ApiKey.METADATA, 12, body)
            return int(answer["topics"][0]["topic_authorized_operations"])

        assert await topic_bits(False) == -2147483648
        assert await topic_bits(True) == (1 << 3) | (1 << 8) | (1 << 11)  # READ DESCRIBE ALTER_C
        cluster = await broker.call(
            ApiKey.DESCRIBE_CLUSTER,
            1,
            {"include_cluster_authorized_operations": True, "endpoint_type": 1},
        )
        assert cluster["cluster_authorized_operations"] == 1 << 8
        groups = await broker.call(
            ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g"], "include_authorized_operations": True}
        )
        assert groups["groups"][0]["authorized_operations"] == (1 << 3) | (1 << 8)
        broker.login("root")
        assert await topic_bits(True) == sum(
            1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11)
        )  # every operation Kafka lists for a topic

    run(scenario)


def test_the_host_is_the_peers_address() -> None:
    authorizer = Authorizer(RightsTable())
    assert authorizer.bound("kafka", "::1:5000", "u").host == "::1"
    assert authorizer.bound("kafka", "[::1]:5000", "u").host == "::1"
    assert authorizer.bound("kafka", "192.0.2.1:5000", "u").host == "192.0.2.1"
    assert authorizer.bound("http", "::1", "u", host="::1").host == "::1"
    assert authorizer.bound("http", "192.0.2.1", "u", host="192.0.2.1").host == "192.0.2.1"
    assert authorizer.bound("kafka", "-", "u").host is None
