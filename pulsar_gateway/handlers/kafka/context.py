"""What every Kafka API handler works with: settings, storage (through the port), the group
coordinator, idempotent producers' sequences, this broker's identity, name mapping, and
the connection's user's rights.

One context per listener, built by the server; the unit tests build one on the in-memory
storage. Everything a handler keeps between requests lives here, never in module globals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsar_gateway.gateway.cluster.view import Member, group_key, partition_key, txn_key
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.gateway.topic_names import kafka_topic_name, logical_topic, pulsar_topic
from pulsar_gateway.handlers.authorization import Access, Authorizer, everyone_allowed
from pulsar_gateway.handlers.kafka.body_reader import BodyBuffers
from pulsar_gateway.handlers.kafka.consumer_groups import ConsumerGroups
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.idempotence import ProducerSequences
from pulsar_gateway.handlers.kafka.in_time import LateWork
from pulsar_gateway.handlers.kafka.port import GroupOffsets, KafkaStorage, ProducerIds, TopicStore
from pulsar_gateway.handlers.kafka.quotas import ClientQuotas, ConnectionMute
from pulsar_gateway.handlers.kafka.request_order import ProduceTurn, RequestOrder
from pulsar_gateway.handlers.kafka.share_groups import ShareGroups
from pulsar_gateway.handlers.kafka.transaction_coordinator import TransactionCoordinator
from pulsar_gateway.handlers.loop_turns import LoopTurns
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
    # client quotas in force and the rates measured against them (one for the listener);
    # None: no quota can be set
    quotas: ClientQuotas | None = None
    # until when the connection's next request waits for an over-quota client (its own)
    mute: ConnectionMute | None = None
    # KIP-848 `consumer` protocol groups (the classic ones are `groups`)
    consumer_groups: ConsumerGroups | None = None
    # KIP-932 share groups; None: the storage keeps no share state, so none are offered
    share_groups: ShareGroups | None = None
    # the connection's line (request_order.py); a Produce gets a copy with its own turn
    order: RequestOrder | None = None
    produce_turn: ProduceTurn | None = None
    # storage work of requests answered as busy, still running (in_time.py); the listener's
    late: LateWork = field(default_factory=LateWork)
    # the listener's turns on the loop for handlers whose work grows with the request
    # (loop_turns.py): shared by every connection's copy of the context
    turns: LoopTurns = field(default_factory=LoopTurns)
    # the listener's buffers big Produce bodies are read into (body_reader.BodyBuffers):
    # shared by every connection's copy of the context
    bodies: BodyBuffers = field(default_factory=BodyBuffers)

    @property
    def topics(self) -> TopicStore:
        return self.storage.topics

    @property
    def offsets(self) -> GroupOffsets:
        return self.storage.offsets

    @property
    def producer_ids(self) -> ProducerIds:
        return self.storage.producer_ids

    # ---- the cluster (docs/cluster.md): whom clients are sent to, and what this one serves

    def serves_partition(self, topic: str, index: int) -> bool:
        """Whether this member serves partition `index` of `topic` (its Pulsar name, a
        TopicRecord's: one spelling whatever name the client used; or the Pulsar topic of one
        of its incarnations, `<topic>=<n>`, which is served where the topic is)."""
        cluster = self.storage.cluster
        name = self.kafka_name(logical_topic(topic)[0])
        return cluster is None or cluster.serves(partition_key(name, index))

    def serves_group(self, group_id: str) -> bool:
        cluster = self.storage.cluster
        return cluster is None or cluster.serves(group_key(group_id))

    def leader_of(self, topic: str, index: int) -> int:
        """The node id of the member that serves the partition (`topic`: its Pulsar name)."""
        cluster = self.storage.cluster
        if cluster is None:
            return self.identity.node_id
        name = self.kafka_name(logical_topic(topic)[0])
        return cluster.owner(partition_key(name, index)).node_id

    def coordinator_of(self, key: str, transactional: bool) -> tuple[int, str, int]:
        """(node id, host, port) of the member that coordinates a group or transactional id."""
        cluster = self.storage.cluster
        if cluster is None:
            return self.identity.node_id, self.identity.host, self.identity.port
        owner = cluster.owner(txn_key(key) if transactional else group_key(key))
        return self._address(owner)

    def brokers(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every live member, this one as its listener advertises
        itself (a TLS listener beside the plaintext one gives its own port)."""
        cluster = self.storage.cluster
        if cluster is None:
            return [(self.identity.node_id, self.identity.host, self.identity.port)]
        return [self._address(member) for member in cluster.members()]

    def _address(self, member: Member) -> tuple[int, str, int]:
        cluster = self.storage.cluster
        if cluster is not None and member.member_id == cluster.me().member_id:
            return self.identity.node_id, self.identity.host, self.identity.port
        return member.node_id, member.kafka_host, member.kafka_port

    def pulsar_name(self, kafka_name: str) -> str:
        return pulsar_topic(kafka_name, self.settings.tenant, self.settings.namespace)

    def kafka_name(self, pulsar_name: str) -> str:
        """The name a Kafka client lists: short in the default namespace, tenant/ns/name else."""
        return kafka_topic_name(pulsar_name, self.settings.tenant, self.settings.namespace)
