"""The authorizer on the in-memory ports: the rights model, every Kafka API that names a
topic, group or the cluster, the ACL APIs, and the AMQP operation map.

A user `alice` holds everything on namespace `team-a/orders` and on groups `a-*`; the
same requests against `team-b/orders` and group `b-g` must be refused with Kafka's
*_AUTHORIZATION_FAILED codes, and a grant must apply to the very next request.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.amqp.authorization import (
    authorize_method,
    authorize_publish,
    may_open,
)
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.rights import Rights, RightsError, RightsTable
from tests.unit.test_kafka_apis import Broker, run

A_TOPIC, B_TOPIC = "team-a/orders/t", "team-b/orders/t"


def alice_rights() -> Rights:
    rights = model.grant(Rights(), model.NAMESPACE, "team-a/orders", ["all"])
    return model.grant(rights, model.GROUP, "a-*", ["read", "describe", "delete"])


class Guarded(Broker):
    """A Kafka context whose connection belongs to `user`, bound by the table's rights."""

    def __init__(self, user: str = "alice", **settings: Any) -> None:
        super().__init__(**settings)
        self.table = RightsTable({"alice": alice_rights()})
        self.authorizer = Authorizer(self.table, superusers=["root"])
        self.login(user)

    def login(self, user: str) -> None:
        access = self.authorizer.bound("kafka", "192.0.2.1:5000", user)
        self.context = dataclasses.replace(self.context, authorizer=self.authorizer, access=access)

    async def topics(self) -> None:
        for name in (A_TOPIC, B_TOPIC, "orders"):
            await self.storage.topics.create(self.context.pulsar_name(name), 1)

    async def metadata(self, names: list[str] | None, create: bool = False) -> dict[str, Any]:
        topics = None if names is None else [{"name": n, "topic_id": None} for n in names]
        body = {"topics": topics, "allow_auto_topic_creation": create}
        return await self.call(ApiKey.METADATA, 12, body)

    async def list_offsets(self, name: str) -> int:
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        }
        response = await self.call(ApiKey.LIST_OFFSETS, 8, body)
        return int(response["topics"][0]["partitions"][0]["error_code"])

    async def create_topic(self, name: str) -> int:
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": False,
        }
        return int((await self.call(ApiKey.CREATE_TOPICS, 7, body))["topics"][0]["error_code"])

    async def delete_topic(self, name: str) -> int:
        body = {"topic_names": [name], "timeout_ms": 1000}
        return int((await self.call(ApiKey.DELETE_TOPICS, 5, body))["responses"][0]["error_code"])

    async def grow(self, name: str) -> int:
        body = {
            "topics": [{"name": name, "count": 2, "assignments": None}],
            "timeout_ms": 1000,
            "validate_only": True,
        }
        return int((await self.call(ApiKey.CREATE_PARTITIONS, 3, body))["results"][0]["error_code"])

    async def describe_configs(self, kind: int, name: str) -> int:
        body = {
            "resources": [
                {"resource_type": kind, "resource_name": name, "configuration_keys": None}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        }
        return int((await self.call(ApiKey.DESCRIBE_CONFIGS, 4, body))["results"][0]["error_code"])

    async def commit(self, group: str, topic: str) -> int:
        body = {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 0,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        response = await self.call(ApiKey.OFFSET_COMMIT, 8, body)
        return int(response["topics"][0]["partitions"][0]["error_code"])

    async def offset_fetch(self, group: str, topic: str | None) -> tuple[int, list[int]]:
        topics = None if topic is None else [{"name": topic, "partition_indexes": [0]}]
        body = {"groups": [{"group_id": group, "topics": topics}], "require_stable": False}
        [answer] = (await self.call(ApiKey.OFFSET_FETCH, 8, body))["groups"]
        codes = [p["error_code"] for t in answer["topics"] for p in t["partitions"]]
        return int(answer["error_code"]), codes


def test_rights_grant_revoke_patterns_and_implied_describe() -> None:
    rights = model.grant(Rights(), model.NAMESPACE, "t/*", ["read"])
    rights = model.grant(rights, model.NAMESPACE, "t/*", ["write", "read"])  # merged
    assert [(r.resource, r.pattern, r.name) for r in rights.rules] == [
        (model.TOPIC, model.PREFIXED, "t/")
    ] * 2
    assert rights.allows(model.TOPIC, "t/ns/x", model.DESCRIBE)  # implied by read
    assert not rights.allows(model.TOPIC, "t2/ns/x", model.READ)
    assert not rights.allows(model.TOPIC, "t/ns/x", model.CREATE)
    rights = model.revoke(rights, model.NAMESPACE, "t/*", ["read", "write"])
    assert rights.empty
    admin = model.grant(Rights(), model.NAMESPACE, "x/y", ["admin"])
    assert {r.operation for r in admin.rules} == {model.CREATE, model.DELETE, model.ALTER}
    assert not admin.allows(model.TOPIC, "x/y/t", model.READ)
    assert admin.allows(model.TOPIC, "x/y/t", model.DESCRIBE)  # implied by alter
    groups = model.grant(Rights(), model.GROUP, "app-*", ["read"])
    assert groups.allows(model.GROUP, "app-1", model.READ)
    assert not groups.allows(model.GROUP, "other", model.READ)
    for resource, pattern, ops in [
        (model.NAMESPACE, "t/ns/topic", ["read"]),
        (model.NAMESPACE, "t*", ["read"]),
        (model.NAMESPACE, "t/ns", ["idempotent_write"]),
        (model.GROUP, "a*b", ["read"]),
        (model.CLUSTER, "", ["read"]),
        (model.NAMESPACE, "t/ns", []),
    ]:
        with pytest.raises(RightsError):
            model.grant(Rights(), resource, pattern, ops)
    assert Rights(superuser=True).allows(model.CLUSTER, "", model.ALTER)


grants = st.lists(
    st.tuples(
        st.sampled_from(
            [
                (model.NAMESPACE, "a/b"),
                (model.NAMESPACE, "a/*"),
                (model.NAMESPACE, "*"),
                (model.GROUP, "g"),
                (model.GROUP, "g-*"),
                (model.CLUSTER, ""),
            ]
        ),
        st.lists(st.sampled_from(["read", "write", "describe", "admin", "all"]), min_size=1),
    ),
    max_size=8,
)


@settings(max_examples=examples(200), deadline=None)
@given(grants, st.booleans())
def test_rights_survive_their_record(items: list[Any], superuser: bool) -> None:
    rights = Rights(superuser=superuser)
    for (resource, pattern), words in items:
        usable = [w for w in words if w in (*model.USEFUL[resource], "admin", "all")]
        if usable:
            rights = model.grant(rights, resource, pattern, usable)
    record = json.loads(json.dumps(model.to_record(rights)))
    assert model.from_record(record) == rights


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(st.sampled_from(["grants", "acls", "superuser", "x"]), json_values))
def test_a_hostile_rights_record_is_refused_or_read_never_crashes(record: Any) -> None:
    """The decoder of stored records: anything else than RightsError is a bug."""
    try:
        rights = model.from_record(record)
    except RightsError:
        return
    assert isinstance(rights, Rights)


def test_kafka_user_of_namespace_a_is_refused_everything_in_b() -> None:
    async def scenario() -> None:
        broker = Guarded(auto_create_topics=True)
        await broker.topics()
        for name in (A_TOPIC, B_TOPIC, "orders"):
            expected = ErrorCode.NONE if name == A_TOPIC else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert (await broker.produce(name, [b"v"]))["error_code"] == expected, name
            assert (await broker.fetch(name, 0))["error_code"] == expected, name
            assert await broker.list_offsets(name) == expected, name
            assert await broker.describe_configs(2, name) == expected, name
            assert await broker.grow(name) == expected, name
            named = await broker.metadata([name])
            assert named["topics"][0]["error_code"] == expected, name
            assert bool(named["topics"][0]["partitions"]) == (not expected), name
        listed = await broker.metadata(None)
        assert [t["name"] for t in listed["topics"]] == [A_TOPIC]
        # creating: only in team-a/orders, whether by CreateTopics or auto-creation
        assert await broker.create_topic("team-a/orders/new") == ErrorCode.NONE
        assert (
            await broker.create_topic("team-b/orders/new") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
        auto = await broker.metadata(["team-b/orders/auto"], create=True)
        assert auto["topics"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert broker.storage.topics.get("persistent://team-b/orders/auto") is None
        auto = await broker.metadata(["team-a/orders/auto"], create=True)
        assert auto["topics"][0]["error_code"] == ErrorCode.NONE
        assert await broker.describe_configs(4, "0") == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert await broker.delete_topic(B_TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert broker.storage.topics.get("persistent://" + B_TOPIC) is not None
        assert await broker.delete_topic(A_TOPIC) == ErrorCode.NONE

    run(scenario)


def test_kafka_group_apis_need_the_group_right() -> None:
    async def scenario() -> None:
        broker = Guarded()
        await broker.topics()
        join = {
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}],
            "reason": None,
        }
        member = {"generation_id": 1, "member_id": "m", "group_instance_id": None}
        refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
        for version in (0, 5, 9):
            body = {**join, "group_id": "b-g"}
            answer = await broker.call(ApiKey.JOIN_GROUP, version, body)
            assert answer["error_code"] == refused
        sync = {**member, "group_id": "b-g", "protocol_type": None, "protocol_name": None}
        assert (await broker.call(ApiKey.SYNC_GROUP, 5, {**sync, "assignments": []}))[
            "error_code"
        ] == refused
        beat = await broker.call(ApiKey.HEARTBEAT, 4, {**member, "group_id": "b-g"})
        assert beat["error_code"] == refused
        leave = {"group_id": "b-g", "members": [{"member_id": "m", "group_instance_id": None}]}
        assert (await broker.call(ApiKey.LEAVE_GROUP, 5, leave))["error_code"] == refused
        assert (await broker.call(ApiKey.LEAVE_GROUP, 0, {"group_id": "b-g", "member_id": "m"}))[
            "error_code"
        ] == refused
        found = await broker.call(
            ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["b-g", "a-1"]}
        )
        assert [c["error_code"] for c in found["coordinators"]] == [refused, ErrorCode.NONE]
        # commits: the group first, then the topic
        assert await broker.commit("b-g", A_TOPIC) == refused
        assert await broker.commit("a-1", B_TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert await broker.commit("a-1", A_TOPIC) == ErrorCode.NONE
        assert await broker.offset_fetch("b-g", None) == (refused, [])
        assert await broker.offset_fetch("a-1", B_TOPIC) == (
            ErrorCode.NONE,
            [ErrorCode.TOPIC_AUTHORIZATION_FAILED],
        )
        # b-g has offsets on a topic alice may not see: the "all topics" form leaves it out
        broker.login("root")
        assert await broker.commit("a-1", B_TOPIC) == ErrorCode.NONE
        assert await broker.commit("b-g", A_TOPIC) == ErrorCode.NONE
        broker.login("alice")
        assert (await broker.offset_fetch("a-1", None))[1] == [ErrorCode.NONE]
        described = await broker.call(
            ApiKey.DESCRIBE_GROUPS,
            5,
            {"groups": ["b-g", "a-1"], "include_authorized_operations": False},
        )
        assert [g["error_code"] for g in described["groups"]] == [refused, ErrorCode.NONE]
        listed = await broker.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
        assert [g["group_id"] for g in listed["groups"]] == ["a-1"]
        deleted = await broker.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["b-g", "a-1"]})
        assert [r["error_code"] for r in deleted["results"]] == [refused, ErrorCode.NONE]
        assert broker.storage.offsets.offsets("b-g")
        offset_delete = {"group_id": "b-g", "topics": []}
        assert (await broker.call(ApiKey.OFFSET_DELETE, 0, offset_delete))["error_code"] == refused

    run(scenario)


def test_idempotent_producer_needs_write_somewhere_or_idempotent_write() -> None:
    async def scenario() -> None:
        broker = Guarded("carol")
        body = {"transactional_id": None, "transaction_timeout_ms": 1000}
        refused = await broker.call(ApiKey.INIT_PRODUCER_ID, 4, {**body, "producer_id": -1})
        assert refused["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        await broker.table.set_rights(
            "carol", model.grant(Rights(), model.CLUSTER, "", ["idempotent_write"])
        )
        allowed = await broker.call(ApiKey.INIT_PRODUCER_ID, 4, {**body, "producer_id": -1})
        assert allowed["error_code"] == ErrorCode.NONE
        broker.login("alice")  # write on team-a/orders is enough, as in Kafka
        allowed = await broker.call(ApiKey.INIT_PRODUCER_ID, 4, {**body, "producer_id": -1})
        assert allowed["error_code"] == ErrorCode.NONE

    run(scenario)


def test_a_grant_applies_to_the_next_request_and_a_revoke_too() -> None:
    async def scenario() -> None:
        broker = Guarded()
        await broker.topics()
        assert (await broker.produce(B_TOPIC, [b"x"]))["error_code"] == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
        rights = model.grant(
            broker.table.rights_of("alice"), model.NAMESPACE, "team-b/*", ["write"]
        )
        await broker.table.set_rights("alice", rights)
        assert (await broker.produce(B_TOPIC, [b"x"]))["error_code"] == ErrorCode.NONE
        await broker.table.set_rights("alice", Rights())
        assert (await broker.produce(A_TOPIC, [b"x"]))["error_code"] == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )

    run(scenario)


def test_denials_are_counted_and_logged_without_a_secret(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        broker = Guarded()
        await broker.topics()
        counter = metrics.AUTHORIZATION_DENIALS.labels("kafka", "topic", "write")
        before = counter._value.get()
        with caplog.at_level(logging.WARNING, logger="gateway.kafka.authz"):
            await broker.produce(B_TOPIC, [b"x"])
        assert counter._value.get() == before + 1
        [line] = [r.getMessage() for r in caplog.records if r.name == "gateway.kafka.authz"]
        assert "192.0.2.1:5000" in line and "'alice'" in line and B_TOPIC in line
        assert "write" in line

    run(scenario)


# ---- the ACL APIs --------------------------------------------------------------------------

TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
READ, WRITE, ALL, ANY, ALLOW, DENY = 3, 4, 2, 1, 3, 2


def creation(kind: int, name: str, pattern: int, op: int, **extra: Any) -> dict[str, Any]:
    return {
        "resource_type": kind,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": extra.get("principal", "User:bob"),
        "host": extra.get("host", "*"),
        "operation": op,
        "permission_type": extra.get("permission", ALLOW),
    }


def any_filter(**fields: Any) -> dict[str, Any]:
    return {
        "resource_type_filter": fields.get("kind", 1),
        "resource_name_filter": fields.get("name"),
        "pattern_type_filter": fields.get("pattern", 1),
        "principal_filter": fields.get("principal"),
        "host_filter": None,
        "operation": fields.get("op", ANY),
        "permission_type": 1,
    }


def test_acl_apis_hold_kafka_bindings_and_refuse_what_kafka_refuses() -> None:
    async def scenario() -> None:
        broker = Guarded("root")
        created = await broker.call(
            ApiKey.CREATE_ACLS,
            3,
            {
                "creations": [
                    creation(TOPIC, "team-b/orders/", PREFIXED, READ),
                    creation(TOPIC, "team-c/", PREFIXED, ALL),
                    creation(GROUP, "bob-", PREFIXED, READ),
                    creation(CLUSTER, "kafka-cluster", LITERAL, 12),
                    creation(5, "bob.tx-", PREFIXED, WRITE),  # TRANSACTIONAL_ID
                    creation(TOPIC, "orders", LITERAL, READ),  # one topic
                    creation(TOPIC, "team-b/orders/x", LITERAL, READ, permission=DENY),
                    creation(TOPIC, "team-b/orders/", PREFIXED, WRITE, host="10.0.0.1"),
                    creation(TOPIC, "team-b/orders/", PREFIXED, READ, principal="Group:x"),
                    creation(6, "token", LITERAL, 8),  # DELEGATION_TOKEN
                    creation(TOPIC, "t", LITERAL, READ, host="a.example"),  # no host names
                    creation(CLUSTER, "other", LITERAL, 8),
                    creation(TOPIC, "t", 2, READ),  # MATCH is for filters
                ]
            },
        )
        codes = [r["error_code"] for r in created["results"]]
        assert codes == [ErrorCode.NONE] * 8 + [ErrorCode.INVALID_REQUEST] * 5
        bob = broker.table.rights_of("bob")
        assert bob.allows(model.TOPIC, "team-b/orders/t", model.READ)
        assert not bob.allows(model.TOPIC, "team-b/orders/x", model.READ)  # DENY wins
        assert bob.allows(model.TOPIC, "team-b/orders/x", model.DESCRIBE)  # deny read only
        assert not bob.allows(model.TOPIC, "team-b/orders/t", model.WRITE, "192.0.2.1")
        assert bob.allows(model.TOPIC, "team-b/orders/t", model.WRITE, "10.0.0.1")
        assert bob.allows(model.TOPIC, "team-c/x/y", model.DELETE)
        assert bob.allows(model.TOPIC, "orders", model.READ)
        assert bob.allows(model.GROUP, "bob-1", model.READ)
        assert bob.allows(model.CLUSTER, "kafka-cluster", model.IDEMPOTENT_WRITE)
        assert bob.allows(model.TRANSACTIONAL_ID, "bob.tx-1", model.WRITE)
        assert not bob.allows(model.TRANSACTIONAL_ID, "alice.tx-1", model.WRITE)
        described = await broker.call(ApiKey.DESCRIBE_ACLS, 3, any_filter(principal="User:bob"))
        assert described["error_code"] == ErrorCode.NONE
        seen = {
            (r["resource_type"], r["resource_name"], r["pattern_type"], a["operation"])
            + (a["permission_type"], a["host"])
            for r in described["resources"]
            for a in r["acls"]
        }
        assert seen == {
            (TOPIC, "team-b/orders/", PREFIXED, READ, ALLOW, "*"),
            (TOPIC, "team-c/", PREFIXED, ALL, ALLOW, "*"),
            (GROUP, "bob-", PREFIXED, READ, ALLOW, "*"),
            (CLUSTER, "kafka-cluster", LITERAL, 12, ALLOW, "*"),
            (5, "bob.tx-", PREFIXED, WRITE, ALLOW, "*"),
            (TOPIC, "orders", LITERAL, READ, ALLOW, "*"),
            (TOPIC, "team-b/orders/x", LITERAL, READ, DENY, "*"),
            (TOPIC, "team-b/orders/", PREFIXED, WRITE, ALLOW, "10.0.0.1"),
        }
        # alice's namespace grants read as PREFIXED bindings
        alice = await broker.call(ApiKey.DESCRIBE_ACLS, 3, any_filter(principal="User:alice"))
        assert {r["resource_name"] for r in alice["resources"]} == {"team-a/orders/", "a-"}
        deleted = await broker.call(
            ApiKey.DELETE_ACLS,
            3,
            {"filters": [any_filter(kind=TOPIC, principal="User:bob")]},
        )
        [result] = deleted["filter_results"]
        assert len(result["matching_acls"]) == 5
        bob = broker.table.rights_of("bob")
        assert not bob.allows(model.TOPIC, "team-b/orders/t", model.READ)
        assert bob.allows(model.GROUP, "bob-1", model.READ)
        # alice may not manage ACLs
        broker.login("alice")
        refused = await broker.call(ApiKey.DESCRIBE_ACLS, 3, any_filter())
        assert refused["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        refused = await broker.call(
            ApiKey.CREATE_ACLS, 3, {"creations": [creation(TOPIC, "*", LITERAL, READ)]}
        )
        assert refused["results"][0]["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        refused = await broker.call(ApiKey.DELETE_ACLS, 1, {"filters": [any_filter()]})
        assert refused["filter_results"][0]["error_code"] == (
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
        assert broker.table.rights_of("bob").rules

    run(scenario)


# ---- AMQP ----------------------------------------------------------------------------------


def test_amqp_operations_follow_rabbitmqs_configure_write_read_split() -> None:
    table = RightsTable({"reader": model.grant(Rights(), model.NAMESPACE, "public/a", ["read"])})
    authorizer = Authorizer(table)
    access = authorizer.bound("amqp", "192.0.2.1:5000", "reader")
    assert may_open(access, "public/a", "a")
    assert not may_open(access, "public/b", "b")
    authorize_method(access, "public/a", "a", commands.Basic.Consume(queue="q"))
    authorize_method(access, "public/a", "a", commands.Basic.Get(queue="q"))
    authorize_method(access, "public/a", "a", commands.Queue.Declare(queue="q", passive=True))
    for method in (
        commands.Queue.Declare(queue="q"),
        commands.Queue.Delete(queue="q"),
        commands.Queue.Bind(queue="q", exchange="x"),
        commands.Exchange.Declare(exchange="x"),
    ):
        with pytest.raises(AmqpError) as refused:
            authorize_method(access, "public/a", "a", method)
        assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED
        assert not refused.value.hard  # a channel error, as RabbitMQ
    with pytest.raises(AmqpError, match="access to exchange 'x' in vhost 'a' refused for user"):
        authorize_publish(access, "public/a", "a", "x")
    everyone = authorizer.unrestricted("amqp", "peer", "guest")
    authorize_publish(everyone, "public/b", "b", "x")
    assert may_open(everyone, "public/b", "b")


class FailingTable(RightsTable):
    """A store that refuses a name (ValueError, as the users store does) or cannot write."""

    def __init__(self, failure: Exception) -> None:
        super().__init__()
        self.failure = failure

    async def set_rights(self, user: str, rights: Rights) -> None:
        raise self.failure


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (ValueError("a user name must be non-empty"), ErrorCode.INVALID_REQUEST),
        (RuntimeError("backend down"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_acls_the_store_refuses_are_answered_not_crashed(failure: Exception, code: int) -> None:
    async def scenario() -> None:
        broker = Guarded("root")
        broker.authorizer.store = FailingTable(failure)
        created = await broker.call(
            ApiKey.CREATE_ACLS,
            3,
            {"creations": [creation(TOPIC, "*", LITERAL, READ, principal="User:a,b")]},
        )
        assert created["results"][0]["error_code"] == code

    run(scenario)
