"""The broker resource of DescribeConfigs: Kafka 4's common broker configs, typed.

Clients and tools read a few broker keys (the listeners to reach, whether topics may be
created or deleted, the size limits, the group settings), and admin UIs list them all with
their type, source and documentation. Each entry here is a Kafka broker config under its
Kafka name and type, with Kafka's default and the gateway's value: from the gateway's own
settings where the gateway honours it (source STATIC_BROKER_CONFIG when it differs from
Kafka's default), else Kafka's default (DEFAULT_CONFIG). Broker configs cannot be altered
through the Kafka API (alter_configs.py), so every entry is read-only. docs/kafka-configs.md
lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.consumer_groups import SERVER_ASSIGNORS
from pulsar_gateway.handlers.kafka.context import BrokerIdentity

# Kafka's ConfigType (DescribeConfigs v3+)
CONFIG_TYPES = {
    "BOOLEAN": 1,
    "STRING": 2,
    "INT": 3,
    "SHORT": 4,
    "LONG": 5,
    "DOUBLE": 6,
    "LIST": 7,
    "CLASS": 8,
    "PASSWORD": 9,
}
# Kafka's ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

Value = Callable[[KafkaSection, BrokerIdentity], str | None]


@dataclass(frozen=True)
class BrokerConfig:
    name: str
    kind: str  # a CONFIG_TYPES key
    kafka_default: str | None
    documentation: str
    value: Value | None = None  # the gateway's value; None: Kafka's default
    sensitive: bool = False


def _listener(settings: KafkaSection, tls: bool) -> str:
    sasl = "SASL_" if settings.sasl_mechanisms else ""
    return f"{sasl}SSL" if tls else f"{sasl}PLAINTEXT"


def _tls(settings: KafkaSection) -> bool:
    return bool(settings.tls_cert_file and settings.tls_key_file)


def main_listener(settings: KafkaSection) -> str:
    """The security protocol (and listener name) of the listener on `kafka.port`."""
    return _listener(settings, _tls(settings) and settings.tls_port < 0)


def listeners(settings: KafkaSection, identity: BrokerIdentity) -> str:
    """Where the gateway listens, as Kafka's `listeners` spells it."""
    bound = [f"{main_listener(settings)}://{settings.host}:{settings.port}"]
    if _tls(settings) and settings.tls_port >= 0:
        bound.append(f"{_listener(settings, True)}://{settings.host}:{settings.tls_port}")
    return ",".join(bound)


def advertised_listeners(settings: KafkaSection, identity: BrokerIdentity) -> str:
    """The address clients are sent to on the listener that is asked (Metadata names the
    same one): its host and advertised port."""
    beside_tls = (
        _tls(settings)
        and settings.tls_port >= 0
        and identity.port
        in (
            settings.advertised_tls_port,
            settings.tls_port,
        )
    )
    name = _listener(settings, True) if beside_tls else main_listener(settings)
    return f"{name}://{identity.host}:{identity.port}"


def _of(attribute: str, scale: float = 1) -> Value:
    def value(settings: KafkaSection, identity: BrokerIdentity) -> str:
        got = getattr(settings, attribute)
        if isinstance(got, bool):
            return str(got).lower()
        if isinstance(got, list):
            return ",".join(got)
        return str(int(got * scale)) if scale != 1 else str(got)

    return value


def _const(text: str) -> Value:
    return lambda settings, identity: text


def _node_id(settings: KafkaSection, identity: BrokerIdentity) -> str:
    return str(identity.node_id)


_INT_MAX = str((1 << 31) - 1)
_PROTOCOL_MAP = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
_PULSAR = "Pulsar stores and replicates the data; shown with Kafka's default."

BROKER_CONFIGS: tuple[BrokerConfig, ...] = (
    BrokerConfig(
        "advertised.listeners",
        "LIST",
        None,
        "The address clients are told to connect to, as Metadata advertises it"
        " (kafka.advertised_host, kafka.advertised_port).",
        advertised_listeners,
    ),
    BrokerConfig(
        "listeners",
        "LIST",
        "PLAINTEXT://:9092",
        "Where the gateway's Kafka listeners are bound (kafka.host, kafka.port,"
        " kafka.tls_port), with their security protocol.",
        listeners,
    ),
    BrokerConfig(
        "listener.security.protocol.map",
        "LIST",
        _PROTOCOL_MAP,
        "Listener names to security protocols: each listener is named after its protocol.",
    ),
    BrokerConfig(
        "inter.broker.listener.name",
        "STRING",
        None,
        "The gateway has no inter-broker traffic (Pulsar replicates); its main listener.",
        lambda settings, identity: main_listener(settings),
    ),
    BrokerConfig(
        "security.inter.broker.protocol",
        "STRING",
        "PLAINTEXT",
        "No inter-broker traffic (Pulsar replicates); Kafka's default.",
    ),
    BrokerConfig("node.id", "INT", "-1", "This gateway's Kafka node id (kafka.node_id).", _node_id),
    BrokerConfig("broker.id", "INT", "-1", "Same as node.id.", _node_id),
    BrokerConfig(
        "process.roles",
        "LIST",
        "",
        "The gateway acts as a broker and answers the controller APIs it serves itself.",
        _const("broker,controller"),
    ),
    BrokerConfig(
        "sasl.enabled.mechanisms",
        "LIST",
        "GSSAPI",
        "The SASL mechanisms offered (kafka.sasl_mechanisms); empty: no SASL.",
        _of("sasl_mechanisms"),
    ),
    BrokerConfig(
        "ssl.client.auth",
        "STRING",
        "none",
        "Whether TLS clients must present a certificate (kafka.tls_ca_file).",
        lambda settings, identity: "required" if settings.tls_ca_file else "none",
    ),
    BrokerConfig(
        "ssl.key.password",
        "PASSWORD",
        None,
        "The TLS key is read from kafka.tls_key_file; never shown.",
        sensitive=True,
    ),
    BrokerConfig(
        "principal.builder.class",
        "CLASS",
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
        "Principals are User:<name> of the gateway's users store (docs/security.md).",
    ),
    BrokerConfig(
        "create.topic.policy.class.name",
        "CLASS",
        None,
        "No pluggable policy; the gateway's partition limits apply instead.",
    ),
    BrokerConfig(
        "auto.create.topics.enable",
        "BOOLEAN",
        "true",
        "Whether Metadata and Produce create unknown topics (kafka.auto_create_topics).",
        _of("auto_create_topics"),
    ),
    BrokerConfig(
        "delete.topic.enable",
        "BOOLEAN",
        "true",
        "DeleteTopics deletes (on the embedded broker logically:"
        " docs/pulsar-mapping.md, 'Deleting topics').",
    ),
    BrokerConfig(
        "num.partitions",
        "INT",
        "1",
        "Partitions of an auto-created topic (kafka.default_partitions).",
        _of("default_partitions"),
    ),
    BrokerConfig("default.replication.factor", "INT", "1", _PULSAR),
    BrokerConfig("min.insync.replicas", "INT", "1", _PULSAR),
    BrokerConfig("offsets.topic.replication.factor", "SHORT", "3", _PULSAR, _const("1")),
    BrokerConfig("transaction.state.log.replication.factor", "SHORT", "3", _PULSAR, _const("1")),
    BrokerConfig("unclean.leader.election.enable", "BOOLEAN", "false", _PULSAR),
    BrokerConfig(
        "message.max.bytes",
        "INT",
        "1048588",
        "Largest record batch a producer may send (kafka.message_max_bytes).",
        _of("message_max_bytes"),
    ),
    BrokerConfig(
        "fetch.max.bytes",
        "INT",
        "57671680",
        "Most bytes one Fetch answer holds (kafka.fetch_max_bytes).",
        _of("fetch_max_bytes"),
    ),
    BrokerConfig(
        "socket.request.max.bytes",
        "INT",
        "104857600",
        "Largest request frame accepted (kafka.max_frame_bytes).",
        _of("max_frame_bytes"),
    ),
    BrokerConfig(
        "max.connections",
        "INT",
        _INT_MAX,
        "Connections the listener accepts (kafka.max_connections).",
        _of("max_connections"),
    ),
    BrokerConfig(
        "max.connections.per.ip",
        "INT",
        _INT_MAX,
        "Connections one address may hold (kafka.max_connections_per_ip).",
        _of("max_connections_per_ip"),
    ),
    BrokerConfig(
        "connections.max.idle.ms",
        "LONG",
        "600000",
        "An idle connection is closed after this long (kafka.connection_idle_seconds).",
        _of("connection_idle_seconds", 1000),
    ),
    BrokerConfig(
        "connections.max.reauth.ms",
        "LONG",
        "0",
        "How long a SASL session lasts before re-authentication (KIP-368).",
        _of("sasl_session_lifetime_ms"),
    ),
    BrokerConfig(
        "queued.max.request.bytes",
        "LONG",
        "-1",
        "Request bytes queued for all connections together (kafka.max_queued_request_bytes).",
        _of("max_queued_request_bytes"),
    ),
    BrokerConfig(
        "group.min.session.timeout.ms",
        "INT",
        "6000",
        "Shortest session a classic group member may ask for.",
        _of("group_min_session_timeout_ms"),
    ),
    BrokerConfig(
        "group.max.session.timeout.ms",
        "INT",
        "1800000",
        "Longest session a classic group member may ask for.",
        _of("group_max_session_timeout_ms"),
    ),
    BrokerConfig(
        "group.initial.rebalance.delay.ms",
        "INT",
        "3000",
        "How long a new classic group waits for more members before its first rebalance.",
        _of("group_initial_rebalance_delay_ms"),
    ),
    BrokerConfig(
        "group.coordinator.rebalance.protocols",
        "LIST",
        "classic,consumer",
        "Group protocols served: classic and KIP-848 consumer groups.",
    ),
    BrokerConfig(
        "group.consumer.assignors",
        "LIST",
        "org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
        "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        "Server assignors of consumer groups, the first the default; a member names one"
        " with group.remote.assignor.",
        _const(",".join(SERVER_ASSIGNORS)),
    ),
    BrokerConfig(
        "group.consumer.session.timeout.ms",
        "INT",
        "45000",
        "Session of a consumer group member (kafka.group_consumer_session_timeout_ms).",
        _of("group_consumer_session_timeout_ms"),
    ),
    BrokerConfig(
        "group.consumer.heartbeat.interval.ms",
        "INT",
        "5000",
        "Heartbeat interval given to consumer group members.",
        _of("group_consumer_heartbeat_interval_ms"),
    ),
    BrokerConfig("offsets.retention.minutes", "INT", "10080", "Committed offsets are kept."),
    BrokerConfig(
        "transaction.max.timeout.ms",
        "INT",
        "900000",
        "Longest transaction timeout a producer may ask for.",
        _of("transaction_max_timeout_ms"),
    ),
    BrokerConfig("log.retention.hours", "INT", "168", _PULSAR),
    BrokerConfig(
        "log.retention.ms",
        "LONG",
        None,
        "Nothing is deleted by age here: Pulsar's namespace retention decides.",
        _const("-1"),
    ),
    BrokerConfig("log.retention.bytes", "LONG", "-1", _PULSAR),
    BrokerConfig("log.segment.bytes", "INT", "1073741824", _PULSAR),
    BrokerConfig("log.cleanup.policy", "LIST", "delete", "Default cleanup.policy of a topic."),
    BrokerConfig("log.cleaner.min.cleanable.ratio", "DOUBLE", "0.5", _PULSAR),
    BrokerConfig(
        "log.message.timestamp.type",
        "STRING",
        "CreateTime",
        "Default message.timestamp.type of a topic.",
    ),
    BrokerConfig(
        "compression.type", "STRING", "producer", "Batches are stored as producers sent them."
    ),
)


def broker_entries(
    settings: KafkaSection, identity: BrokerIdentity
) -> list[tuple[BrokerConfig, str | None, int]]:
    """(config, value, Kafka config source) of every broker config, by name."""
    rows = []
    for config in BROKER_CONFIGS:
        value = config.kafka_default if config.value is None else config.value(settings, identity)
        if config.sensitive:
            value = None
        source = DEFAULT_CONFIG if value == config.kafka_default else STATIC_BROKER_CONFIG
        rows.append((config, value, source))
    return sorted(rows, key=lambda row: row[0].name)
