"""What every Kafka API handler needs: settings, topics, and name mapping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.gateway.topic_names import pulsar_topic
from pulsar_gateway.storage.kafka.topics import TopicService

if TYPE_CHECKING:
    from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
    from pulsar_gateway.storage.kafka.group_offsets import GroupOffsetStore


@dataclass
class BrokerIdentity:
    node_id: int
    host: str
    port: int
    cluster_id: str


class KafkaContext:
    def __init__(
        self, settings: KafkaSection, topics: TopicService, identity: BrokerIdentity
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.identity = identity
        self.groups: GroupCoordinator | None = None
        self.offsets: GroupOffsetStore | None = None
        self._short_prefix = f"persistent://{settings.tenant}/{settings.namespace}/"

    def pulsar_name(self, kafka_name: str) -> str:
        return pulsar_topic(kafka_name, self.settings.tenant, self.settings.namespace)

    def kafka_name(self, pulsar_name: str) -> str:
        """The name a Kafka client lists: short in the default namespace, tenant/ns/name else."""
        if pulsar_name.startswith(self._short_prefix):
            return pulsar_name[len(self._short_prefix) :]
        return pulsar_name.removeprefix("persistent://")
