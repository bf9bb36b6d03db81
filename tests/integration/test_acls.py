"""Kafka's ACL model against a real gateway (docs/security.md, "Authorization"), written
with real clients' admin APIs: confluent-kafka's AdminClient (create_acls, describe_acls,
delete_acls with AclBinding and AclBindingFilter) and kafka-python's KafkaAdminClient.

Each test takes users of its own (the users store is the module's gateway's) and proves one
thing on the wire: a LITERAL allow opens one topic only, PREFIXED opens a family, DENY wins
over ALLOW on an open producer's next request, a rule bound to another host does not
apply, DescribeAcls's MATCH filter, DeleteAcls answering what it removed, and the AMQP side
refusing what a DENY refuses Kafka clients. `root` is a superuser.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from harness.gateway_process import GatewayProcess, set_flags
from harness.waiting import wait_until
from tests.integration.test_security import users

PASSWORD = "a long enough test password"
MECHANISM = "SCRAM-SHA-256"
REFUSED = KafkaError.TOPIC_AUTHORIZATION_FAILED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    settings = {
        "kafka.sasl_mechanisms": MECHANISM,
        "authorization.superusers": "root",
        "kafka.auto_create_topics": "true",
    }
    process = GatewayProcess(tmp_path_factory.mktemp("acls"), extra=set_flags(settings))
    process.start()
    assert users(process, "add", "root", password=PASSWORD).returncode == 0
    yield process
    code = process.stop()
    assert code == 0, f"gateway exited {code}:\n{process.log_tail()}"


def new_user(gateway: GatewayProcess) -> str:
    """A user of its own, added by root through AlterUserScramCredentials (quicker than
    `pulsar-gateway users add`, a process each)."""
    name = f"u{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config(gateway, "root"))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    upsert = UserScramCredentialUpsertion(name, info, PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    return name


def config(gateway: GatewayProcess, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": gateway.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": MECHANISM,
        "sasl.username": user,
        "sasl.password": PASSWORD,
    }


def producer(gateway: GatewayProcess, user: str) -> Producer:
    return Producer(
        {**config(gateway, user), "message.timeout.ms": 15000, "enable.idempotence": False}
    )


def send(client: Producer, topic: str) -> int | None:
    """The delivery error code of one message (None: stored). librdkafka reports a refusal
    it already knows of (the topic's metadata cached with the error) at once, by raising,
    and otherwise in the delivery report; both are the gateway's refusal (seen raised once
    in a run beside busy loops)."""
    outcome: list[Any] = []
    try:
        client.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    except KafkaException as exc:
        return int(exc.args[0].code())
    client.flush(30)
    assert outcome, "no delivery report"
    return None if outcome[0] is None else int(outcome[0].code())


def acl(
    user: str,
    name: str,
    operation: AclOperation,
    pattern: ResourcePatternType = LITERAL,
    permission: AclPermissionType = ALLOW,
    host: str = "*",
    kind: ResourceType = ResourceType.TOPIC,
) -> AclBinding:
    return AclBinding(kind, name, pattern, f"User:{user}", host, operation, permission)


def create(gateway: GatewayProcess, *bindings: AclBinding) -> None:
    admin = AdminClient(config(gateway, "root"))
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


def topics(gateway: GatewayProcess, *names: str) -> None:
    """Created by root, so that a refusal below is about the rule tested, not CREATE."""
    admin = AdminClient(config(gateway, "root"))
    for future in admin.create_topics([NewTopic(name, 1) for name in names]).values():
        future.result(30)


def test_a_literal_allow_opens_that_topic_only(gateway: GatewayProcess) -> None:
    user, run = new_user(gateway), uuid.uuid4().hex[:8]
    topic, group = f"lit-{run}", f"g-{run}"
    topics(gateway, topic, f"{topic}-x", f"lit-{run[:4]}")
    create(
        gateway,
        acl(user, topic, AclOperation.WRITE),
        acl(user, topic, AclOperation.READ),
        acl(user, group, AclOperation.READ, kind=ResourceType.GROUP),
    )
    client = producer(gateway, user)
    assert send(client, topic) is None
    assert send(client, f"{topic}-x") == REFUSED
    assert send(client, f"lit-{run[:4]}") == REFUSED
    # KIP-430: what the user may do on the topic, as the client asks for it
    admin = AdminClient(config(gateway, user))
    asked = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    described = asked[topic].result(30)
    assert set(described.authorized_operations) == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DESCRIBE,
    }
    consumer = Consumer(
        {**config(gateway, user), "group.id": group, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        message = wait_until(lambda: consumer.poll(1), 30, message="the allowed topic's record")
        assert message.error() is None and message.value() == b"v"
    finally:
        consumer.close()


def test_prefixed_opens_a_family_and_deny_wins_on_the_next_request(
    gateway: GatewayProcess,
) -> None:
    user, run = new_user(gateway), uuid.uuid4().hex[:8]
    topics(gateway, f"pre-{run}-a", f"pre-{run}-secret", f"other-{run}")
    create(gateway, acl(user, f"pre-{run}-", AclOperation.WRITE, PREFIXED))
    client = producer(gateway, user)
    assert send(client, f"pre-{run}-a") is None
    assert send(client, f"pre-{run}-secret") is None
    assert send(client, f"other-{run}") == REFUSED
    # the same producer, no reconnect: the DENY applies to its next request
    create(gateway, acl(user, f"pre-{run}-secret", AclOperation.ALL, permission=DENY))
    assert send(client, f"pre-{run}-secret") == REFUSED
    assert send(client, f"pre-{run}-a") is None


def test_a_rule_for_another_host_does_not_apply(gateway: GatewayProcess) -> None:
    user, run = new_user(gateway), uuid.uuid4().hex[:8]
    topics(gateway, f"here-{run}", f"there-{run}", f"here-{run}-no")
    create(
        gateway,
        acl(user, f"here-{run}", AclOperation.WRITE, host="127.0.0.1"),
        acl(user, f"there-{run}", AclOperation.WRITE, host="192.0.2.7"),
        acl(user, f"here-{run}-no", AclOperation.WRITE),
        acl(user, f"here-{run}-no", AclOperation.WRITE, permission=DENY, host="127.0.0.1"),
    )
    client = producer(gateway, user)
    assert send(client, f"here-{run}") is None
    assert send(client, f"there-{run}") == REFUSED
    assert send(client, f"here-{run}-no") == REFUSED  # denied from this host


def test_describe_acls_match_and_delete_acls_answer_what_they_removed(
    gateway: GatewayProcess,
) -> None:
    user, run = new_user(gateway), uuid.uuid4().hex[:8]
    topic = f"m-{run}-orders"
    bindings = [
        acl(user, f"m-{run}-", AclOperation.READ, PREFIXED),
        acl(user, topic, AclOperation.WRITE),
        acl(user, topic, AclOperation.DESCRIBE, permission=DENY),
        acl(user, f"m-{run}-other", AclOperation.READ),
    ]
    create(gateway, *bindings)
    admin = AdminClient(config(gateway, "root"))
    match = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.MATCH,
        f"User:{user}",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    described = admin.describe_acls(match).result(30)
    assert sorted(described) == sorted(bindings[:3])  # not the other LITERAL
    deleted = admin.delete_acls([match])
    [(_, future)] = deleted.items()
    assert sorted(future.result(30)) == sorted(bindings[:3])
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        f"User:{user}",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(everything).result(30) == [bindings[3]]
    shown = users(gateway, "rights", user)
    assert shown.stdout.strip() == f"{user}  allow topic literal m-{run}-other: read"
    assert send(producer(gateway, user), topic) == REFUSED


def test_kafka_python_admin_creates_describes_and_deletes(gateway: GatewayProcess) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import (
        ResourceType as PyResourceType,
    )

    user, run = new_user(gateway), uuid.uuid4().hex[:8]
    admin = KafkaAdminClient(
        bootstrap_servers=gateway.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=MECHANISM,
        sasl_plain_username="root",
        sasl_plain_password=PASSWORD,
    )
    try:
        pattern = ResourcePattern(PyResourceType.TOPIC, f"py-{run}", ACLResourcePatternType.LITERAL)
        binding = ACL(f"User:{user}", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
        topics(gateway, f"py-{run}")
        created = admin.create_acls([binding])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        assert send(producer(gateway, user), f"py-{run}") is None
        acl_filter = ACLFilter(
            f"User:{user}",
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(PyResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        found, error = admin.describe_acls(acl_filter)
        assert error.errno == 0
        assert [(a.resource_pattern.resource_name, a.operation) for a in found] == [
            (f"py-{run}", ACLOperation.WRITE)
        ]
        [(_, removed, error)] = admin.delete_acls([acl_filter])
        assert error.errno == 0
        assert [(a.resource_pattern.resource_name, a.operation) for a in removed] == [
            (f"py-{run}", ACLOperation.WRITE)
        ]
    finally:
        admin.close()
    assert send(producer(gateway, user), f"py-{run}") == REFUSED


def test_amqp_honours_a_deny_the_kafka_side_honours_too(gateway: GatewayProcess) -> None:
    """Vhost `/` is namespace public/default, where short Kafka names live: queue `q` is
    topic `q` (and `public/default/q`) to the rules."""
    user, run = new_user(gateway), uuid.uuid4().hex[:8]
    secret = f"secret-{run}"
    topics(gateway, secret)
    create(
        gateway,
        acl(user, "*", AclOperation.ALL),
        acl(user, secret, AclOperation.ALL, permission=DENY),
    )
    assert send(producer(gateway, user), secret) == REFUSED
    assert send(producer(gateway, user), f"open-{run}") is None
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        gateway.amqp_port,
        "/",
        pika.PlainCredentials(user, PASSWORD),
        connection_attempts=1,
    )
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        channel.queue_declare(f"open-q-{run}")
        channel.basic_publish("", f"open-q-{run}", b"hello")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as declared:
            channel.queue_declare(secret)
        assert declared.value.reply_code == 403
        assert f"queue '{secret}'" in str(declared.value.reply_text)
        channel = connection.channel()
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as published:
            channel.basic_publish("", secret, b"x")
            channel.basic_publish("", secret, b"x")
        assert published.value.reply_code == 403
    finally:
        if connection.is_open:
            connection.close()


def test_users_command_writes_deny_host_and_user_star_rules(gateway: GatewayProcess) -> None:
    """`pulsar-gateway users grant` writes the same rules: `*` for every user, `--deny`
    with `--host`; `revoke` takes the DENY back."""
    user, run = new_user(gateway), uuid.uuid4().hex[:8]
    topic = f"cli-{run}"
    topics(gateway, topic)

    def sent() -> int | None:  # a fresh producer: librdkafka keeps a refused topic's error
        return send(producer(gateway, user), topic)

    assert sent() == REFUSED
    done = users(gateway, "grant", "*", "--topic", f"cli-{run}*", "-o", "write")
    assert done.returncode == 0, done.stderr
    wait_until(lambda: sent() is None, 30, message="User:*'s rule applies")
    deny = ("--topic", topic, "-o", "write", "--deny", "--host", "127.0.0.1")
    done = users(gateway, "grant", user, *deny)
    assert done.returncode == 0, done.stderr
    assert f"{user}  deny topic literal {topic} from 127.0.0.1: write" in done.stdout
    wait_until(lambda: sent() == REFUSED, 30, message="the DENY applies")
    done = users(gateway, "revoke", user, *deny)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: sent() is None, 30, message="the revoke applies")
