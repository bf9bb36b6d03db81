"""Kafka's resources on the permission model: what each API asks the authorizer.

Kafka names four resources the gateway serves: TOPIC (a topic answers to `tenant/ns/name`
and, in `kafka.tenant/kafka.namespace` where short names live, to its short name too:
security/rights.py), GROUP, TRANSACTIONAL_ID and CLUSTER. The APIs ask as Kafka's own
broker does (docs/security.md lists them): Produce WRITE, Fetch READ, ListOffsets and
Metadata DESCRIBE on the topic, creating a topic CREATE on the cluster or the topic, the
group APIs READ/DESCRIBE/DELETE on the group, a transactional producer's APIs WRITE on its
transactional id (DESCRIBE to find its coordinator or to describe its transaction).
A refused topic is TOPIC_AUTHORIZATION_FAILED whether it exists or not, so a user cannot
learn which topics exist where they may not look.

Kafka's authorized operations (KIP-430: Metadata, DescribeCluster, DescribeGroups,
ConsumerGroupDescribe when the client asks) are the operations of the resource the user
may do, as a bit field of Kafka's operation codes (`authorized_operations`).
"""

from __future__ import annotations

from pulsar_gateway.gateway.reserved_names import namespace_of
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.rights import (
    CLUSTER,
    CLUSTER_NAME,
    CREATE,
    GROUP,
    TOPIC,
    TRANSACTIONAL_ID,
)

NOT_ASKED = -2147483648  # Kafka's authorized operations when the client did not ask
# Kafka's AclOperation codes
OPERATION_CODES = {
    model.ALL: 2,
    model.READ: 3,
    model.WRITE: 4,
    model.CREATE: 5,
    model.DELETE: 6,
    model.ALTER: 7,
    model.DESCRIBE: 8,
    model.CLUSTER_ACTION: 9,
    model.DESCRIBE_CONFIGS: 10,
    model.ALTER_CONFIGS: 11,
    model.IDEMPOTENT_WRITE: 12,
}


def topic_names(context: KafkaContext, kafka_name: str) -> tuple[str, ...]:
    """The names the topic answers to in rules: `tenant/ns/name`, and its short name when
    it lives where short names do (the names a client may spell it by)."""
    path = context.pulsar_name(kafka_name).split("://", 1)[-1]
    namespace = namespace_of(path)
    short = path[len(namespace) + 1 :]
    if namespace == f"{context.settings.tenant}/{context.settings.namespace}":
        return (path, short)
    return (path,)


def topic_allowed(
    context: KafkaContext, kafka_name: str, operation: str, audit: bool = True
) -> bool:
    """Whether the connection's user may do `operation` on the topic; with `audit`, a
    denial is logged and counted (without: a filter, Metadata's list of every topic)."""
    access = context.access
    if access.unrestricted:
        return True
    key = (kafka_name, operation)
    allowed = access.remembered(key)
    if allowed is None:
        allowed = access.may(TOPIC, topic_names(context, kafka_name), operation)
        access.remember(key, allowed)
    if not allowed and audit:
        access.denied(TOPIC, f"topic {kafka_name}", operation)
    return allowed


def may_create_topic(context: KafkaContext, kafka_name: str) -> bool:
    """Kafka: CREATE on the cluster, or on the topic."""
    access = context.access
    if access.unrestricted or access.may(CLUSTER, CLUSTER_NAME, CREATE):
        return True
    return topic_allowed(context, kafka_name, CREATE)


def group_allowed(context: KafkaContext, group_id: str, operation: str, audit: bool = True) -> bool:
    access = context.access
    if access.unrestricted:
        return True
    if audit:
        return access.check(GROUP, group_id, operation, subject=f"group {group_id}")
    return access.may(GROUP, group_id, operation)


def cluster_allowed(context: KafkaContext, operation: str, audit: bool = True) -> bool:
    access = context.access
    if access.unrestricted:
        return True
    if audit:
        return access.check(CLUSTER, CLUSTER_NAME, operation)
    return access.may(CLUSTER, CLUSTER_NAME, operation)


def transactional_id_allowed(
    context: KafkaContext, transactional_id: str, operation: str, audit: bool = True
) -> bool:
    """Kafka's TRANSACTIONAL_ID resource: WRITE to use the id (InitProducerId, the
    transaction APIs, a transactional Produce), DESCRIBE to see it. The only check of
    transactional ids (docs/security.md, "Transactional ids")."""
    access = context.access
    if access.unrestricted:
        return True
    if audit:
        subject = f"transactional id {transactional_id}"
        return access.check(TRANSACTIONAL_ID, transactional_id, operation, subject=subject)
    return access.may(TRANSACTIONAL_ID, transactional_id, operation)


def authorized_operations(
    context: KafkaContext, resource: str, names: str | tuple[str, ...], asked: bool
) -> int:
    """KIP-430's bit field: a bit `1 << code` per operation of the resource (Kafka's list
    for it) the user may do; NOT_ASKED when the client did not ask."""
    if not asked:
        return NOT_ASKED
    access = context.access
    bits = 0
    for operation in model.USEFUL[resource]:
        if access.may(resource, names, operation):
            bits |= 1 << OPERATION_CODES[operation]
    return bits


def topic_operations(context: KafkaContext, kafka_name: str, asked: bool) -> int:
    return authorized_operations(context, TOPIC, topic_names(context, kafka_name), asked)
