"""Password logins by name: the users store first, then a bootstrap table, with RabbitMQ's
loopback rule, in a time that does not tell which names exist.

AMQP's PLAIN and AMQPLAIN (handlers/amqp/authentication.py) and the management port's
HTTP Basic (handlers/http_login.py) ask the same question of the same users, so the answer
is worked out here once (docs/security.md, "Users"):

- a name the users store holds is checked against its SCRAM keys only (the password's
  key derived with the record's salt and compared);
- any other name is checked against the config's `amqp.users` table, the operator's
  bootstrap accounts (`guest` by default);
- names in `loopback_users` (`guest`) log in from a loopback address only, as in RabbitMQ.
  The address is the caller's own (the peer of the socket the credentials came on).

Every check costs one key derivation (PBKDF2, 4096 rounds: ~2 ms), also for a name the
store does not hold (derived against no record) and for a table user: without it an
unknown user was refused in 0.4 ms and a known one with a wrong password in 2.8 ms, which
told anyone who exists.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from enum import Enum

from pulsar_gateway.security.credentials import UserDirectory, password_matches

DEFAULT_LOOPBACK_USERS = ("guest",)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback, like RabbitMQ."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


class Verdict(Enum):
    ACCEPTED = "accepted"
    INVALID = "invalid credentials"
    LOOPBACK_ONLY = "loopback only"


class PasswordLogins:
    """The users store, then the bootstrap table; see the module's docstring."""

    def __init__(
        self,
        directory: UserDirectory,
        table: Mapping[str, str],
        loopback_users: Iterable[str] = DEFAULT_LOOPBACK_USERS,
    ) -> None:
        self.directory = directory
        self.table = dict(table)
        self.loopback_users = frozenset(loopback_users)

    def password_matches(self, user: str, password: str) -> bool:
        """Whether `password` is `user`'s; one key derivation whoever asks."""
        record = self.directory.lookup(user)
        if record is not None:
            return password_matches(record, password)
        # not in the store: the same derivation against no record, so that the time taken
        # says nothing of whether the name is in the table or nowhere
        password_matches(None, password)
        stored = self.table.get(user)
        matches = hmac.compare_digest(
            (stored if stored is not None else "\x00unknown").encode(), password.encode()
        )
        return stored is not None and bool(password) and matches

    def check(self, user: str, password: str, peer_host: str) -> Verdict:
        """The verdict for credentials that came from `peer_host`."""
        if not self.password_matches(user, password):
            return Verdict.INVALID
        if user in self.loopback_users and not is_loopback(peer_host):
            return Verdict.LOOPBACK_ONLY
        return Verdict.ACCEPTED

    def from_store(self, user: str) -> bool:
        """Whether the name is the users store's (bound by its rights), not the table's."""
        return self.directory.lookup(user) is not None


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an HTTP Basic Authorization header, or None."""
    if not header or not header[:6].lower() == "basic ":
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep and user else None
