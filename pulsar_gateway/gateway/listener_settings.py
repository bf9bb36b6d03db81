"""The `[kafka]` and `[amqp]` sections: the listeners' settings (docs in conf/gateway.toml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from pulsar_gateway.gateway.settings_base import Section, is_loopback_host, is_wildcard
from pulsar_gateway.security.oauthbearer import HMAC_ALGORITHMS, PUBLIC_KEY_ALGORITHMS

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# JWT algorithms OAUTHBEARER may accept (docs/security.md); HMAC ones only when chosen
JWT_ALGORITHMS = HMAC_ALGORITHMS + PUBLIC_KEY_ALGORITHMS


class _TlsSettings(Section):
    """A listener's TLS files (docs/security.md); empty certificate: plaintext."""

    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_ca_file: str = ""  # when set, clients must present a certificate it signed

    @model_validator(mode="after")
    def _tls_pair(self) -> _TlsSettings:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file must be set together")
        if self.tls_ca_file and not self.tls_cert_file:
            raise ValueError("tls_ca_file needs tls_cert_file and tls_key_file")
        for name in ("tls_cert_file", "tls_key_file", "tls_ca_file"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"{name}: no such file")
        return self

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_cert_file)


# the management port's section (config.py) takes the same files
TlsSettings = _TlsSettings


class KafkaSection(_TlsSettings):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(9092, ge=0, le=65535)
    advertised_host: str = ""
    advertised_port: int = Field(0, ge=0, le=65535)
    tenant: str = "public"
    namespace: str = "default"
    auto_create_topics: bool = True
    default_partitions: int = Field(1, ge=1, le=10000)
    max_frame_bytes: int = Field(100 * 1024 * 1024, ge=1024)
    max_connections: int = Field(10000, ge=1)
    # abuse bounds of the listener (docs in conf/gateway.toml): one host may not take every
    # connection, an idle or half-sent socket is closed, decoded and queued requests are capped
    max_connections_per_ip: int = Field(1000, ge=1)
    connection_idle_seconds: float = Field(600.0, gt=0)  # Kafka's connections.max.idle.ms
    frame_timeout_seconds: float = Field(30.0, gt=0)
    # a frame under way must average min_frame_bytes_per_second once this grace has
    # passed since its body began (conf/gateway.toml says why 5 s)
    frame_grace_seconds: float = Field(5.0, gt=0)
    min_frame_bytes_per_second: int = Field(256 * 1024, ge=1)
    max_request_entries: int = Field(100_000, ge=1)
    max_queued_request_bytes_per_connection: int = Field(32 * 1024 * 1024, ge=1024)
    # all connections from one address together: one host cannot fill the listener's
    max_queued_request_bytes_per_ip: int = Field(64 * 1024 * 1024, ge=1024)
    max_queued_request_bytes: int = Field(256 * 1024 * 1024, ge=1024)  # queued.max.request.bytes
    node_id: int = Field(0, ge=0)
    cluster_id: str = "pulsar-gateway"
    index_interval: int = Field(1000, ge=1)
    tail_cache_records: int = Field(1_000_000, ge=0)
    tail_cache_partition_bytes: int = Field(64 * 1024 * 1024, ge=0)
    tail_cache_bytes: int = Field(256 * 1024 * 1024, ge=0)
    # Kafka's message.max.bytes and fetch.max.bytes, with Kafka's defaults
    message_max_bytes: int = Field(1048588, ge=0, le=2**31 - 1)
    fetch_max_bytes: int = Field(55 * 1024 * 1024, ge=1024, le=2**31 - 1)
    max_produce_inflated_bytes: int = Field(128 * 1024 * 1024, ge=1024 * 1024)
    max_connection_inflated_bytes: int = Field(256 * 1024 * 1024, ge=1024 * 1024)
    max_partitions_per_topic: int = Field(10000, ge=1)
    max_partitions_total: int = Field(100000, ge=1)
    idle_close_seconds: float = Field(60.0, gt=0)
    max_in_flight_sends: int = Field(50000, ge=1)
    entry_format: Literal["pulsar", "kafka"] = "pulsar"
    group_min_session_timeout_ms: int = Field(6000, ge=1)
    group_max_session_timeout_ms: int = Field(1800000, ge=1)
    group_initial_rebalance_delay_ms: int = Field(0, ge=0)
    # KIP-848 consumer groups: Kafka's group.consumer.session.timeout.ms and
    # group.consumer.heartbeat.interval.ms
    group_consumer_session_timeout_ms: int = Field(45000, ge=1)
    group_consumer_heartbeat_interval_ms: int = Field(5000, ge=1)
    # KIP-932 share groups (docs/share-groups.md): Kafka's group.share.record.lock.duration.ms,
    # group.share.delivery.count.limit, group.share.partition.max.record.locks, and the
    # share.auto.offset.reset of groups that set none (Kafka's default: latest)
    share_record_lock_duration_ms: int = Field(30000, ge=1000, le=3600000)
    share_delivery_count_limit: int = Field(5, ge=2, le=10)
    share_partition_max_record_locks: int = Field(2000, ge=100, le=10000)
    share_auto_offset_reset: Literal["latest", "earliest"] = "latest"
    # who hands out share groups' records: the gateway, or the broker through a Shared
    # subscription per group and partition that Pulsar consumers may join
    # (docs/share-groups.md, "The broker dispatches")
    share_dispatch: Literal["gateway", "broker"] = "gateway"
    # Kafka's transaction.max.timeout.ms: longest transaction.timeout.ms a producer may ask
    transaction_max_timeout_ms: int = Field(900000, ge=1)
    # answer a transaction request that waits longer with a retriable error (it goes on)
    coordinator_answer_seconds: float = Field(5.0, gt=0)
    group_offset_mirror: bool = True
    group_mirror_interval_seconds: float = Field(1.0, gt=0)
    group_mirror_idle_seconds: float = Field(2.0, gt=0)
    # the mark of the gateway's own mirrored subscriptions: never empty, so a subscription
    # named after a group alone (a Pulsar application's) is never moved
    group_subscription_prefix: str = Field("__kafka.group.", min_length=1)
    # SASL mechanisms offered (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); empty: no authentication
    sasl_mechanisms: list[str] = Field(default_factory=list)
    # KIP-368 (Kafka's connections.max.reauth.ms): an authenticated session lasts this long
    # unless the client re-authenticates; 0: for ever
    sasl_session_lifetime_ms: int = Field(0, ge=0)
    # before login (SASL on): Kafka's sasl.server.max.receive.size caps a frame (and what
    # the connection may have queued), at most this many such connections per address, and
    # a connection not logged in within login_timeout_seconds is closed
    max_unauthenticated_frame_bytes: int = Field(512 * 1024, ge=1024)
    max_unauthenticated_connections_per_ip: int = Field(100, ge=1)
    login_timeout_seconds: float = Field(10.0, gt=0)
    # with TLS files set: -1 makes `port` the TLS listener; a port (0: any) opens a TLS
    # listener there beside the plaintext one on `port`, advertising its own port
    tls_port: int = Field(-1, ge=-1, le=65535)
    advertised_tls_port: int = Field(0, ge=0, le=65535)
    # with tls_ca_file: a client certificate's common name is the connection's user (Kafka's
    # SSL principal), which must be in the users store; with SASL on, SASL's user wins
    tls_certificate_users: bool = False
    # serve clients that do not authenticate on a non-loopback `host` (docs/security.md,
    # "Safe defaults"): without it such a listener refuses to start
    allow_anonymous: bool = False
    # OAUTHBEARER (docs/security.md): JWTs checked against one key (an HMAC secret or a PEM
    # public key) or a JWKS file, with these algorithms only; issuer and audience checked
    # when set; the principal (the Kafka user) is this claim
    oauthbearer_key_file: str = ""
    oauthbearer_jwks_file: str = ""
    oauthbearer_algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"])
    oauthbearer_issuer: str = ""
    oauthbearer_audience: str = ""
    oauthbearer_principal_claim: str = Field("sub", min_length=1)

    @field_validator("sasl_mechanisms", "oauthbearer_algorithms", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """From an environment variable or --set: "PLAIN,SCRAM-SHA-256"."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("sasl_mechanisms")
    @classmethod
    def _known_mechanisms(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(SASL_MECHANISMS))
        if unknown:
            raise ValueError(f"unknown SASL mechanisms {unknown}; known: {list(SASL_MECHANISMS)}")
        return list(dict.fromkeys(value))

    @field_validator("oauthbearer_algorithms")
    @classmethod
    def _known_algorithms(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(JWT_ALGORITHMS))
        if unknown or not value:
            raise ValueError(f"must be some of {list(JWT_ALGORITHMS)}")
        hmac = {name for name in value if name.startswith("HS")}
        if hmac and hmac != set(value):
            raise ValueError("HMAC (HS*) and public-key algorithms cannot be mixed")
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _oauthbearer_key(self) -> KafkaSection:
        if "OAUTHBEARER" not in self.sasl_mechanisms:
            return self
        if bool(self.oauthbearer_key_file) == bool(self.oauthbearer_jwks_file):
            raise ValueError(
                "OAUTHBEARER needs exactly one of oauthbearer_key_file and oauthbearer_jwks_file"
            )
        for name in ("oauthbearer_key_file", "oauthbearer_jwks_file"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"{name}: no such file")
        return self

    @field_validator("advertised_host")
    @classmethod
    def _reachable(cls, value: str) -> str:
        if value and is_wildcard(value):
            raise ValueError("must be an address clients can reach, not a wildcard")
        return value

    @field_validator("tenant", "namespace")
    @classmethod
    def _no_slash(cls, value: str) -> str:
        if not value or "/" in value:
            raise ValueError("must be a non-empty name without '/'")
        return value

    @model_validator(mode="after")
    def _certificate_users(self) -> KafkaSection:
        if self.tls_certificate_users and not self.tls_ca_file:
            raise ValueError("tls_certificate_users needs tls_ca_file (client certificates)")
        return self

    @property
    def authenticates(self) -> bool:
        """Whether every connection must authenticate: SASL, or client certificates on a
        TLS-only listener (with a plaintext listener beside it, that one would not ask)."""
        return bool(self.sasl_mechanisms) or (bool(self.tls_ca_file) and self.tls_port < 0)

    @model_validator(mode="after")
    def _anonymous_only_on_loopback(self) -> KafkaSection:
        anonymous = not self.authenticates and not self.allow_anonymous
        if self.enabled and anonymous and not is_loopback_host(self.host):
            raise ValueError(
                "host: a non-loopback address needs authentication (kafka.sasl_mechanisms, "
                "or kafka.tls_ca_file on a TLS-only listener), or kafka.allow_anonymous = true"
            )
        return self

    @model_validator(mode="after")
    def _partition_limits(self) -> KafkaSection:
        if self.default_partitions > self.max_partitions_per_topic:
            raise ValueError("default_partitions must not exceed max_partitions_per_topic")
        if self.max_partitions_per_topic > self.max_partitions_total:
            raise ValueError("max_partitions_per_topic must not exceed max_partitions_total")
        return self


class AmqpSection(_TlsSettings):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(5672, ge=0, le=65535)
    # the AMQPS listener's port (AMQP over TLS), served beside `port` when tls_cert_file is set
    tls_port: int = Field(5671, ge=0, le=65535)
    tenant: str = "public"
    max_connections: int = Field(10000, ge=1)
    # as the Kafka listener's; there is no idle timeout beyond the heartbeat, as in RabbitMQ
    max_connections_per_ip: int = Field(1000, ge=1)
    handshake_timeout_seconds: float = Field(10.0, gt=0)  # RabbitMQ's handshake_timeout
    frame_timeout_seconds: float = Field(30.0, gt=0)
    # as the Kafka listener's: a frame under way must average min_frame_bytes_per_second
    # once this grace has passed since it began (handlers/amqp/frame_pace.py)
    frame_grace_seconds: float = Field(5.0, gt=0)
    min_frame_bytes_per_second: int = Field(256 * 1024, ge=1)
    reader_idle_seconds: float = Field(30.0, gt=0)
    # queues written as batched entries and read through the gateway's own Pulsar client
    # (pulsar.client = "native"): an entry is acknowledged in Pulsar once all of its
    # messages are, and which of them were is kept in the metadata store
    # (storage/amqp/kept_acks.py; docs/backend.md, "AMQP queue messages in batched entries")
    batched_queue_entries: bool = True
    # bytes of the messages published to queues (batched entries) kept for their readers,
    # a quarter of it at most for one queue, the oldest dropped first; 0: none kept
    # (storage/amqp/published.py; docs/backend.md, "Published entries kept for the queue reader")
    published_cache_bytes: int = Field(64 * 1024 * 1024, ge=0)
    heartbeat_seconds: int = Field(60, ge=0, le=65535)
    frame_max: int = Field(131072, ge=4096)
    channel_max: int = Field(2047, ge=1, le=65535)
    # bytes of uncommitted publishes (and settlements) the open transactions of one
    # connection hold together, so also one transaction's most: as large as the largest
    # message RabbitMQ takes by default (128 MiB), so any message fits in a transaction
    max_tx_bytes: int = Field(128 * 1024 * 1024, ge=1024)
    # RabbitMQ's max_message_size: its 3.x default and its ceiling
    max_message_bytes: int = Field(128 * 1024 * 1024, ge=1, le=512 * 1024 * 1024)
    # bodies one connection is still receiving over all its channels, reserved at each
    # content header: two largest messages may trickle in at once
    max_incoming_body_bytes: int = Field(256 * 1024 * 1024, ge=1)
    # bytes of one connection's publishes awaiting the store (a copy per queue, plus ~1 KiB
    # each) before it is blocked (connection.blocked, socket not read) until half are
    # stored: twice the output high water, and ~16,000 small publishes pipelined (a count
    # of 2,000 was the bound, whatever their size)
    max_in_flight_bytes: int = Field(16 * 1024 * 1024, ge=64 * 1024)
    # the same across every connection: past it, the publish alarm blocks every connection
    # that publishes until half are stored (RabbitMQ's memory alarm; publish_alarm.py)
    max_total_in_flight_bytes: int = Field(256 * 1024 * 1024, ge=1024 * 1024)
    users: dict[str, str] = Field(default_factory=lambda: {"guest": "guest"})
    # several processes bind `port` (and `tls_port`) at once (SO_REUSEPORT): the workers of
    # `gateway.workers` share one AMQP port; the kernel spreads connections over them
    reuse_port: bool = False
    # in a cluster: the member-to-member AMQP listener, where the other members hand over
    # connections for a vhost this member owns (docs/cluster.md, "AMQP on one port"). It
    # asks for the same login as `port`; plaintext, so across hosts keep it on a private
    # network. 0: any free port (the members learn it from the heartbeats)
    cluster_host: str = "127.0.0.1"
    cluster_port: int = Field(0, ge=0, le=65535)

    @model_validator(mode="after")
    def _one_message_fits(self) -> AmqpSection:
        if self.max_incoming_body_bytes < self.max_message_bytes:
            raise ValueError("max_incoming_body_bytes must be at least max_message_bytes")
        return self


# Where the gateway keeps its own state (docs/pulsar-mapping.md, "The metadata store").
