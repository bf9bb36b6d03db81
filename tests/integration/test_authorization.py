"""Authorization against a real gateway (docs/security.md, "Authorization"): a user allowed
on namespace A can do nothing in B, through confluent-kafka, kafka-python and pika; the
ACL APIs through confluent-kafka's AdminClient (tests/integration/test_acls.py has Kafka's
ACL model in full); grants and revokes by `pulsar-gateway
users grant|revoke` and by CreateAcls apply live, without a restart.

Users: `root` is a superuser by `authorization.superusers`; `alice` holds everything on
`team-a/orders` (where short topic names live: `kafka.tenant/namespace`) and on groups
`a-*`; `dave` everything on `team-b/orders`; `bob` and `carol` start with nothing.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from harness.gateway_process import GatewayProcess, set_flags
from harness.raw_kafka_socket import recv_frame
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from tests.integration.test_security import users
from tests.integration.test_users_data_dir import users_on_dir

PASSWORD = "a long enough test password"
MECHANISM = "SCRAM-SHA-256"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    settings = {
        "kafka.sasl_mechanisms": f"{MECHANISM},PLAIN",
        "authorization.superusers": "root",
        "kafka.auto_create_topics": "true",
        # short names (all kafka-python takes) live in team-a/orders
        "kafka.tenant": "team-a",
        "kafka.namespace": "orders",
    }
    process = GatewayProcess(tmp_path_factory.mktemp("authz"), extra=set_flags(settings))
    process.start()
    for name in ("root", "alice", "bob", "carol", "dave"):
        assert users(process, "add", name, password=PASSWORD).returncode == 0
    for args in (
        ("--namespace", "team-a/orders", "--operations", "all"),
        ("--group", "a-*", "--operations", "read,describe,delete"),
    ):
        done = users(process, "grant", "alice", *args)
        assert done.returncode == 0, done.stderr
    done = users(process, "grant", "dave", "--namespace", "team-b/orders", "-o", "all")
    assert done.returncode == 0, done.stderr
    yield process
    code = process.stop()
    assert code == 0, f"gateway exited {code}:\n{process.log_tail()}"


def config(gateway: GatewayProcess, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": gateway.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": MECHANISM,
        "sasl.username": user,
        "sasl.password": PASSWORD,
    }


def produce(gateway: GatewayProcess, user: str, topic: str) -> KafkaError | None:
    """The delivery error of one message (None: stored)."""
    producer = Producer(
        {**config(gateway, user), "message.timeout.ms": 15000, "enable.idempotence": False}
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def code_of(error: Any) -> int | None:
    if error is None:
        return None
    if isinstance(error, KafkaException):
        error = error.args[0]
    return int(error.code())


def test_kafka_user_of_a_cannot_touch_b_with_confluent_kafka(gateway: GatewayProcess) -> None:
    run = uuid.uuid4().hex[:8]
    mine, theirs = f"t-{run}", f"team-b/orders/t-{run}"  # the first in team-a/orders
    admin_root = AdminClient(config(gateway, "root"))
    for future in admin_root.create_topics([NewTopic(theirs, 1)]).values():
        future.result(30)
    # produce: allowed in A (auto-created), refused in B
    assert produce(gateway, "alice", mine) is None
    assert code_of(produce(gateway, "alice", theirs)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # fetch and commit through a consumer
    consumer = Consumer(
        {
            **config(gateway, "alice"),
            "group.id": f"a-{run}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(mine, 0, 0)])
        message = None

        def got_one() -> bool:
            nonlocal message
            message = consumer.poll(1)
            return message is not None and not message.error()

        wait_until(got_one, timeout=30, message="alice reads her own topic")
        consumer.commit(message=message, asynchronous=False)
        with pytest.raises(KafkaException) as committed:
            consumer.commit(offsets=[TopicPartition(theirs, 0, 1)], asynchronous=False)
        assert "AUTHORIZATION" in str(committed.value)
    finally:
        consumer.close()
    # a consumer of B hears that it may not read it
    reader = Consumer({**config(gateway, "alice"), "group.id": f"a-r-{run}"})
    try:
        reader.subscribe([theirs])
        refused = None

        def refused_fetch() -> bool:
            nonlocal refused
            polled = reader.poll(1)
            refused = polled.error() if polled is not None else None
            return refused is not None

        wait_until(refused_fetch, timeout=30, message="a consumer of B is refused")
        assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        reader.close()
    # a group alice may not use
    other = Consumer({**config(gateway, "alice"), "group.id": f"b-{run}"})
    try:
        other.subscribe([mine])

        def group_refused() -> bool:
            polled = other.poll(1)
            error = polled.error() if polled is not None else None
            return error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED

        wait_until(group_refused, timeout=30, message="a group alice may not use is refused")
    finally:
        other.close()
    # list, describe, create, delete
    admin = AdminClient(config(gateway, "alice"))
    listed = admin.list_topics(timeout=30).topics
    assert mine in listed and theirs not in listed
    assert all("/" not in name for name in listed)  # short names: all in team-a/orders
    for future in admin.create_topics([NewTopic(f"team-b/orders/new-{run}", 1)]).values():
        with pytest.raises(KafkaException) as created:
            future.result(30)
        assert code_of(created.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    for future in admin.delete_topics([theirs]).values():
        with pytest.raises(KafkaException) as deleted:
            future.result(30)
        assert code_of(deleted.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert theirs in admin_root.list_topics(timeout=30).topics
    groups = admin.list_consumer_groups().result(30)
    assert all(g.group_id.startswith("a-") for g in groups.valid)
    assert gateway.metric("gateway_authorization_denials_total", protocol="kafka") > 0
    assert "authorization denied" in gateway.log_tail(400)
    assert PASSWORD not in gateway.log_tail(2000)


def test_kafka_python_user_of_b_is_refused_in_a(gateway: GatewayProcess) -> None:
    """kafka-python takes short names only: they live in team-a/orders, where dave (allowed
    on team-b/orders) may do nothing, and alice everything."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as PyNewTopic
    from kafka.errors import TopicAuthorizationFailedError

    def common(user: str) -> dict[str, Any]:
        return {
            "bootstrap_servers": gateway.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": PASSWORD,
        }

    run = uuid.uuid4().hex[:8]
    producer = KafkaProducer(**common("alice"), max_block_ms=20000)
    try:
        producer.send(f"py-{run}", b"v").get(timeout=30)
    finally:
        producer.close(5)
    producer = KafkaProducer(**common("dave"), max_block_ms=20000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(f"py-{run}", b"v").get(timeout=30)
    finally:
        producer.close(5)
    admin = KafkaAdminClient(**common("dave"))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            admin.create_topics([PyNewTopic(f"py2-{run}", 1, 1)])
    finally:
        admin.close()


def acl(user: str, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.PREFIXED,
        f"User:{user}",
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def test_acl_apis_with_admin_client_apply_live(gateway: GatewayProcess) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"team-c/orders/acl-{run}"
    admin = AdminClient(config(gateway, "root"))
    for future in admin.create_topics([NewTopic(topic, 1)]).values():
        future.result(30)
    assert code_of(produce(gateway, "bob", topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    for future in admin.create_acls([acl("bob", "team-c/orders/", AclOperation.WRITE)]).values():
        future.result(30)
    # the same gateway, no restart: bob may write now
    assert produce(gateway, "bob", topic) is None
    bob_filter = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:bob",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    described = admin.describe_acls(bob_filter).result(30)
    assert [(b.name, b.resource_pattern_type, b.operation) for b in described] == [
        ("team-c/orders/", ResourcePatternType.PREFIXED, AclOperation.WRITE)
    ]
    shown = users(gateway, "rights", "bob")
    assert "bob  allow topic prefixed team-c/orders/: write" in shown.stdout
    # a host name cannot be held (Kafka's hosts are addresses): refused with a message
    named_host = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:bob",
        "gateway.example",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([named_host]).values():
        with pytest.raises(KafkaException, match="or an IP address"):
            future.result(30)
    # alice may not manage ACLs: CreateAcls is refused; librdkafka turns DescribeAcls's
    # CLUSTER_AUTHORIZATION_FAILED into an empty answer (the gateway's audit log has it)
    alice_admin = AdminClient(config(gateway, "alice"))

    def cluster_denials(operation: str) -> float:
        labels = {"protocol": "kafka", "resource": "cluster", "operation": operation}
        return gateway.metric("gateway_authorization_denials_total", **labels)

    described_before = cluster_denials("describe")
    assert alice_admin.describe_acls(bob_filter).result(30) == []
    for future in alice_admin.create_acls([acl("alice", "team-b/", AclOperation.ALL)]).values():
        with pytest.raises(KafkaException) as refused:
            future.result(30)
        assert code_of(refused.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # counted always; the audit line itself is rate-limited per logger, so an earlier burst of
    # denials on this module's gateway may have used the window up (it did, once, in a run)
    assert cluster_denials("describe") > described_before
    deleted = admin.delete_acls([bob_filter])
    for future in deleted.values():
        assert len(future.result(30)) == 1
    assert code_of(produce(gateway, "bob", topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_users_grant_and_revoke_apply_live(gateway: GatewayProcess) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"team-d/orders/cli-{run}"
    assert code_of(produce(gateway, "carol", topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    granted = users(gateway, "grant", "carol", "--namespace", "team-d/*", "-o", "write,create")
    assert granted.returncode == 0, granted.stderr
    wait_until(
        lambda: produce(gateway, "carol", topic) is None,
        timeout=30,
        message="carol's grant applies without a restart",
    )
    revoked = users(gateway, "revoke", "carol", "--namespace", "team-d/*")
    assert revoked.returncode == 0, revoked.stderr
    wait_until(
        lambda: code_of(produce(gateway, "carol", topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED,
        timeout=30,
        message="carol's revoke applies without a restart",
    )
    bad = users(gateway, "grant", "carol", "--namespace", "team-d/orders/x", "-o", "read")
    assert bad.returncode == 1 and "namespace pattern" in bad.stderr


def amqp(gateway: GatewayProcess, user: str, vhost: str) -> pika.BlockingConnection:
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        gateway.amqp_port,
        vhost,
        pika.PlainCredentials(user, PASSWORD),
        connection_attempts=1,
    )
    return pika.BlockingConnection(parameters)


def test_amqp_user_of_a_cannot_use_b_with_pika(gateway: GatewayProcess) -> None:
    for args in (
        ("--namespace", "public/amqp-a", "-o", "all"),
        ("--namespace", "public/amqp-r", "-o", "read"),
    ):
        assert users(gateway, "grant", "bob", *args).returncode == 0
    # vhost `amqp-a` is namespace public/amqp-a: everything works
    wait_until(
        lambda: _opens(gateway, "bob", "amqp-a"), timeout=30, message="bob's grant is followed"
    )
    connection = amqp(gateway, "bob", "amqp-a")
    try:
        channel = connection.channel()
        channel.queue_declare("q")
        channel.basic_publish("", "q", b"hello")

        def got() -> bool:
            method, _, body = channel.basic_get("q", auto_ack=True)
            return method is not None and body == b"hello"

        wait_until(got, timeout=30, message="bob reads his queue")
    finally:
        connection.close()
    # vhost `amqp-b`: no right at all, the connection is refused as RabbitMQ refuses it
    with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:
        amqp(gateway, "bob", "amqp-b")
    assert "530" in repr(refused.value) or "NOT_ALLOWED" in repr(refused.value)
    # vhost `amqp-r`: read only; declaring or publishing closes the channel with 403
    connection = amqp(gateway, "bob", "amqp-r")
    try:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.queue_declare("q2")
        assert closed.value.reply_code == 403
        assert "access to queue 'q2' in vhost 'amqp-r' refused for user 'bob'" in str(
            closed.value.reply_text
        )
        channel = connection.channel()
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as published:
            channel.basic_publish("", "q2", b"x")
            channel.basic_publish("", "q2", b"x")
        assert published.value.reply_code == 403
    finally:
        if connection.is_open:
            connection.close()
    assert gateway.metric("gateway_authorization_denials_total", protocol="amqp") > 0


def _opens(gateway: GatewayProcess, user: str, vhost: str) -> bool:
    try:
        amqp(gateway, user, vhost).close()
        return True
    except pika.exceptions.AMQPConnectionError:
        return False


def test_grant_on_a_stopped_gateways_data_dir(tmp_path: Path) -> None:
    """`users grant --data-dir`: the rights are there at the next start."""
    settings = {"kafka.sasl_mechanisms": MECHANISM, "kafka.auto_create_topics": "true"}
    stopped = GatewayProcess(tmp_path / "gw", extra=set_flags(settings))
    stopped.start()
    assert stopped.stop() == 0
    added = users_on_dir(stopped.data_dir, "add", "erin", password=PASSWORD)
    assert added.returncode == 0, added.stderr
    granted = users_on_dir(
        stopped.data_dir, "grant", "erin", "--namespace", "team-e/*", "-o", "write,create"
    )
    assert granted.returncode == 0, granted.stderr
    shown = users_on_dir(stopped.data_dir, "rights")
    assert shown.stdout.split("\n")[0] == "erin  allow topic prefixed team-e/: create,write"
    stopped.start()
    try:
        assert produce(stopped, "erin", "team-e/ns/t") is None
        refused = produce(stopped, "erin", "team-f/ns/t")
        assert code_of(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        assert stopped.stop() == 0


def test_a_transactional_id_is_used_only_by_whom_it_is_granted_to(
    gateway: GatewayProcess,
) -> None:
    """Issue 33: dave may write topics but holds no transactional id, so he cannot take
    alice's over (which fenced her producer before); alice, granted `alice.*`, commits her
    transaction through it all."""
    done = users(gateway, "grant", "alice", "--transactional-id", "alice.*", "-o", "write")
    assert done.returncode == 0, done.stderr
    transactional_id = f"alice.{uuid.uuid4().hex[:8]}"
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    settings = {"transactional.id": transactional_id, "transaction.timeout.ms": 20000}
    alice = Producer({**config(gateway, "alice"), **settings})
    alice.init_transactions(30)
    alice.begin_transaction()
    alice.produce(topic, b"alice's")
    alice.flush(30)
    thief = Producer({**config(gateway, "dave"), **settings})
    with pytest.raises(KafkaException) as refused:
        thief.init_transactions(30)
    assert code_of(refused.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    alice.commit_transaction(30)  # not fenced
    consumer = Consumer(
        {
            **config(gateway, "alice"),
            "group.id": f"a-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.subscribe([topic])
        message = wait_until(lambda: consumer.poll(1), 30, message="the committed record")
        assert message.error() is None and message.value() == b"alice's"
    finally:
        consumer.close()


def _kafka_call(sock: Any, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
    sock.sendall(protocol.encode_request(api, version, 1, "t", body))
    return protocol.decode_response(api, version, recv_frame(sock))


def _logged_in(gateway: GatewayProcess, user: str) -> Any:
    sock = socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=10)
    assert not _kafka_call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"]
    token = f"\x00{user}\x00{PASSWORD}".encode()
    assert not _kafka_call(sock, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})["error_code"]
    return sock


def test_another_tenants_topic_is_not_given_away_by_a_subscription_or_its_id(
    gateway: GatewayProcess,
) -> None:
    """Issue 33: alice's KIP-848 heartbeat subscribing to dave's topic gets no assignment of
    it (no topic id, no partition count), and Metadata by that id, learned elsewhere, does
    not name it."""
    secret = f"team-b/orders/secret-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config(gateway, "dave"))
    admin.create_topics([NewTopic(secret, 2, 1)])[secret].result(30)
    metadata = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    with _logged_in(gateway, "dave") as dave:
        asked = _kafka_call(dave, ApiKey.METADATA, 12, {**metadata, "topics": [{"name": secret}]})
        topic_id = asked["topics"][0]["topic_id"]
    with _logged_in(gateway, "alice") as alice:
        heartbeat = {
            "group_id": f"a-{uuid.uuid4().hex[:8]}",
            "member_id": uuid.uuid4().hex,
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [secret],
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [],
        }
        joined = _kafka_call(alice, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat)
        assert joined["error_code"] == ErrorCode.NONE
        assert (joined["assignment"] or {}).get("topic_partitions", []) == []
        by_id = _kafka_call(
            alice, ApiKey.METADATA, 12, {**metadata, "topics": [{"topic_id": topic_id}]}
        )
        (answer,) = by_id["topics"]
        assert (answer["error_code"], answer["name"]) == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            None,
        )
