"""Kafka SASL on one connection: SaslHandshake v0-1, then SaslAuthenticate v0-2 frames.

The state is the connection's (which mechanism was chosen, the SCRAM exchange under way,
who is authenticated), so the listener calls this directly instead of going through the
API table. Kafka's rules, kept here:

- a SaslHandshake naming a mechanism not enabled answers UNSUPPORTED_SASL_MECHANISM with
  the enabled list; a SaslAuthenticate without a handshake, ILLEGAL_SASL_STATE;
- a failed authentication answers SASL_AUTHENTICATION_FAILED with a message, and the
  connection is then closed (the client reports the message);
- KIP-368: with a session lifetime, SaslAuthenticate v1+ tells the client how long its
  session lasts; an authenticated client may run SaslHandshake and SaslAuthenticate again
  (same mechanism, same user) to extend it; a request other than those after it expired
  closes the connection (the listener asks `expired`);
- OAUTHBEARER (RFC 7628): the token is a JWT checked by security/oauthbearer.py; its
  principal claim is the user, and the session ends no later than the token's `exp`
  (the KIP-368 lifetime answered is the smaller of that and the configured one, so a
  client must re-authenticate with a fresh token). A bad token is answered as Kafka does:
  first the RFC 7628 error JSON (`{"status":"invalid_token"}`) with no error, then, on the
  client's %x01, SASL_AUTHENTICATION_FAILED;
- a user authenticated from the users store (PLAIN, SCRAM) whose record is removed or
  changed (`pulsar-gateway users remove|passwd`) loses the session: the listener asks
  `current` before each request and closes the connection, as an expired session;
- after a v0 handshake Kafka also takes raw SASL tokens without Kafka framing; only
  framed SaslAuthenticate requests are taken here (every client that speaks SaslAuthenticate
  sends it after either handshake version: librdkafka, the Java client, kafka-python,
  aiokafka).

Every outcome is logged with the user and the peer, never a secret, and counted in
gateway_authentications_total.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.credentials import (
    SCRAM_MECHANISMS,
    AuthenticationFailed,
    ScramExchange,
    UserDirectory,
    parse_plain,
    password_matches,
    shown,
)
from pulsar_gateway.security.oauthbearer import (
    ERROR_JSON,
    TokenValidator,
    parse_client_first,
    seconds_left,
)

log = logging.getLogger("gateway.kafka.auth")

OAUTHBEARER = "OAUTHBEARER"
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, OAUTHBEARER)
# the record of a user gone between authentication and the look-up after it: never equal
# to what the store holds, so the session ends at the next request
_GONE: dict[str, Any] = {"gone": True}


class SaslSession:
    """One connection's SASL state; `authenticated` is the user's name once it succeeded."""

    def __init__(
        self,
        mechanisms: Sequence[str],
        users: UserDirectory,
        peer: Any,
        lifetime_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
        tokens: TokenValidator | None = None,
    ) -> None:
        self.mechanisms = list(mechanisms)
        self.users = users
        self.peer = peer
        self.lifetime_ms = lifetime_ms
        self.clock = clock
        self.mechanism = ""
        self.authenticated = ""
        self.expires_at = float("inf")
        self.failed = False  # answer, then close the connection
        self.reauthenticating = False
        self.tokens = tokens
        self._scram: ScramExchange | None = None
        self._record: Any = None  # the store's record at authentication (PLAIN, SCRAM)
        self._token_refused = ""  # OAUTHBEARER: the error JSON went out; this is why
        self._verified: tuple[str, float] | None = None  # its principal, seconds left

    @property
    def expired(self) -> bool:
        return self.clock() >= self.expires_at

    @property
    def credentials_changed(self) -> bool:
        """The user was removed, or its password changed, since it authenticated."""
        if self._record is None:
            return False  # not from the store (OAUTHBEARER), or not authenticated
        now = self.users.lookup(self.authenticated)
        return now is not self._record and now != self._record

    @property
    def current(self) -> bool:
        """Whether the connection may be served: authenticated, not expired, not revoked."""
        if not self.required:
            return not self.credentials_changed  # a certificate's user may be removed too
        return bool(self.authenticated) and not self.expired and not self.credentials_changed

    def authenticate_certificate(self, common_name: str) -> bool:
        """Kafka's SSL principal (kafka.tls_certificate_users) on a TLS connection without
        SASL: the verified client certificate's common name is the connection's user, and
        must be in the users store. With SASL on, SASL's user is the principal (as in Kafka)
        and this does nothing. False (logged, counted): close the connection."""
        if self.required:
            return True
        record = self.users.lookup(common_name) if common_name else None
        if record is None:
            log.warning(
                "Kafka client certificate from %s refused: user '%s' is not in the users store",
                self.peer,
                shown(common_name),
            )
            metrics.AUTHENTICATIONS.labels("kafka", "SSL", "failure").inc()
            return False
        self.authenticated, self._record = common_name, record
        log.info(
            "Kafka user '%s' authenticated from %s by client certificate",
            shown(common_name),
            self.peer,
        )
        metrics.AUTHENTICATIONS.labels("kafka", "SSL", "success").inc()
        return True

    @property
    def required(self) -> bool:
        return bool(self.mechanisms)

    def handshake(self, request: dict[str, Any]) -> dict[str, Any]:
        mechanism = request["mechanism"]
        if self.authenticated and not self.reauthenticating:
            # KIP-368 re-authentication: the mechanism may not change
            if mechanism != self.mechanism:
                self.failed = True
                self._count(mechanism, "failure")
                return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": self.mechanisms}
            self.reauthenticating = True
            self._token_refused = ""
            if mechanism in SCRAM_MECHANISMS:
                self._scram = ScramExchange(mechanism, self.users)
            return {"error_code": ErrorCode.NONE, "mechanisms": self.mechanisms}
        if self.mechanism:
            self.failed = True
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": self.mechanisms}
        if mechanism not in self.mechanisms:
            self.failed = True
            log.warning(
                "Kafka SASL from %s: mechanism %r not enabled (kafka.sasl_mechanisms)",
                self.peer,
                mechanism[:64],
            )
            self._count(mechanism, "failure")
            return {
                "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                "mechanisms": self.mechanisms,
            }
        self.mechanism = mechanism
        if mechanism in SCRAM_MECHANISMS:
            self._scram = ScramExchange(mechanism, self.users)
        return {"error_code": ErrorCode.NONE, "mechanisms": self.mechanisms}

    def authenticate(self, request: dict[str, Any]) -> dict[str, Any]:
        token = bytes(request["auth_bytes"] or b"")
        if not self.mechanism or (self.authenticated and not self.reauthenticating):
            self.failed = True
            return _answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake must come first")
        token_left = 0.0
        try:
            if self.mechanism == OAUTHBEARER:
                answer = self._bearer(token)
                if answer is not None:
                    return answer  # the error JSON; the client answers %x01, then fails
                assert self._verified is not None
                user, token_left = self._verified
                reply, done = b"", True
            elif self._scram is not None:
                reply, done = self._scram.step(token)
                user = self._scram.user
            else:
                user, password = _plain(token)
                if not password_matches(self.users.lookup(user), password):
                    raise AuthenticationFailed(f"PLAIN failed for user '{shown(user)}'")
                reply, done = b"", True
            if done and self.reauthenticating and user != self.authenticated:
                raise AuthenticationFailed(
                    f"re-authentication as '{shown(user)}' on a session of "
                    f"'{shown(self.authenticated)}'"
                )
        except AuthenticationFailed as exc:
            self.failed = True
            log.warning("Kafka authentication failed from %s: %s", self.peer, exc)
            self._count(self.mechanism, "failure")
            return _answer(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}",
            )
        if not done:
            return _answer(ErrorCode.NONE, None, reply)
        again = self.reauthenticating
        self.authenticated, self.reauthenticating = user, False
        lifetime_ms = self.lifetime_ms
        if self.mechanism == OAUTHBEARER:
            # KIP-368 with a token: the session ends no later than the token
            left_ms = max(1, int(token_left * 1000))
            lifetime_ms = min(lifetime_ms, left_ms) if lifetime_ms else left_ms
            self._record = None
        else:
            self._record = self.users.lookup(user) or _GONE
        if lifetime_ms:
            self.expires_at = self.clock() + lifetime_ms / 1000
        log.info(
            "Kafka user '%s' %s from %s (%s)",
            shown(user),
            "re-authenticated" if again else "authenticated",
            self.peer,
            self.mechanism,
        )
        self._count(self.mechanism, "success")
        return _answer(ErrorCode.NONE, None, reply, lifetime_ms)

    def _bearer(self, message: bytes) -> dict[str, Any] | None:
        """OAUTHBEARER's one step: None with `_verified` set (principal, seconds left), or
        the RFC 7628 error challenge. The client's %x01 after it ends in
        `AuthenticationFailed` with the reason."""
        if self._token_refused:
            raise AuthenticationFailed(self._token_refused)
        if self.tokens is None:
            raise AuthenticationFailed("OAUTHBEARER has no token validator")
        try:
            verified = self.tokens.verify(parse_client_first(message))
        except AuthenticationFailed as exc:
            self._token_refused = str(exc)
            return _answer(ErrorCode.NONE, None, ERROR_JSON)
        self._verified = (verified.principal, seconds_left(verified))
        return None

    def _count(self, mechanism: str, outcome: str) -> None:
        label = mechanism if mechanism in MECHANISMS else "unknown"
        metrics.AUTHENTICATIONS.labels("kafka", label, outcome).inc()


def _plain(token: bytes) -> tuple[str, str]:
    try:
        return parse_plain(token)
    except ValueError as exc:
        raise AuthenticationFailed(str(exc)) from None


def _answer(
    code: ErrorCode, message: str | None, reply: bytes = b"", lifetime_ms: int = 0
) -> dict[str, Any]:
    # session_lifetime_ms 0: no re-authentication deadline
    return {
        "error_code": code,
        "error_message": message,
        "auth_bytes": reply,
        "session_lifetime_ms": lifetime_ms,
    }
