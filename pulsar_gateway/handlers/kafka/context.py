"""What every Kafka API handler works with: settings, storage (through the port), the group
coordinator, idempotent producers' sequences, this broker's identity, name mapping, and
the connection's user's rights.

One context per listener, built by the server; the unit tests build one on the in-memory
storage. Everything a handler keeps between requests lives here, never in module globals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.gateway.topic_names import pulsar_topic
from pulsar_gateway.handlers.authorization import Access, Authorizer, everyone_allowed
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.idempotence import ProducerSequences
from pulsar_gateway.handlers.kafka.port import GroupOffsets, KafkaStorage, ProducerIds, TopicStore
from pulsar_gateway.handlers.kafka.transaction_coordinator import TransactionCoordinator
from pulsar_gateway.kafka_codec.compression import InflateBudget


@dataclass
class BrokerIdentity:
    node_id: int
    host: str
    port: int
    cluster_id: str


@dataclass
class KafkaContext:
    settings: KafkaSection
    storage: KafkaStorage
    identity: BrokerIdentity
    groups: GroupCoordinator
    sequences: ProducerSequences = field(default_factory=ProducerSequences)
    # the rights (docs/security.md, "Authorization"); `access` is the connection's own: the
    # listener gives each authenticated connection a copy of its context with it
    authorizer: Authorizer = field(default_factory=Authorizer)
    access: Access = field(default_factory=lambda: everyone_allowed("kafka"))
    # one connection's inflate budget (`kafka.max_connection_inflated_bytes`): the listener
    # gives each connection a copy of its context with its own
    inflated: InflateBudget | None = None
    # the transaction coordinator; None when the storage keeps no transactions
    transactions: TransactionCoordinator | None = None

    @property
    def topics(self) -> TopicStore:
        return self.storage.topics

    @property
    def offsets(self) -> GroupOffsets:
        return self.storage.offsets

    @property
    def producer_ids(self) -> ProducerIds:
        return self.storage.producer_ids

    @property
    def _short_prefix(self) -> str:
        return f"persistent://{self.settings.tenant}/{self.settings.namespace}/"

    def pulsar_name(self, kafka_name: str) -> str:
        return pulsar_topic(kafka_name, self.settings.tenant, self.settings.namespace)

    def kafka_name(self, pulsar_name: str) -> str:
        """The name a Kafka client lists: short in the default namespace, tenant/ns/name else."""
        prefix = self._short_prefix
        if pulsar_name.startswith(prefix):
            return pulsar_name[len(prefix) :]
        return pulsar_name.removeprefix("persistent://")
