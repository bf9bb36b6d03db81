"""Who calls the management port: HTTP Basic against the gateway's users (docs/security.md,
"The management port").

The metrics HTTP server (gateway/metrics.py) serves `/health` and `/metrics` to anyone
(`/metrics` too may ask for a login: `metrics.require_login`); everything else needs a
caller, made here:

- the credentials are checked as AMQP checks them (security/logins.py): the users store's
  SCRAM keys first, then the bootstrap table `amqp.users`, in the same time for an unknown
  name as for a wrong password;
- the loopback rule applies to the HTTP caller's own address: `guest` from another host is
  refused, whatever the gateway then does on its behalf;
- a users-store user is bound by its rights (handlers/authorization.py), a table user is
  not, as on AMQP; an **administrator** is a caller rights do not bind or a superuser, and
  sees everything (other users' connections, client properties, the cluster view).

The key derivation (~2 ms) runs in a worker thread, at most `MAX_CONCURRENT_CHECKS` at a
time, so a flood of logins on this port neither holds the event loop nor takes every
worker thread from Kafka's PLAIN logins.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.authorization import Access, Authorizer
from pulsar_gateway.security.credentials import shown
from pulsar_gateway.security.logins import PasswordLogins, Verdict, basic_credentials
from pulsar_gateway.security.rights import CLUSTER, CLUSTER_NAME, DESCRIBE

log = logging.getLogger("gateway.http.auth")

MAX_CONCURRENT_CHECKS = 2


@dataclass(frozen=True)
class HttpCaller:
    """An authenticated caller of the management port."""

    user: str
    access: Access

    @property
    def administrator(self) -> bool:
        """Not bound by rights (an `amqp.users` account) or a superuser: sees everything."""
        return self.access.unrestricted or self.access.rights.superuser

    @property
    def may_monitor(self) -> bool:
        """`/metrics` (with metrics.require_login) and `/cluster`: every tenant's topic
        names: an administrator, or `describe` on the cluster."""
        return self.administrator or self.access.may(CLUSTER, CLUSTER_NAME, DESCRIBE)

    def may_see_namespace(self, namespace: str) -> bool:
        """Some right on the namespace (a vhost's): what opening the vhost over AMQP needs."""
        return self.access.may_see_namespace(namespace)


class HttpLogins:
    """Turns an Authorization header and the caller's address into an HttpCaller."""

    def __init__(self, logins: PasswordLogins, authorizer: Authorizer) -> None:
        self.logins = logins
        self.authorizer = authorizer
        self._checks = asyncio.Semaphore(MAX_CONCURRENT_CHECKS)

    async def __call__(self, authorization: str | None, peer_host: str) -> HttpCaller | None:
        """The caller, or None: no credentials, malformed ones, or refused (logged)."""
        credentials = basic_credentials(authorization)
        if credentials is None:
            return None
        user, password = credentials
        async with self._checks:
            verdict = await asyncio.to_thread(self.logins.check, user, password, peer_host)
        if verdict is not Verdict.ACCEPTED:
            log.warning(
                "HTTP authentication failed from %s: user '%s' (%s)",
                peer_host,
                shown(user),
                verdict.value,
            )
            metrics.AUTHENTICATIONS.labels("http", "BASIC", "failure").inc()
            return None
        metrics.AUTHENTICATIONS.labels("http", "BASIC", "success").inc()
        if self.logins.from_store(user):
            access = self.authorizer.bound("http", peer_host, user, host=peer_host)
        else:
            access = self.authorizer.unrestricted("http", peer_host, user)
        return HttpCaller(user, access)
