"""SASL PLAIN and AMQPLAIN against a user table, with RabbitMQ's loopback rule.

PLAIN is what pika, aio-pika and aiormq send; AMQPLAIN is py-amqp's default,
so kombu and Celery need it. Refusals carry RabbitMQ's texts because the
connection decides from the reply code whether the client is told at all.

Users come from the users store (`pulsar-gateway users`: SCRAM salted keys, the password
checked by deriving its key) and, for names the store does not hold, from the config's
`amqp.users` table, kept as a bootstrap (docs/security.md): the store wins.

EXTERNAL (RabbitMQ's rabbitmq_auth_mechanism_ssl) is offered only on a TLS connection whose
client presented a certificate the listener's CA verified: the user is the certificate's
common name, and must exist (in the store or the table); no password is asked.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Mapping

from pamqp import decode

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.security.credentials import NoUsers, UserDirectory, shown
from pulsar_gateway.security.logins import (
    DEFAULT_LOOPBACK_USERS,
    PasswordLogins,
    Verdict,
    is_loopback,
)

__all__ = ["Authenticator", "is_loopback", "parse_amqplain", "parse_plain"]

log = logging.getLogger("gateway.amqp.auth")

DEFAULT_MECHANISMS = ("PLAIN", "AMQPLAIN")
EXTERNAL = "EXTERNAL"
KNOWN_MECHANISMS = (*DEFAULT_MECHANISMS, EXTERNAL)


def parse_plain(response: bytes) -> tuple[str, str]:
    """RFC 4616 "\\0user\\0password"; RabbitMQ accepts no authorization id either."""
    parts = response.split(b"\x00")
    if len(parts) != 3 or parts[0]:
        raise _invalid_response(response)
    try:
        return parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        raise _invalid_response(response) from None


def parse_amqplain(response: bytes) -> tuple[str, str]:
    """A field table without its length prefix holding LOGIN and PASSWORD."""
    try:
        _, table = decode.field_table(len(response).to_bytes(4, "big") + response)
    except Exception:  # pamqp may raise anything on bad input
        raise _invalid_response(response) from None
    login, password = table.get("LOGIN"), table.get("PASSWORD")
    if login is None or password is None:
        raise AmqpError(
            ReplyCode.SYNTAX_ERROR,
            f"AMQPLAIN auth info {sorted(table)} is missing LOGIN or PASSWORD field",
        )
    if not isinstance(login, str) or not isinstance(password, str):
        raise AmqpError(
            ReplyCode.SYNTAX_ERROR,
            "AMQPLAIN auth info uses unsupported type for LOGIN or PASSWORD field",
        )
    return login, password


def _invalid_response(response: bytes) -> AmqpError:
    # The response holds a password: never echo it back or into logs.
    return AmqpError(ReplyCode.SYNTAX_ERROR, f"response of {len(response)} octets invalid")


class Authenticator:
    """Checks start-ok credentials against the users store, then a fixed user table.

    Users in `loopback_users` (guest, by default, as in RabbitMQ) may only log
    in from a loopback address; the peer address is an input, never looked up.
    """

    def __init__(
        self,
        users: Mapping[str, str],
        loopback_users: Iterable[str] = DEFAULT_LOOPBACK_USERS,
        mechanisms: Iterable[str] = DEFAULT_MECHANISMS,
        directory: UserDirectory | None = None,
    ) -> None:
        self._users = dict(users)
        self._directory: UserDirectory = directory or NoUsers()
        # the password check and the loopback rule (security/logins.py)
        self.logins = PasswordLogins(self._directory, self._users, loopback_users)
        self.mechanisms = tuple(mechanisms)
        self.certificate_user = ""
        unknown = set(self.mechanisms) - set(DEFAULT_MECHANISMS)
        if unknown:
            raise ValueError(f"unsupported SASL mechanisms: {sorted(unknown)}")

    def for_certificate(self, common_name: str) -> Authenticator:
        """This authenticator for one connection whose verified client certificate names
        `common_name`: EXTERNAL offered first, then the others; itself without one."""
        if not common_name:
            return self
        connection = copy.copy(self)
        connection.certificate_user = common_name
        connection.mechanisms = (EXTERNAL, *self.mechanisms)
        return connection

    def authenticate(self, mechanism: str, response: bytes | str, peer_host: str) -> str:
        """The authenticated user name, or `AmqpError` (503, 502 or 403)."""
        return self.begin(mechanism, response, peer_host)()

    def begin(self, mechanism: str, response: bytes | str, peer_host: str) -> Callable[[], str]:
        """The cheap part of a login now (the mechanism, the response's syntax: `AmqpError`
        503 or 502), and the rest as a call returning the user name or raising `AmqpError`
        403: for PLAIN and AMQPLAIN a key derivation (~2-3 ms), which the listener runs in
        a worker thread (session.py) so that a flood of logins does not hold the event loop
        every other client shares."""
        if mechanism not in KNOWN_MECHANISMS:
            raise AmqpError(
                ReplyCode.COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'"
            )
        if mechanism not in self.mechanisms:
            raise AmqpError(
                ReplyCode.COMMAND_INVALID, f"invalid authentication mechanism '{mechanism}'"
            )
        if mechanism == EXTERNAL:
            username = self._external(peer_host)
            return lambda: username
        raw = response.encode() if isinstance(response, str) else bytes(response)
        parse = parse_plain if mechanism == "PLAIN" else parse_amqplain
        username, password = parse(raw)
        return lambda: self._check(mechanism, username, password, peer_host)

    def _check(self, mechanism: str, username: str, password: str, peer_host: str) -> str:
        verdict = self.logins.check(username, password, peer_host)
        if verdict is Verdict.INVALID:
            log.warning(
                "AMQP authentication failed from %s: user '%s' (%s)",
                peer_host,
                shown(username),
                mechanism,
            )
            metrics.AUTHENTICATIONS.labels("amqp", mechanism, "failure").inc()
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"{mechanism} login refused: user '{username}' - invalid credentials",
            )
        if verdict is Verdict.LOOPBACK_ONLY:
            log.warning("AMQP user '%s' refused from %s: loopback only", shown(username), peer_host)
            metrics.AUTHENTICATIONS.labels("amqp", mechanism, "failure").inc()
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"{mechanism} login refused: user '{username}' can only connect via localhost",
            )
        metrics.AUTHENTICATIONS.labels("amqp", mechanism, "success").inc()
        return username

    def _external(self, peer_host: str) -> str:
        username = self.certificate_user
        if self._directory.lookup(username) is None and username not in self._users:
            log.warning(
                "AMQP EXTERNAL refused from %s: certificate user '%s' unknown",
                peer_host,
                shown(username),
            )
            metrics.AUTHENTICATIONS.labels("amqp", EXTERNAL, "failure").inc()
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"EXTERNAL login refused: user '{username}' - invalid credentials",
            )
        log.info("AMQP user '%s' authenticated from %s by certificate", username, peer_host)
        metrics.AUTHENTICATIONS.labels("amqp", EXTERNAL, "success").inc()
        return username

    def credentials_of(self, username: str) -> object:
        """What `username` logs in with now: its users-store record, else its `amqp.users`
        entry, else None. A connection keeps what its user had at login; when this differs
        later (removed, password changed) the listener closes it."""
        record = self._directory.lookup(username)
        if record is not None:
            return record
        stored = self._users.get(username)
        return None if stored is None else ("amqp.users", stored)
