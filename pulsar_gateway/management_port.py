"""The composition root's wiring of the management port (gateway/metrics.py): who may call
it (handlers/http_login.py), the AMQP management API, definitions upload and web console
(console/) behind it, and the start-up warning for a port reachable from elsewhere
(docs/security.md, "The management port")."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from pulsar_gateway.console.amqp_view import AmqpActions
from pulsar_gateway.console.kafka_view import KafkaView
from pulsar_gateway.console.migrations_view import MigrationsView
from pulsar_gateway.console.routes import Console
from pulsar_gateway.console.users_view import Accounts
from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.backend.storage_sizes import StorageSizes
from pulsar_gateway.gateway.config import Settings, is_loopback_host
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.handlers.http_login import HttpLogins
from pulsar_gateway.handlers.tls_accept import TlsListener
from pulsar_gateway.security.credentials import UserDirectory
from pulsar_gateway.security.logins import PasswordLogins

log = logging.getLogger("gateway")


def management_port(
    settings: Settings,
    health: Callable[[], dict[str, Any]],
    cluster: Callable[[], dict[str, Any]],
    users: UserDirectory,
    authorizer: Authorizer,
    amqp_server: Any = None,
    vhost_namespace: Callable[[str], str] = str,
    kafka_server: Any = None,
    user_names: Callable[[], Iterable[str]] = tuple,
    accounts: Accounts | None = None,
    topic_sizes: StorageSizes | None = None,
    tls: ssl.SSLContext | None = None,
) -> metrics.MetricsServer:
    """The HTTP server of `[metrics]`, not started. `amqp_server`: the AMQP listener, once
    it listens (its broker, connections and address), or None without AMQP;
    `kafka_server`: the Kafka listener (its storage and group coordinators), or None;
    `user_names`: the users store's names, for the console's users page; `accounts`: the
    users store, which the console's administrators may change; `topic_sizes`: bytes stored
    per partition, where the backend can tell (gateway/backend/storage_sizes.py); `tls`:
    the context of `metrics.tls_cert_file` (loaded at start-up), or None for plain HTTP."""
    # the same users as AMQP's: the store, then the bootstrap table (guest from loopback)
    table = settings.amqp.users or {"guest": "guest"}
    logins = HttpLogins(PasswordLogins(users, table), authorizer)
    api = upload = amqp_actions = None
    if amqp_server is not None:
        from pulsar_gateway.handlers.amqp.management import ManagementApi
        from pulsar_gateway.tools.definitions_upload import DefinitionsUpload

        api = ManagementApi(amqp_server.broker, amqp_server.connections, vhost_namespace).handle
        upload = DefinitionsUpload(*amqp_server.address)  # declared over our own listener
        amqp_actions = AmqpActions(amqp_server, vhost_namespace)
    kafka_view = None
    if kafka_server is not None:
        kafka_view = KafkaView(
            kafka_server.storage,
            kafka_server.groups,
            kafka_server.consumer_groups,
            settings.kafka.tenant,
            settings.kafka.namespace,
            settings.kafka.entry_format,
            settings.kafka.max_partitions_total,
            sizes=topic_sizes if topic_sizes is not None and topic_sizes.available else None,
        )
    console = Console(
        health,
        kafka_view,
        api,
        amqp_actions,
        user_names,
        authorizer.rights_for,
        table,
        MigrationsView(settings.gateway.data_dir),
        accounts,
    )
    section = settings.metrics
    if tls is None and not is_loopback_host(section.host):
        log.warning(
            "metrics.host %s is reachable beyond this machine over plain HTTP: logins "
            "(HTTP Basic) cross the network in clear; set metrics.tls_cert_file and "
            "metrics.tls_key_file",
            section.host,
        )
    if not is_loopback_host(section.host) and not section.require_login:
        log.warning(
            "metrics.host %s is reachable beyond this machine and /metrics needs no login: "
            "it names every topic; set metrics.require_login = true, or keep the port on "
            "loopback (/api/ and /cluster ask for a login either way)",
            section.host,
        )
    return metrics.MetricsServer(
        section.host,
        section.port,
        health,
        api,
        cluster,
        upload,
        login=logins,
        require_login=section.require_login,
        console=console,
        max_connections=section.max_connections,
        max_connections_per_ip=section.max_connections_per_ip,
        # limits at accept, before the handshake, as on the Kafka and AMQPS listeners
        tls=None if tls is None else partial(TlsListener, "http", tls),
    )
