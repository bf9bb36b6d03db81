"""The gateway process: backend first, then listeners, stopped in reverse order."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Protocol

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.backend.admin import PulsarAdmin
from pulsar_gateway.gateway.backend.connection_security import PulsarSecurity
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.backend.storage_sizes import StorageSizes
from pulsar_gateway.gateway.backend.subscription_mirror import SubscriptionMirror
from pulsar_gateway.gateway.cluster.membership import PulsarMembership
from pulsar_gateway.gateway.cluster.report import ownership
from pulsar_gateway.gateway.cluster.view import (
    Member,
    SingleMemberView,
    group_key,
    partition_key,
    vhost_key,
)
from pulsar_gateway.gateway.config import Settings
from pulsar_gateway.gateway.link_file import LinkRecord, remove_link, write_link
from pulsar_gateway.gateway.loop_watch import LoopWatch
from pulsar_gateway.gateway.memory import HeapTrimmer, set_mmap_threshold
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.gateway.reserved_names import ReservedNamespaces
from pulsar_gateway.gateway.topic_names import kafka_topic_name
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.handlers.kafka.port import TopicExists
from pulsar_gateway.handlers.kafka.server import advertised_host
from pulsar_gateway.management_port import management_port
from pulsar_gateway.security.oauthbearer import TokenValidator, load_validator
from pulsar_gateway.security.record_signing import load_or_create_key
from pulsar_gateway.security.tls import server_context
from pulsar_gateway.storage.kafka.group_configs import MetadataGroupConfigs
from pulsar_gateway.storage.kafka.group_offsets import GroupOffsetStore
from pulsar_gateway.storage.kafka.share_feeds import share_feeds_for
from pulsar_gateway.storage.kafka.share_states import ShareStateStore
from pulsar_gateway.storage.kafka.subscription_position import ack_position
from pulsar_gateway.storage.kafka.topic_deletion import forget_with_topic
from pulsar_gateway.storage.kafka.topics import TopicService
from pulsar_gateway.storage.kafka.whole_entry import HOT_MODULES
from pulsar_gateway.storage.users import UsersStore

log = logging.getLogger("gateway")


class Listener(Protocol):
    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    @property
    def address(self) -> tuple[str, int]: ...


class Gateway:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.broker: EmbeddedBroker | None = None
        self.backend: PulsarBackend | None = None
        self.metadata: MetadataStore | None = None
        self.users: UsersStore | None = None
        self.topics: TopicService | None = None
        self.group_offsets: GroupOffsetStore | None = None
        self.share_states: ShareStateStore | None = None
        self.mirror: SubscriptionMirror | None = None
        self.listeners: list[Listener] = []
        self.metrics_server: metrics.MetricsServer | None = None
        self._amqp_store: Any = None  # its vhosts, for /cluster
        # who serves what (docs/cluster.md): a cluster of one unless [cluster] is enabled
        self.cluster: SingleMemberView | PulsarMembership = SingleMemberView(
            cluster_member(settings, None)
        )
        self._fatal: asyncio.Future[str] | None = None
        self._kafka_tokens: TokenValidator | None = None  # OAUTHBEARER's, when enabled
        self.ready = False
        self.trimmer = HeapTrimmer(_has_clients)
        set_mmap_threshold(settings.gateway.malloc_mmap_threshold_bytes)
        self._trimming: asyncio.Task[None] | None = None
        # logs where the event loop is stuck when it stops running (gateway/loop_watch.py)
        self.loop_watch = LoopWatch()

    def _on_fatal(self, reason: str) -> None:
        if self._fatal is not None and not self._fatal.done():
            self._fatal.set_result(reason)

    async def start(self) -> None:
        settings = self.settings
        self._fatal = asyncio.get_running_loop().create_future()
        self.loop_watch.start()
        # checked before anything starts: a file that cannot be used stops start-up, named
        security = PulsarSecurity.from_settings(settings.pulsar)
        kafka_settings = settings.kafka
        if "OAUTHBEARER" in kafka_settings.sasl_mechanisms:
            # before the broker starts: a bad key file stops start-up at once, named
            self._kafka_tokens = load_validator(
                kafka_settings.oauthbearer_key_file,
                kafka_settings.oauthbearer_jwks_file,
                kafka_settings.oauthbearer_algorithms,
                kafka_settings.oauthbearer_issuer,
                kafka_settings.oauthbearer_audience,
                kafka_settings.oauthbearer_principal_claim,
            )
        # the listeners' TLS files too: an unusable key stops start-up, named, before the broker
        kafka, amqp = settings.kafka, settings.amqp
        kafka_tls = (
            server_context("kafka", kafka.tls_cert_file, kafka.tls_key_file, kafka.tls_ca_file)
            if kafka.enabled and kafka.tls_enabled
            else None
        )
        amqp_tls = (
            server_context("amqp", amqp.tls_cert_file, amqp.tls_key_file, amqp.tls_ca_file)
            if amqp.enabled and amqp.tls_enabled
            else None
        )
        http = settings.metrics
        metrics_tls = (
            server_context("metrics", http.tls_cert_file, http.tls_key_file, http.tls_ca_file)
            if http.enabled and http.tls_enabled
            else None
        )
        service_url = settings.pulsar.service_url
        if settings.embedded_mode:
            self.broker = EmbeddedBroker(
                settings.embedded_data_dir,
                port=settings.embedded.port,
                start_timeout=settings.embedded.start_timeout_seconds,
                restart_limit=settings.embedded.restart_limit,
                restart_window=settings.embedded.restart_window_seconds,
                log_level=settings.embedded.log_level,
                on_fatal=self._on_fatal,
            )
            await self.broker.start()
            service_url = self.broker.service_url
        self.backend = PulsarBackend(
            service_url,
            operation_timeout_seconds=settings.pulsar.operation_timeout_seconds,
            max_in_flight=settings.kafka.max_in_flight_sends,
            idle_close_seconds=settings.kafka.idle_close_seconds,
            client_log=settings.gateway.data_dir / "pulsar-client.log",
            security=security,
            client=settings.pulsar.client,
        )
        await self.backend.start()
        self.metadata = MetadataStore(self.backend, settings.pulsar.metadata_namespace)
        # in a cluster every member follows the others' writes live (docs/cluster.md)
        await self.metadata.load(follow=settings.cluster.enabled)
        metadata = self.metadata
        if settings.cluster.enabled:
            self.cluster = PulsarMembership(
                self.backend,
                settings.pulsar.metadata_namespace,
                self.cluster.me(),
                settings.cluster.heartbeat_seconds,
                settings.cluster.lease_seconds,
            )
            # a member taking keys over first reads the metadata to its end
            self.cluster.set_catch_up(self.metadata.catch_up)
            cluster = self.cluster
            metrics.CLUSTER_MEMBERS.set_function(lambda: len(cluster.members()))
            metrics.CLUSTER_SERVING.set_function(lambda: int(cluster.serving))
            metrics.CLUSTER_FENCED.set_function(lambda: cluster.fenced)
        metrics.METADATA_UNREADABLE.set_function(lambda: metadata.unreadable_records)
        admin_url = settings.pulsar.admin_url
        admin = PulsarAdmin(admin_url, security=security) if admin_url else None
        self.topics = TopicService(
            self.backend,
            self.metadata,
            admin,
            index_interval=settings.kafka.index_interval,
            tail_records=settings.kafka.tail_cache_records,
            idle_close_seconds=settings.kafka.idle_close_seconds,
            tail_partition_bytes=settings.kafka.tail_cache_partition_bytes,
            tail_cache_bytes=settings.kafka.tail_cache_bytes,
            default_entry_format=settings.kafka.entry_format,
        )
        self.topics.start()
        metrics.OPEN_PARTITIONS.set_function(
            lambda: self.topics.open_partitions if self.topics else 0
        )
        self.group_offsets = GroupOffsetStore(self.metadata)
        share_states = self.share_states = ShareStateStore(self.metadata)
        self.group_offsets.load()
        self.metadata.watch(self.group_offsets.apply_change)
        self.topics.forget_partitions = forget_with_topic(
            self.topics, self.group_offsets, share_states
        )
        # no client topic or queue may map among the gateway's own topics
        reserved = ReservedNamespaces(frozenset({settings.pulsar.metadata_namespace}))
        if settings.kafka.group_offset_mirror:
            topics = self.topics

            async def locate(partition_topic: str, offset: int) -> tuple[int, int, int] | None:
                return await ack_position(topics, partition_topic, offset)

            self.mirror = SubscriptionMirror(
                service_url,
                locate,
                settings.kafka.group_subscription_prefix,
                interval=settings.kafka.group_mirror_interval_seconds,
                idle_close=settings.kafka.group_mirror_idle_seconds,
                operation_timeout_seconds=min(5, settings.pulsar.operation_timeout_seconds),
                client_log=settings.gateway.data_dir / "pulsar-client.log",
                security=security,
            )
            await self.mirror.start()
            mirror = self.mirror

            # group offsets name Kafka partitions; the mirror moves subscriptions on the
            # Pulsar topics that store them now (a topic's incarnation: topics.py)
            def mirror_commit(partition: str, group_id: str, offset: int) -> None:
                mirror.request(topics.stored_partition(partition), group_id, offset)

            async def mirror_forget(partitions: list[str]) -> None:
                await mirror.forget([topics.stored_partition(name) for name in partitions])

            self.group_offsets.on_commit = mirror_commit
            self.group_offsets.on_forget = mirror_forget
            # a share group's subscription follows its settled start unless the broker
            if settings.kafka.share_dispatch == "gateway":  # dispatches (docs/share-groups.md)
                share_states.on_save = mirror.request
        metrics.BACKEND_UP.set(1)
        # one users store for both listeners, followed live, signed with the users key
        # (docs/security.md); whoever makes the key adopts the records already there
        key, made = users_key(settings)
        self.users = UsersStore(self.backend, settings.pulsar.metadata_namespace, key)
        await self.users.load(adopt=made)
        await self._bootstrap_user(self.users)
        # where tools run by this account find this gateway's Pulsar (not /health)
        write_link(
            settings.gateway.data_dir,
            LinkRecord(
                service_url,
                settings.pulsar.metadata_namespace,
                settings.kafka.tenant,
                settings.kafka.namespace,
                str(settings.users_key_path.absolute()) if settings.users_key_path else "",
            ),
        )
        # the users' rights live in the same store (docs/security.md, "Authorization"); the
        # bootstrap user is the deployment's administrator, so it may do everything
        bootstrap = [settings.gateway.bootstrap_user] if settings.gateway.bootstrap_user else []
        authorizer = Authorizer(
            self.users,
            [*settings.authorization.superusers, *bootstrap],
            short_namespace=f"{settings.kafka.tenant}/{settings.kafka.namespace}",
        )
        kafka_listener: Any = None  # the console's
        if settings.kafka.enabled:
            from pulsar_gateway.handlers.kafka.port import KafkaStorage
            from pulsar_gateway.handlers.kafka.server import KafkaServer
            from pulsar_gateway.storage.kafka.client_quotas import MetadataClientQuotas
            from pulsar_gateway.storage.kafka.producer_ids import (
                MetadataProducerIds,
                NodeProducerIds,
            )
            from pulsar_gateway.storage.kafka.transactions import MetadataTransactionStore

            membership = self.cluster if isinstance(self.cluster, PulsarMembership) else None
            storage = KafkaStorage(
                self.topics,
                self.group_offsets,
                (
                    NodeProducerIds(self.metadata, settings.cluster_node_id)
                    if membership is not None
                    else MetadataProducerIds(self.metadata)
                ),
                reserved,
                credentials=self.users,
                transactions=MetadataTransactionStore(self.metadata),
                cluster=membership,
                quotas=MetadataClientQuotas(self.metadata),
                shares=share_states,
                group_configs=MetadataGroupConfigs(self.metadata),
                share_feeds=share_feeds_for(settings, service_url, security),
            )
            if membership is not None:
                self._release_unserved_partitions(membership)
            kafka_server = KafkaServer(
                settings.kafka, storage, self.users, kafka_tls, self._kafka_tokens, authorizer
            )
            self.listeners.append(kafka_server)
            kafka_listener = kafka_server
            if membership is not None:
                groups = kafka_server.groups.groups
                membership.add_key_source("groups", lambda: [group_key(g) for g in groups])
        amqp_listener: Any = None  # the management API's, once it listens
        vhost_namespace: Any = str
        if settings.amqp.enabled:
            from pulsar_gateway.handlers.amqp.server import AmqpServer
            from pulsar_gateway.handlers.amqp.vhost_owners import VhostOwners
            from pulsar_gateway.storage.amqp.store import PulsarAmqpStore

            store = PulsarAmqpStore.configured(
                self.backend, self.metadata, settings.amqp, reserved, self._stream_topic
            )
            self._amqp_store = store
            amqp_server = AmqpServer(
                settings.amqp,
                store,
                store.vhost_access,
                self.users,
                amqp_tls,
                authorizer=authorizer,
                vhost_namespace=store.namespace,
                # in a cluster a connection waits at most a lease for its vhost's owner
                owners=(
                    VhostOwners(self.cluster, settings.cluster.lease_seconds)
                    if settings.cluster.enabled
                    else None
                ),
                member_secret=settings.cluster.member_secret.get_secret_value().encode(),
            )
            self.listeners.append(amqp_server)
            amqp_listener, vhost_namespace = amqp_server, store.namespace
        for listener in self.listeners:
            await listener.start()
            host, port = listener.address
            log.info("%s listener on %s:%d", listener.name, host, port)
        self.cluster.advertise(cluster_member(settings, self._listener_addresses()))
        if isinstance(self.cluster, PulsarMembership):
            # listeners answer "not the owner" until this member has joined and caught up
            await self.cluster.start()
        if settings.metrics.enabled:
            self.metrics_server = management_port(
                settings,
                self.health,
                self.cluster_report,
                self.users,
                authorizer,
                amqp_listener,
                vhost_namespace,
                kafka_listener,
                self.users.names,
                self.users,
                StorageSizes(
                    self.topics.stored_partition,
                    self.broker.metrics_url if self.broker is not None else None,
                    admin,
                ),
                tls=metrics_tls,
            )
            await self.metrics_server.start()
        self.ready = True
        self._trimming = asyncio.create_task(self._trim_now_and_then(), name="heap trimmer")
        parts = [f"{lst.name} {lst.address[0]}:{lst.address[1]}" for lst in self.listeners]
        parts.append(f"backend {service_url}, hot modules {HOT_MODULES}")
        log.info("pulsar-gateway ready: %s", ", ".join(parts))
        # what start-up made (modules, codecs' tables, settings, ~70,000 objects) lives as
        # long as the process: out of the collector's reach, a full collection no longer
        # walks it (a 99,999-topic Metadata's entries set one off that held the event loop
        # for 150-350 ms on a loaded machine; ~35 ms frozen)
        gc.collect()
        gc.freeze()

    def _release_unserved_partitions(self, membership: PulsarMembership) -> None:
        """When ownership moves, close the partition logs this member no longer serves at
        once: the new owner numbers what comes next, and a log opened again later reads
        the partition back to its end first."""
        topics, kafka = self.topics, self.settings.kafka
        assert topics is not None
        closing: set[asyncio.Task[None]] = set()

        def served(pulsar_topic: str, index: int) -> bool:
            name = kafka_topic_name(pulsar_topic, kafka.tenant, kafka.namespace)
            return membership.serves(partition_key(name, index))

        def release() -> None:
            task = asyncio.ensure_future(topics.release(served))
            closing.add(task)
            task.add_done_callback(closing.discard)

        membership.on_change(release)
        membership.add_key_source(
            "partitions",
            lambda: [
                partition_key(kafka_topic_name(t, kafka.tenant, kafka.namespace), i)
                for t, i in topics.open_partition_names()
            ],
        )

    async def _stream_topic(self, topic: str) -> None:
        """An AMQP stream queue is partition 0 of the Kafka topic `topic` (its Pulsar name):
        one partition, made once (docs/compatibility.md, "Stream queues")."""
        topics = self.topics
        if topics is None:  # wired only after the topics service started (`start`)
            raise RuntimeError("stream queue declared before the gateway started")
        if topics.registry.get(topic) is not None:
            return
        with contextlib.suppress(TopicExists):
            await topics.create(topic, 1)

    async def _bootstrap_user(self, users: UsersStore) -> None:
        """`gateway.bootstrap_user`: created with the password file's first line when the
        store does not hold it; an existing user (maybe with a changed password) is kept."""
        name = self.settings.gateway.bootstrap_user
        if not name or users.lookup(name) is not None:
            return
        lines = Path(self.settings.gateway.bootstrap_password_file).read_text().splitlines()
        password = lines[0] if lines else ""
        if not password:
            raise ValueError("setting 'gateway.bootstrap_password_file': the first line is empty")
        try:
            await users.set_password(name, password)
        except ValueError as exc:  # the name's rules, or SASLprep's on the password
            raise ValueError(f"setting 'gateway.bootstrap_user': {exc}") from None
        log.info("bootstrap user '%s' created (gateway.bootstrap_user)", name)

    def health(self) -> dict[str, Any]:
        """503 (`ok` false) until started, and while the backend does not answer: a stalled
        broker keeps its connections up, so only the backend's probe tells."""
        broker_ok = self.broker is None or (self.broker.pid is not None)
        reachable = self.backend is not None and self.backend.reachable
        return {
            "ok": self.ready and broker_ok and reachable,
            "pid": os.getpid(),  # which process answers (a worker, under --workers)
            "backend_reachable": reachable,
            "listeners": self._listener_addresses(),
            "embedded": self.broker is not None,
            "broker_restarts": self.broker.restarts if self.broker else 0,
            # planned: after a dropped connection left consumers in the embedded broker
            "broker_heal_restarts": self.broker.heal_restarts if self.broker else 0,
            "open_partitions": self.topics.open_partitions if self.topics else 0,
            "cluster": self.cluster.status(),
            # where tools beside the gateway (migrate, parity, users) find its Pulsar side:
            # the link file in this directory, readable by the gateway's account only (the
            # embedded broker's address is not given to anyone who asks)
            "data_dir": str(self.settings.gateway.data_dir.absolute()),
        }

    def cluster_report(self) -> dict[str, Any]:
        """`/cluster`: the view's status and the owner of every known partition, group and
        vhost (gateway/cluster/report.py)."""
        topics, groups, amqp = self.topics, self.group_offsets, self._amqp_store
        kafka = self.settings.kafka

        def partitions() -> list[str]:
            return [
                partition_key(kafka_topic_name(record.name, kafka.tenant, kafka.namespace), i)
                for record in (topics.list() if topics else [])
                for i in range(record.partitions)
            ]

        return ownership(
            self.cluster,
            {
                "partitions": partitions,
                "groups": lambda: (
                    [group_key(g) for g in groups.groups_with_offsets()] if groups else []
                ),
                "vhosts": lambda: [vhost_key(v) for v in amqp.vhosts()] if amqp else [],
            },
        )

    def _listener_addresses(self) -> dict[str, str]:
        found = {lst.name: f"{lst.address[0]}:{lst.address[1]}" for lst in self.listeners}
        for listener in self.listeners:
            tls = getattr(listener, "tls_address", None)
            if tls is not None:
                found[f"{listener.name}s"] = f"{tls[0]}:{tls[1]}"  # amqps
            member = getattr(listener, "member_address", None)
            if member is not None:  # where the other members hand AMQP connections over
                found[f"{listener.name}-cluster"] = f"{member[0]}:{member[1]}"
        return found

    async def wait(self) -> str:
        assert self._fatal is not None
        return await self._fatal

    async def _trim_now_and_then(self) -> None:
        """Return freed heap to the system now and then (see gateway/memory.py)."""
        while True:
            await asyncio.sleep(TRIM_CHECK_SECONDS)
            if self.trimmer.due(time.monotonic()):
                self.trimmer.before_trim()  # on the loop: a full collection when idle
                await asyncio.to_thread(self.trimmer.trim)  # tens of ms on a big heap

    async def stop(self) -> None:
        self.ready = False
        if self._trimming is not None:
            self._trimming.cancel()
        if isinstance(self.cluster, PulsarMembership):
            with contextlib.suppress(Exception):
                await self.cluster.stop()  # the others take over at once
        if self.metrics_server:
            await self.metrics_server.stop()
        for listener in reversed(self.listeners):
            with contextlib.suppress(Exception):
                await listener.stop()
        if self.mirror:
            with contextlib.suppress(Exception):
                await self.mirror.close()
        if self.users:
            await self.users.close()
        if self.topics:
            await self.topics.close()
        if self.metadata:
            await self.metadata.close()
        if self.backend:
            await self.backend.close()
        if self.broker:
            await self.broker.stop()
        remove_link(self.settings.gateway.data_dir)
        self.loop_watch.stop()


TRIM_CHECK_SECONDS = 2.0  # a check reads /proc/self/statm: cheap


def users_key(settings: Settings) -> tuple[bytes | None, bool]:
    """The users store's signing key (made at the first start) and whether it was just
    made; (None, False) when records are not signed (`gateway.users_key_file`)."""
    path = settings.users_key_path
    if path is None:
        return None, False
    try:
        return load_or_create_key(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"setting 'gateway.users_key_file': {exc}") from None


def cluster_member(settings: Settings, listening: dict[str, str] | None) -> Member:
    """This gateway as the other members see it, from the settings and, once the listeners
    are up, their bound ports (a configured port of 0)."""

    def bound_port(name: str, configured: int) -> int:
        address = (listening or {}).get(name)
        return int(address.rsplit(":", 1)[1]) if address else configured

    kafka, amqp, cluster = settings.kafka, settings.amqp, settings.cluster
    kafka_port = kafka.advertised_port or bound_port("kafka", kafka.port)
    # the other members hand AMQP connections to the member-to-member listener
    member_amqp = bound_port("amqp-cluster", amqp.cluster_port)
    return Member(
        member_id=cluster.member_id or f"{socket.gethostname()}/{kafka_port}",
        node_id=settings.cluster_node_id,
        kafka_host=advertised_host(kafka.advertised_host, kafka.host),
        kafka_port=kafka_port,
        amqp_host=advertised_host(cluster.advertised_amqp_host, amqp.cluster_host),
        amqp_port=cluster.advertised_amqp_port or member_amqp or amqp.port,
        http_port=settings.metrics.port,
    )


def _has_clients() -> bool:
    """Any Kafka or AMQP connection open (the listeners keep this gauge)."""
    return any(
        (metrics.REGISTRY.get_sample_value("gateway_open_connections", {"protocol": p}) or 0) > 0
        for p in ("kafka", "amqp")
    )


async def run(settings: Settings) -> int:
    """Run until SIGINT/SIGTERM (exit 0) or a fatal backend failure (exit 1)."""
    gateway = Gateway(settings)
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[int] = loop.create_future()

    def stop_on(signum: int) -> None:
        if not stop.done():
            stop.set_result(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop_on, signum)
    try:
        await gateway.start()
    except Exception as exc:
        # a timeout's text is empty: say which
        log.error("start-up failed: %s", str(exc) or repr(exc))
        await gateway.stop()
        return 1
    fatal = asyncio.ensure_future(gateway.wait())
    either: list[asyncio.Future[Any]] = [stop, fatal]
    done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if fatal in done:
        log.error("fatal: %s; shutting down", fatal.result())
        code = 1
    else:
        fatal.cancel()
        log.info("signal %s: shutting down", stop.result())
    await gateway.stop()
    return code
