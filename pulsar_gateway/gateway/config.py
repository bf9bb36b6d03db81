"""Settings: `conf/gateway.toml`, then environment variables, then CLI flags.

One model per section so that a bad value is reported with its full dotted name
(`kafka.port`), whichever of the three sources it came from.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from pulsar_gateway.security.oauthbearer import HMAC_ALGORITHMS, PUBLIC_KEY_ALGORITHMS

ENV_PREFIX = "PULSAR_GATEWAY_"
DEFAULT_CONFIG_PATH = Path("conf/gateway.toml")


class ConfigError(Exception):
    """Start-up stops with this; the message names every offending setting."""


def is_loopback_host(host: str) -> bool:
    """A listener address only this machine reaches: `localhost` or a loopback IP. Any other
    name counts as reachable from elsewhere (it is not resolved here)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_unspecified
    except ValueError:
        return False


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class GatewaySection(_Section):
    data_dir: Path = Path("data")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # a user created in the users store at start-up when the store does not hold it yet
    # (docs/security.md, the Docker image's first administrator); its password is the
    # first line of bootstrap_password_file (a container secret), never a setting's value
    bootstrap_user: str = ""
    bootstrap_password_file: str = ""
    # worker processes (docs/cluster.md, "Workers on one host"): 1 is one process serving
    # everything; more (or `auto`, one per core) starts a supervisor, one embedded broker and
    # that many gateways, each a cluster member with its own Kafka port and node id
    workers: int | Literal["auto"] = 1
    # a worker that exits more than this many times within the window stops the supervisor
    worker_restart_limit: int = Field(5, ge=0)
    worker_restart_window_seconds: float = Field(60.0, gt=0)

    @field_validator("workers", mode="before")
    @classmethod
    def _count_or_auto(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
            raise ValueError("must be a whole number from 1 to 1024, or auto")
        return value

    @model_validator(mode="after")
    def _bootstrap_pair(self) -> GatewaySection:
        if bool(self.bootstrap_user) != bool(self.bootstrap_password_file):
            raise ValueError("bootstrap_user and bootstrap_password_file must be set together")
        if self.bootstrap_password_file and not Path(self.bootstrap_password_file).is_file():
            raise ValueError("bootstrap_password_file: no such file")
        return self


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# JWT algorithms OAUTHBEARER may accept (docs/security.md); HMAC ones only when chosen
JWT_ALGORITHMS = HMAC_ALGORITHMS + PUBLIC_KEY_ALGORITHMS


class _TlsSettings(_Section):
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
    max_request_entries: int = Field(100_000, ge=1)
    max_queued_request_bytes_per_connection: int = Field(32 * 1024 * 1024, ge=1024)
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
    # Kafka's transaction.max.timeout.ms: longest transaction.timeout.ms a producer may ask
    transaction_max_timeout_ms: int = Field(900000, ge=1)
    # answer a transaction request that waits longer with a retriable error (it goes on)
    coordinator_answer_seconds: float = Field(5.0, gt=0, allow_inf_nan=False)
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
        if value and _is_wildcard(value):
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
    reader_idle_seconds: float = Field(30.0, gt=0)
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
DEFAULT_METADATA_NAMESPACE = "public/__gateway"


class PulsarSection(_Section):
    service_url: str = ""
    admin_url: str = ""
    operation_timeout_seconds: int = Field(10, ge=1)
    metadata_namespace: str = DEFAULT_METADATA_NAMESPACE
    # Toward an external Pulsar (docs/security.md): TLS trust and hostname verification for
    # pulsar+ssl:// and https://, and one way to authenticate: a token (the value, from the
    # environment, or a file re-read at each use), OAuth2 client credentials, or a client
    # certificate (Pulsar's AuthenticationTLS)
    tls_trust_certs_file: str = ""
    tls_hostname_verification: bool = True
    auth_token: SecretStr = SecretStr("")
    auth_token_file: str = ""
    oauth2_issuer_url: str = ""
    oauth2_credentials_file: str = ""  # Pulsar's private_key: client_id/client_secret JSON
    oauth2_audience: str = ""
    oauth2_scope: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""

    @property
    def auth_method(self) -> Literal["none", "token", "oauth2", "tls"]:
        if self.auth_token.get_secret_value() or self.auth_token_file:
            return "token"
        if self.oauth2_issuer_url:
            return "oauth2"
        if self.tls_cert_file:
            return "tls"
        return "none"

    @model_validator(mode="after")
    def _security(self) -> PulsarSection:
        methods = [
            bool(self.auth_token.get_secret_value()),
            bool(self.auth_token_file),
            bool(self.oauth2_issuer_url),
            bool(self.tls_cert_file),
        ]
        if sum(methods) > 1:
            raise ValueError(
                "choose one of auth_token, auth_token_file, oauth2_issuer_url and tls_cert_file"
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file must be set together")
        if bool(self.oauth2_issuer_url) != bool(self.oauth2_credentials_file):
            raise ValueError("oauth2_issuer_url and oauth2_credentials_file must be set together")
        if self.oauth2_issuer_url and not self.oauth2_issuer_url.startswith("https://"):
            raise ValueError("oauth2_issuer_url: must start with https://")
        if (any(methods) or self.tls_trust_certs_file) and not self.service_url:
            raise ValueError("TLS and authentication settings need pulsar.service_url")
        for name in (
            "tls_trust_certs_file",
            "auth_token_file",
            "oauth2_credentials_file",
            "tls_cert_file",
            "tls_key_file",
        ):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"{name}: no such file")
        return self

    @field_validator("service_url")
    @classmethod
    def _pulsar_scheme(cls, value: str) -> str:
        if value and not value.startswith(("pulsar://", "pulsar+ssl://")):
            raise ValueError("must start with pulsar:// or pulsar+ssl://")
        return value

    @field_validator("admin_url")
    @classmethod
    def _http_scheme(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value


class EmbeddedSection(_Section):
    port: int = Field(0, ge=0, le=65535)
    data_dir: str = ""
    start_timeout_seconds: float = Field(20.0, gt=0)
    restart_limit: int = Field(5, ge=0)
    restart_window_seconds: float = Field(60.0, gt=0)
    log_level: Literal["error", "warn", "info", "debug", "trace"] = "warn"


class MetricsSection(_Section):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(9404, ge=0, le=65535)


class AuthorizationSection(_Section):
    """Who may do what (docs/security.md, "Authorization"); the rights themselves live in
    the users store."""

    # users of the users store who may do everything, on both protocols (Kafka's
    # super.users, without the `User:` prefix)
    superusers: list[str] = Field(default_factory=list)

    @field_validator("superusers", mode="before")
    @classmethod
    def _comma_separated_users(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value


class ClusterSection(_Section):
    """Several gateways sharing the work (docs/cluster.md); off: one gateway owns everything."""

    enabled: bool = False
    # unique and stable per member ("host-a/1"); empty: "<hostname>/<kafka port>"
    member_id: str = Field("", max_length=200)
    # this member's Kafka broker id, unique in the cluster; -1: kafka.node_id
    node_id: int = Field(-1, ge=-1, le=1023)  # below 1024: docs/cluster.md, "Producer ids"
    # where the OTHER members reach this member's AMQP listener; empty/0: amqp.host/port
    advertised_amqp_host: str = ""
    advertised_amqp_port: int = Field(0, ge=0, le=65535)
    heartbeat_seconds: float = Field(1.0, gt=0, le=60)
    # ownership of a dead member moves this long after its last heartbeat was read
    lease_seconds: float = Field(6.0, gt=0, le=600)
    # shared by every member: an AMQP hand-off then carries the client's address and TLS
    # certificate name, signed with it, so guest (loopback only) and EXTERNAL logins work
    # across members (docs/cluster.md, "AMQP on one port"); `--workers` makes one up
    member_secret: SecretStr = SecretStr("")

    @field_validator("member_id")
    @classmethod
    def _printable_id(cls, value: str) -> str:
        if any(char.isspace() or not char.isprintable() for char in value):
            raise ValueError("must be printable without spaces")
        return value

    @field_validator("advertised_amqp_host")
    @classmethod
    def _reachable_amqp(cls, value: str) -> str:
        if value and _is_wildcard(value):
            raise ValueError("must be an address the other members can reach, not a wildcard")
        return value

    @model_validator(mode="after")
    def _lease_covers_heartbeats(self) -> ClusterSection:
        # a member fences itself a heartbeat before its lease ends, and needs at least one
        # more heartbeat to renew it before that: three heartbeats per lease at the least
        if self.lease_seconds < 3 * self.heartbeat_seconds:
            raise ValueError("lease_seconds must be at least 3 x heartbeat_seconds")
        return self


class Settings(_Section):
    gateway: GatewaySection = GatewaySection()
    kafka: KafkaSection = KafkaSection()
    amqp: AmqpSection = AmqpSection()
    pulsar: PulsarSection = PulsarSection()
    embedded: EmbeddedSection = EmbeddedSection()
    metrics: MetricsSection = MetricsSection()
    authorization: AuthorizationSection = AuthorizationSection()
    cluster: ClusterSection = ClusterSection()

    @property
    def embedded_mode(self) -> bool:
        return not self.pulsar.service_url

    @model_validator(mode="after")
    def _cluster_node_id_in_range(self) -> Settings:
        # producer ids are counter * 1024 + node id (docs/cluster.md, "Producer ids")
        if self.cluster.enabled and self.cluster_node_id >= 1024:
            raise ValueError(
                "setting 'kafka.node_id': must be below 1024 in a cluster (or set cluster.node_id)"
            )
        return self

    @property
    def cluster_node_id(self) -> int:
        """This gateway's Kafka broker id: `cluster.node_id` in a cluster, when set."""
        if self.cluster.enabled and self.cluster.node_id >= 0:
            return self.cluster.node_id
        return self.kafka.node_id

    @property
    def embedded_data_dir(self) -> Path:
        if self.embedded.data_dir:
            return Path(self.embedded.data_dir)
        return self.gateway.data_dir / "pulsar"


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    section, _, key = dotted.partition(".")
    if not key:
        raise ConfigError(f"setting '{dotted}': expected section.key")
    node = tree.setdefault(section, {})
    if not isinstance(node, dict):
        raise ConfigError(f"setting '{section}': is not a section")
    node[key] = value


def _env_overrides(environ: dict[str, str]) -> dict[str, str]:
    """PULSAR_GATEWAY_KAFKA__PORT=9093 -> {"kafka.port": "9093"}."""
    found = {}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and "__" in name:
            section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
            found[f"{section}.{key}"] = value
    return found


def _describe(error: ValidationError) -> str:
    """Each bad setting by name with the rule it breaks, never its value: the value may be a
    password (`amqp.users`, credentials in a URL) and this text goes to a terminal or a log."""
    lines = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in item["loc"])
        # a rule across sections names its settings itself
        lines.append(f"setting '{where}': {item['msg']}" if where else item["msg"])
    return "invalid configuration (values not shown):\n  " + "\n  ".join(lines)


def load_settings(
    path: Path | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """Merge file, environment and explicit overrides, then validate once."""
    environ = dict(os.environ) if environ is None else environ
    if path is None:
        env_path = environ.get(ENV_PREFIX + "CONFIG")
        path = Path(env_path) if env_path else DEFAULT_CONFIG_PATH
        required = bool(env_path)
    else:
        required = True
    tree: dict[str, Any] = {}
    if path.exists():
        try:
            tree = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc
    elif required:
        raise ConfigError(f"config file {path}: not found")
    for dotted, value in _env_overrides(environ).items():
        _set_dotted(tree, dotted, value)
    for dotted, value in (overrides or {}).items():
        _set_dotted(tree, dotted, value)
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
