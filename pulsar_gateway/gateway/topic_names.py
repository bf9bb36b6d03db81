"""Kafka topic names <-> Pulsar topic names, as KoP maps them.

`orders` -> `persistent://{tenant}/{namespace}/orders`; `tenant/ns/orders` and
`persistent://tenant/ns/orders` are taken as given; partition i is the Pulsar
topic `<topic>-partition-<i>`.
"""

from __future__ import annotations

import re

_LEGAL = re.compile(r"^[A-Za-z0-9._-]+$")
# compiled once: Metadata checks every name it is given (99,999 in a hostile request)
_PARTITION_SUFFIX = re.compile(r"-partition-\d+$")
MAX_NAME = 249


class InvalidTopicName(ValueError):
    pass


def validate_kafka_name(name: str) -> None:
    """Kafka's own rules for the short name, plus the tenant/ns/topic form."""
    parts = name.removeprefix("persistent://").split("/")
    if len(parts) not in (1, 3):
        raise InvalidTopicName(f"'{name}' must be a name or tenant/namespace/name")
    for part in parts:
        if not part or part in (".", "..") or len(part) > MAX_NAME or not _LEGAL.match(part):
            raise InvalidTopicName(f"'{name}' has an illegal part '{part}'")
    if _PARTITION_SUFFIX.search(parts[-1]):
        raise InvalidTopicName(f"'{name}' ends like a Pulsar partition name")


def pulsar_topic(name: str, tenant: str, namespace: str) -> str:
    if name.startswith("persistent://"):
        return name
    if name.count("/") == 2:
        return f"persistent://{name}"
    return f"persistent://{tenant}/{namespace}/{name}"


def kafka_topic_name(pulsar_name: str, tenant: str, namespace: str) -> str:
    """The name a Kafka client lists: short in the default namespace, tenant/ns/name else."""
    prefix = f"persistent://{tenant}/{namespace}/"
    if pulsar_name.startswith(prefix):
        return pulsar_name[len(prefix) :]
    return pulsar_name.removeprefix("persistent://")


INCARNATION_MARK = "="
_INCARNATION = re.compile(r"=(\d+)$")


def incarnation_topic(full_topic: str, incarnation: int) -> str:
    """The Pulsar topic that stores incarnation `incarnation` of a Kafka topic: the first
    (0) keeps the plain name; a topic deleted and created again gets `<topic>=<n>`, a name
    no Kafka topic can have ('=' is not in Kafka's alphabet), so its partitions start empty
    on fresh Pulsar topics (docs/pulsar-mapping.md, 'Deleting topics')."""
    return full_topic if incarnation == 0 else f"{full_topic}{INCARNATION_MARK}{incarnation}"


def logical_topic(stored_topic: str) -> tuple[str, int]:
    """`<topic>=<n>` -> (topic, n); a plain name is incarnation 0."""
    found = _INCARNATION.search(stored_topic)
    if found is None:
        return stored_topic, 0
    return stored_topic[: found.start()], int(found.group(1))


PARTITION_MARK = "-partition-"


class UnknownPartition(LookupError):
    """A Pulsar topic name that is not `<topic>-partition-<i>`."""


def partition_topic(full_topic: str, partition: int) -> str:
    return f"{full_topic}{PARTITION_MARK}{partition}"


def split_partition_topic(partition_topic: str) -> tuple[str, int]:
    """`<topic>-partition-<i>` -> (topic, i)."""
    name, mark, index = partition_topic.rpartition(PARTITION_MARK)
    if not mark or not index.isdigit():
        raise UnknownPartition(partition_topic)
    return name, int(index)
