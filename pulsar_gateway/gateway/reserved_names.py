"""Pulsar namespaces that belong to the gateway itself, never to a client's topic or queue.

The gateway keeps its own state in `pulsar.metadata_namespace` (default `public/__gateway`;
docs/pulsar-mapping.md, 'The metadata store'). Every Kafka topic name and AMQP vhost maps
onto some Pulsar namespace, and nothing in those mappings stops one from landing there:
vhost `__gateway` with queue `metadata` *is* `persistent://public/__gateway/metadata`, and
one non-JSON message published there used to stop every later start. So each protocol asks
this one object before it maps a client's name onto Pulsar, and refuses with its own
authorization error (Kafka TOPIC_AUTHORIZATION_FAILED, AMQP ACCESS_REFUSED).
"""

from __future__ import annotations

from dataclasses import dataclass


def namespace_of(pulsar_topic: str) -> str:
    """`persistent://tenant/ns/name` (or `tenant/ns/name`) -> `tenant/ns`."""
    path = pulsar_topic.split("://", 1)[-1]
    return path.rsplit("/", 1)[0]


@dataclass(frozen=True)
class ReservedNamespaces:
    """The namespaces no client name may map into (`tenant/ns` each)."""

    namespaces: frozenset[str] = frozenset()

    def holds(self, namespace: str) -> bool:
        return namespace in self.namespaces

    def holds_topic(self, pulsar_topic: str) -> bool:
        return self.holds(namespace_of(pulsar_topic))

    @staticmethod
    def refusal(what: str, namespace: str) -> str:
        """The text a client is refused with: what was asked for, and why not."""
        return (
            f"{what} maps into the Pulsar namespace {namespace}, where the gateway keeps "
            "its own state; choose another name"
        )
