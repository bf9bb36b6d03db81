"""The one authorizer both listeners ask: may this connection's user do this, here?

Rights live in the users store (security/rights.py for the model, storage/users.py keeps
them, followed live): the listeners read them through the `RightsStore` port below, so
every check sees the store's current state and a grant or revoke applies to open
connections at once, without a restart.

Who is bound by rights (docs/security.md, "Authorization"):

- a user of the users store has only what was granted, unless the gateway's
  `authorization.superusers` names them or their record says superuser;
- anyone else keeps everything, as before authorization existed: the anonymous Kafka
  client when `kafka.sasl_mechanisms` is empty (the loopback development setup), and an
  AMQP user of the config's bootstrap table `amqp.users` (the operator's own). Whether a
  connection is bound is settled at its login, so removing a user from the store never
  widens an open connection's rights.

Rules for `User:*` (the store's user `*`) bind every bound user besides its own; a rule
bound to a host applies to connections from that address (the peer's, as the socket
reports it).

Every denial is logged (peer, user, resource, operation; never a secret) through a
rate-limited logger per protocol, and counted in gateway_authorization_denials_total.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.listener_limits import warn
from pulsar_gateway.security.credentials import shown
from pulsar_gateway.security.rights import (
    EVERYONE,
    NO_RIGHTS,
    Rights,
    RightsError,
    RightsTable,
    normal_host,
)

AUDIT_LOGGERS = {
    "kafka": "gateway.kafka.authz",
    "amqp": "gateway.amqp.authz",
    "http": "gateway.http.authz",  # the management port (handlers/http_login.py)
}
SUPERUSER = Rights(superuser=True)
# answers one connection remembers while its user's rights stay the same object (a Produce
# checks each topic on every request: ~0.5 us remembered against 5-30 us worked out)
REMEMBERED_ANSWERS = 1024


class RightsStore(Protocol):
    """Rights by user name, current as of the call (implemented by storage/users.py)."""

    def rights_of(self, user: str) -> Rights:
        """The user's rights; NO_RIGHTS when none were granted."""
        ...

    def all_rights(self) -> Mapping[str, Rights]:
        """Every user that holds rights (Kafka's DescribeAcls)."""
        ...

    async def set_rights(self, user: str, rights: Rights) -> None:
        """Replace the user's rights, durably, for every gateway (Kafka's Create/DeleteAcls)."""
        ...


class Access:
    """One connection's view of the authorizer: its user and whether rights bind it."""

    __slots__ = (
        "_answers",
        "_merged",
        "_rights_seen",
        "authorizer",
        "host",
        "peer",
        "protocol",
        "unrestricted",
        "user",
    )

    def __init__(
        self,
        authorizer: Authorizer,
        user: str,
        peer: str,
        protocol: str,
        unrestricted: bool,
        host: str | None = None,
    ) -> None:
        """`peer` is `host:port` (the audit lines'); `host`, when given, the address alone
        (else taken from `peer`), which host-bound rules are matched against."""
        self.authorizer = authorizer
        self.user = user
        self.peer = peer
        self.protocol = protocol
        self.unrestricted = unrestricted
        self.host = host_of(peer) if host is None else host_of(host, with_port=False)
        self._rights_seen: tuple[Rights, Rights] | None = None
        self._merged = NO_RIGHTS
        self._answers: dict[Any, bool] = {}

    @property
    def rights(self) -> Rights:
        """The user's rules and `User:*`'s, as one value that stays the same object while
        neither changes (so that remembered answers stay valid)."""
        seen = (self.authorizer.rights_for(self.user), self.authorizer.everyones(self.user))
        previous = self._rights_seen
        if previous is None or seen[0] is not previous[0] or seen[1] is not previous[1]:
            self._rights_seen = seen
            self._merged = seen[0].merged(seen[1])
            self._answers = {}
        return self._merged

    def may(self, resource: str, name: str | tuple[str, ...], operation: str) -> bool:
        """The answer, without a log line (a filter: Metadata hiding topics, say). A topic
        is named by every name it answers to (`topic_names`)."""
        if self.unrestricted:
            return True
        key = (resource, name, operation)
        answer = self.remembered(key)
        if answer is None:
            answer = self.rights.allows(resource, name, operation, self.host)
            self.remember(key, answer)
        return answer

    def remembered(self, key: Any) -> bool | None:
        """An answer stored by `remember` under `key`, while the user's rights (immutable
        values, replaced as a whole by the store on a change) are still the same object;
        None when there is none."""
        merged = self._merged
        if self.rights is not merged:
            return None
        return self._answers.get(key)

    def topic_names(self, namespace: str, name: str) -> tuple[str, ...]:
        """The names a topic (or AMQP queue or exchange) `name` of namespace `tenant/ns`
        answers to in rules: `tenant/ns/name`, and `name` where short names live."""
        return self.authorizer.topic_names(namespace, name)

    def remember(self, key: Any, answer: bool) -> None:
        if len(self._answers) >= REMEMBERED_ANSWERS:
            self._answers.clear()
        self._answers[key] = answer

    def may_any(self, resource: str, operation: str) -> bool:
        return self.unrestricted or self.rights.allows_any(resource, operation, self.host)

    def may_see_namespace(self, namespace: str) -> bool:
        """Some ALLOW rule that may cover a topic of the namespace (an AMQP vhost's)."""
        if self.unrestricted:
            return True
        short = namespace == self.authorizer.short_namespace
        return self.rights.allows_some_topic_in(namespace, short, self.host)

    def check(
        self, resource: str, name: str | tuple[str, ...], operation: str, subject: str = ""
    ) -> bool:
        """The answer; a denial is logged (naming `subject`, the topic or queue asked for,
        when given) and counted."""
        if self.may(resource, name, operation):
            return True
        self.denied(resource, subject or (name if isinstance(name, str) else name[0]), operation)
        return False

    def denied(self, resource: str, name: str, operation: str) -> None:
        """Log and count a denial (an audit line per refusal, rate-limited by the listener)."""
        metrics.AUTHORIZATION_DENIALS.labels(self.protocol, resource, operation).inc()
        warn(
            logging.getLogger(AUDIT_LOGGERS[self.protocol]),
            "authorization denied: peer %s user '%s' %s on %s '%s'",
            self.peer,
            shown(self.user),
            operation,
            resource,
            shown(name, 200),
        )


class Authorizer:
    """The gateway's rights, for the listeners: makes each connection's `Access`."""

    def __init__(
        self,
        store: RightsStore | None = None,
        superusers: Iterable[str] = (),
        short_namespace: str | None = None,
    ) -> None:
        """`short_namespace`: `tenant/ns` where short Kafka topic names live
        (kafka.tenant/kafka.namespace); its topics answer to their short names too."""
        self.store: RightsStore = store if store is not None else RightsTable()
        self.superusers = frozenset(superusers)
        self.short_namespace = short_namespace

    def topic_names(self, namespace: str, name: str) -> tuple[str, ...]:
        full = f"{namespace}/{name}"
        return (full, name) if namespace == self.short_namespace else (full,)

    def everyones(self, user: str) -> Rights:
        """`User:*`'s rules (none for a superuser, whom no rule binds)."""
        if user in self.superusers:
            return NO_RIGHTS
        try:
            return self.store.rights_of(EVERYONE)
        except Exception:
            return NO_RIGHTS

    def rights_for(self, user: str) -> Rights:
        if user in self.superusers:
            return SUPERUSER
        try:
            return self.store.rights_of(user)
        except Exception:  # a store that cannot answer grants nothing
            return NO_RIGHTS

    def unrestricted(self, protocol: str, peer: str, user: str = "ANONYMOUS") -> Access:
        """A connection rights do not bind (see the module's docstring)."""
        return Access(self, user, peer, protocol, unrestricted=True)

    def bound(self, protocol: str, peer: str, user: str, host: str | None = None) -> Access:
        """A users-store user's connection: only what was granted."""
        return Access(self, user, peer, protocol, unrestricted=False, host=host)


def host_of(peer: str, with_port: bool = True) -> str | None:
    """The IP address of a `host:port` peer text (or of an address alone, without
    `with_port`); None when it holds none (a test's `-`)."""
    host = peer.rsplit(":", 1)[0] if with_port and ":" in peer else peer
    try:
        return normal_host(host)
    except RightsError:
        return None


def peer_text(peer: Any) -> str:
    """`host:port` of a socket's peer name (IPv4 or IPv6), for the audit lines."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def everyone_allowed(protocol: str) -> Access:
    """The access of a listener built without an authorizer (unit tests, tools)."""
    return Authorizer().unrestricted(protocol, "-")
