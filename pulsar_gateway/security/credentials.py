"""User credentials as SCRAM salted keys, and the checks both listeners make against them.

A user's record holds, per mechanism (SCRAM-SHA-256 and SCRAM-SHA-512), the salt, the
iteration count, the StoredKey and the ServerKey of RFC 5802 -- never the password, nor
the SaltedPassword from which a client proof could be forged. SCRAM exchanges run on those
keys alone; PLAIN (Kafka and AMQP) is checked by deriving StoredKey from the password
offered with the record's salt and comparing, so one record serves every mechanism.

The SCRAM exchanges are `scramp`'s. The one key derivation done here, SaltedPassword =
PBKDF2(SASLprep(password), salt, i) (RFC 5802 Hi), is hashlib's C `pbkdf2_hmac` instead of
scramp's pure-Python loop: 4096 rounds took 26 ms there, 1-2 ms here, and PLAIN does one
per login (with scramp's, a gateway checked ~39 PLAIN logins per second per core). SASLprep
and the Client/Server/Stored keys from SaltedPassword are still scramp's, and a unit test
checks both derivations agree.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Any, Protocol

import scramp
from scramp.core import saslprep

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's minimum for SCRAM credentials (kafka-configs refuses fewer) and scramp's default
ITERATIONS = 4096
# PLAIN is checked against this mechanism's keys (present in every record written here)
PLAIN_VIA = "SCRAM-SHA-256"
SALT_BYTES = 24


class UserDirectory(Protocol):
    """The port the listeners read users through: a user's stored record, or None."""

    def lookup(self, name: str) -> Mapping[str, Any] | None: ...


class NoUsers:
    """The directory of a gateway without a users store: nobody."""

    def lookup(self, name: str) -> Mapping[str, Any] | None:
        return None


def make_record(password: str, iterations: int = ITERATIONS) -> dict[str, Any]:
    """The stored form of a password: per SCRAM mechanism, a fresh salt and its keys."""
    if not password:
        raise ValueError("a password must not be empty")
    record: dict[str, Any] = {}
    for name in SCRAM_MECHANISMS:
        salt = os.urandom(SALT_BYTES)
        salted = salted_password(name, password, salt, iterations)
        if salted is None:
            raise ValueError("the password holds characters SASLprep prohibits")
        record[name] = mechanism_entry(name, salt, salted, iterations)
    return record


def mechanism_entry(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> dict[str, Any]:
    """One mechanism's stored keys from a SaltedPassword (what Kafka's
    AlterUserScramCredentials sends: the client salts, the broker keeps only the keys)."""
    stored_key, server_key = scramp.ScramMechanism(mechanism).make_stored_server_keys(salted)
    return {
        "salt": _b64(salt),
        "iterations": iterations,
        "stored_key": _b64(stored_key),
        "server_key": _b64(server_key),
    }


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes | None:
    """RFC 5802's SaltedPassword with hashlib's PBKDF2; None when SASLprep refuses the
    password (it can then match no record)."""
    try:
        prepared = saslprep(password)
    except scramp.ScramException:
        return None
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    return hashlib.pbkdf2_hmac(digest, prepared.encode(), salt, iterations)


def auth_info(record: Mapping[str, Any], mechanism: str) -> tuple[bytes, bytes, bytes, int]:
    """scramp's (salt, stored_key, server_key, iterations) of one mechanism; KeyError if the
    record has no keys for it."""
    keys = record[mechanism]
    return (
        base64.b64decode(keys["salt"]),
        base64.b64decode(keys["stored_key"]),
        base64.b64decode(keys["server_key"]),
        int(keys["iterations"]),
    )


def password_matches(record: Mapping[str, Any] | None, password: str) -> bool:
    """Whether `password` is the one `record` was made from (PLAIN's check).

    An unknown user costs the same key derivation as a known one, so the time taken does
    not tell who exists.
    """
    if record is None or PLAIN_VIA not in record:
        salt, stored, iterations = b"\x00" * SALT_BYTES, b"", ITERATIONS
    else:
        salt, stored, _, iterations = auth_info(record, PLAIN_VIA)
    salted = salted_password(PLAIN_VIA, password, salt, iterations)
    if salted is None:
        return False
    derived, _ = scramp.ScramMechanism(PLAIN_VIA).make_stored_server_keys(salted)
    return bool(stored) and bool(password) and hmac.compare_digest(derived, stored)


# The key of this process's stand-in SCRAM salts: a name without credentials gets the same
# salt on every attempt (a salt that changed between attempts would give it away)
_STAND_IN_KEY = os.urandom(32)


def stand_in_keys(mechanism: str, name: str) -> tuple[bytes, bytes, bytes, int]:
    """(salt, stored key, server key, iterations) for a user without `mechanism` keys: fixed
    per name for the process's life, matching no password."""
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"

    def part(label: str) -> bytes:
        message = f"{label}\x00{mechanism}\x00{name}".encode()
        return hmac.new(_STAND_IN_KEY, message, digest).digest()

    return part("salt")[:SALT_BYTES], part("stored"), part("server"), ITERATIONS


def parse_plain(response: bytes) -> tuple[str, str]:
    """RFC 4616 "[authzid]\\0user\\0password"; ValueError (never echoing the bytes, which
    hold a password) when malformed or when an authorization id other than the user is
    asked for."""
    parts = response.split(b"\x00")
    if len(parts) != 3:
        raise ValueError(f"PLAIN response of {len(response)} bytes is malformed")
    try:
        authzid, user, password = (part.decode() for part in parts)
    except UnicodeDecodeError:
        raise ValueError("PLAIN response is not UTF-8") from None
    if authzid and authzid != user:
        raise ValueError("PLAIN authorization id must be empty or the user name")
    return user, password


def shown(name: str, limit: int = 64) -> str:
    """A client-supplied user name as it may appear in a log line or an error message: at
    most `limit` characters, control characters escaped (no forged log lines)."""
    cut = name[:limit].encode("unicode_escape").decode("ascii")
    return cut + ("..." if len(name) > limit else "")


class ScramExchange:
    """The server side of one SCRAM exchange: client-first in, server-first out, then
    client-final in, server-final (with the server's signature: its proof) out.

    Failures raise `AuthenticationFailed` whose text names the user but holds no secret.
    """

    def __init__(self, mechanism: str, users: UserDirectory) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self.user = ""
        self.unknown = False  # the user has no keys for the mechanism (stand-ins answered)
        self._users = users
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_fn)
        self._step = 0

    def _auth_fn(self, name: str) -> tuple[bytes, bytes, bytes, int]:
        self.user = name
        record = self._users.lookup(name)
        if record is None or self.mechanism not in record:
            # RFC 5802 section 9: carry on with stand-in keys, so that an unknown user gets
            # a challenge like any other and fails where a wrong password fails, at the
            # proof (refusing at once told who exists)
            self.unknown = True
            return stand_in_keys(self.mechanism, name)
        return auth_info(record, self.mechanism)

    def step(self, message: bytes) -> tuple[bytes, bool]:
        """The answer to the client's next message, and whether the exchange is complete."""
        try:
            text = message.decode()
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(text)
                return self._server.get_server_first().encode(), False
            if self._step == 1:
                self._step = 2
                self._server.set_client_final(text)
                return self._server.get_server_final().encode(), True
        except AuthenticationFailed:
            raise
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            who = f"user '{shown(self.user)}'" if self.user else "client"
            why = f"no {self.mechanism} credentials" if self.unknown else str(exc)
            raise AuthenticationFailed(f"{self.mechanism} failed for {who}: {why}") from None
        raise AuthenticationFailed(f"{self.mechanism} exchange already complete")


class AuthenticationFailed(Exception):
    """Credentials refused; the message is safe to send and log (no secret in it)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
