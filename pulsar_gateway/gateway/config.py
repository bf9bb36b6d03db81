"""Settings: `conf/gateway.toml`, then environment variables, then CLI flags.

One model per section so that a bad value is reported with its full dotted name
(`kafka.port`), whichever of the three sources it came from.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from pulsar_gateway.gateway.listener_settings import AmqpSection, KafkaSection, TlsSettings
from pulsar_gateway.gateway.settings_base import Section, is_host, is_loopback_host, is_wildcard

# the listeners' sections live beside (listener_settings.py); importable from here as before
__all__ = ["AmqpSection", "KafkaSection", "is_loopback_host"]

ENV_PREFIX = "PULSAR_GATEWAY_"
DEFAULT_CONFIG_PATH = Path("conf/gateway.toml")


class ConfigError(Exception):
    """Start-up stops with this; the message names every offending setting."""


class GatewaySection(Section):
    data_dir: Path = Path("data")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # a user created in the users store at start-up when the store does not hold it yet
    # (docs/security.md, the Docker image's first administrator); its password is the
    # first line of bootstrap_password_file (a container secret), never a setting's value
    bootstrap_user: str = ""
    bootstrap_password_file: str = ""
    # the key users-store records are signed with (docs/security.md, "The embedded
    # broker"): empty, `<embedded data dir>/users.key` with the embedded broker (made at
    # the first start), no signing with an external Pulsar (its own authentication guards
    # the topic); set it to one file shared by every gateway of a cluster to sign there too
    users_key_file: str = ""
    # worker processes (docs/cluster.md, "Workers on one host"): 1 is one process serving
    # everything; more (or `auto`, one per core) starts a supervisor, one embedded broker and
    # that many gateways, each a cluster member with its own Kafka port and node id
    workers: int | Literal["auto"] = 1
    # a worker that exits more than this many times within the window stops the supervisor
    worker_restart_limit: int = Field(5, ge=0)
    worker_restart_window_seconds: float = Field(60.0, gt=0)
    # C heap allocations of at least this many bytes get mappings of their own, returned
    # to the system when freed (glibc's M_MMAP_THRESHOLD); 0 = glibc's own, sliding one
    # (docs/architecture.md, "Memory")
    malloc_mmap_threshold_bytes: int = Field(512 * 1024, ge=0, le=32 * 1024 * 1024)

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


# Where the gateway keeps its own state (docs/pulsar-mapping.md, "The metadata store").
DEFAULT_METADATA_NAMESPACE = "public/__gateway"


class PulsarSection(Section):
    service_url: str = ""
    admin_url: str = ""
    operation_timeout_seconds: int = Field(10, ge=1)
    metadata_namespace: str = DEFAULT_METADATA_NAMESPACE
    # how Kafka partitions reach Pulsar: `native` (the gateway's own wire client: one batched
    # entry per Kafka record batch of the `pulsar` format, partition reads entry by entry;
    # docs/pulsar-protocol.md, "On the data path") or `pulsar-client` (Pulsar's Python
    # client, one message per record); AMQP and the gateway's own topics use pulsar-client
    # either way
    client: Literal["pulsar-client", "native"] = "native"
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


class EmbeddedSection(Section):
    port: int = Field(0, ge=0, le=65535)
    data_dir: str = ""
    start_timeout_seconds: float = Field(20.0, gt=0)
    restart_limit: int = Field(5, ge=0)
    restart_window_seconds: float = Field(60.0, gt=0)
    log_level: Literal["error", "warn", "info", "debug", "trace"] = "warn"


class MetricsSection(TlsSettings):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(9404, ge=0, le=65535)
    # /metrics asks for a login too (a user with describe on the cluster, or an
    # administrator); /api/ and /cluster always do, /health never (docs/security.md)
    require_login: bool = False
    # connections in all and from one address; beyond them a connection is closed at once
    max_connections: int = Field(256, ge=1)
    max_connections_per_ip: int = Field(16, ge=1)

    @field_validator("host")
    @classmethod
    def _an_address(cls, value: str) -> str:
        if not is_host(value):
            raise ValueError("must be an IP address or a host name")
        return value


class AuthorizationSection(Section):
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


class ClusterSection(Section):
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
        if value and is_wildcard(value):
            raise ValueError("must be an address the other members can reach, not a wildcard")
        return value

    @model_validator(mode="after")
    def _lease_covers_heartbeats(self) -> ClusterSection:
        # a member fences itself a heartbeat before its lease ends, and needs at least one
        # more heartbeat to renew it before that: three heartbeats per lease at the least
        if self.lease_seconds < 3 * self.heartbeat_seconds:
            raise ValueError("lease_seconds must be at least 3 x heartbeat_seconds")
        return self


class Settings(Section):
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
    def users_key_path(self) -> Path | None:
        """The users store's signing key file (`gateway.users_key_file`); None: unsigned."""
        if self.gateway.users_key_file:
            return Path(self.gateway.users_key_file)
        if self.embedded_mode:
            return self.embedded_data_dir / "users.key"
        return None

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
    """One line per bad setting, naming it with the rule it breaks, never its value: the
    value may be a password (`amqp.users`, credentials in a URL) and this text goes to a
    terminal or a log."""
    lines = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in item["loc"])
        # a rule across sections names its settings itself
        rule = f"setting '{where}': {item['msg']}" if where else item["msg"]
        lines.append(f"{rule} (value not shown)")
    return "\n".join(lines)


def _read_config_file(path: Path) -> dict[str, Any]:
    """The TOML file's settings; ConfigError (one line naming the file) when it cannot be
    read, is not UTF-8 text or is not TOML."""
    try:
        data = path.read_bytes()
    except OSError as exc:  # a directory, no permission, ...
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None


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
        tree = _read_config_file(path)
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
