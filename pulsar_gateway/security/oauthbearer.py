"""OAUTHBEARER (RFC 7628) for Kafka: the client's bearer token is a JWT, checked here.

The gateway is a resource server: it never talks to an authorization server, it checks the
token's signature against a key it was given (`kafka.oauthbearer_key_file`: an HMAC secret
or a PEM public key) or a JWKS file (`kafka.oauthbearer_jwks_file`, the key chosen by the
token's `kid`), with PyJWT. A token must carry `exp` and the principal claim (`sub`, or
`kafka.oauthbearer_principal_claim`), and the issuer and audience when configured. The
principal is the Kafka user the rest of the gateway sees, as Kafka's unsecured and
validating login callbacks make it.

The accepted algorithms are configured, never taken from the token alone (the classic JWT
pitfall of an attacker choosing "none" or an HMAC keyed with a public key); HMAC and
public-key algorithms cannot be mixed, and an HMAC secret must be at least as long as the
hash (RFC 7518 section 3.2).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from pulsar_gateway.security.credentials import AuthenticationFailed, shown

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
PUBLIC_KEY_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
# bounded input: a token this long is refused before it is parsed
MAX_TOKEN_BYTES = 16 * 1024
# RFC 7628 section 3.2.2: what the server answers a bad token with, before failing
ERROR_JSON = json.dumps({"status": "invalid_token"}).encode()
KVSEP = b"\x01"


class OAuthConfigError(Exception):
    """A key or JWKS file that cannot be used; the message names the setting, not the key."""


@dataclass(frozen=True)
class VerifiedToken:
    principal: str
    expires_at: float  # the token's `exp`, seconds since the epoch


class TokenValidator:
    """Checks one bearer token: signature, `exp`, the principal claim, issuer, audience."""

    def __init__(
        self,
        keys: dict[str | None, Any],
        algorithms: Sequence[str],
        issuer: str = "",
        audience: str = "",
        principal_claim: str = "sub",
    ) -> None:
        self._keys = keys  # by `kid`; None: the one key for every token
        self.algorithms = list(algorithms)
        self.issuer = issuer
        self.audience = audience
        self.principal_claim = principal_claim

    def verify(self, token: str) -> VerifiedToken:
        """The token's principal and expiry, or `AuthenticationFailed` saying why (without
        the token)."""
        try:
            # the header is parsed for its kid only with a JWKS: PyJWT's per-character
            # base64url check of each parse was half of a login's CPU (bench/sasl_handshakes)
            single = self._keys.get(None)
            key = single if single is not None else self._key_for(_kid(token))
            claims = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                audience=self.audience or None,
                issuer=self.issuer or None,
                options={
                    "require": ["exp", self.principal_claim],
                    "verify_aud": bool(self.audience),
                },
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationFailed("the token has expired") from None
        except jwt.PyJWTError as exc:
            raise AuthenticationFailed(f"invalid token: {exc.__class__.__name__}") from None
        principal = claims[self.principal_claim]
        if not isinstance(principal, str) or not principal:
            raise AuthenticationFailed(f"claim '{self.principal_claim}' is not a name")
        expires_at = claims["exp"]
        if not isinstance(expires_at, int | float):
            raise AuthenticationFailed("claim 'exp' is not a number")
        return VerifiedToken(principal, float(expires_at))

    def _key_for(self, kid: Any) -> Any:
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            shown_kid = shown(kid) if isinstance(kid, str) else "none"
            raise AuthenticationFailed(f"no key in the JWKS file for kid '{shown_kid}'")
        return key


def _kid(token: str) -> Any:
    return jwt.get_unverified_header(token).get("kid")


def load_validator(
    key_file: str,
    jwks_file: str,
    algorithms: Sequence[str],
    issuer: str = "",
    audience: str = "",
    principal_claim: str = "sub",
) -> TokenValidator:
    """The validator of `[kafka]`'s OAUTHBEARER settings, loaded now so that a bad file stops
    start-up naming the setting instead of failing each login."""
    hmac = set(algorithms) <= set(HMAC_ALGORITHMS)
    if jwks_file:
        keys = _jwks_keys(jwks_file)
    elif hmac:
        keys = {None: _hmac_secret(key_file, algorithms)}
    else:
        keys = {None: _public_key(key_file)}
    return TokenValidator(keys, algorithms, issuer, audience, principal_claim)


def _hmac_secret(key_file: str, algorithms: Sequence[str]) -> bytes:
    setting = "kafka.oauthbearer_key_file"
    secret = _read(key_file, setting).strip()
    if secret.startswith(b"-----BEGIN"):
        raise OAuthConfigError(
            f"setting '{setting}': a PEM key with HMAC algorithms "
            "(kafka.oauthbearer_algorithms); give the shared secret, or public-key algorithms"
        )
    need = max(int(name[2:]) // 8 for name in algorithms)
    if len(secret) < need:
        raise OAuthConfigError(
            f"setting '{setting}': an HMAC secret must hold at least {need} bytes "
            "for kafka.oauthbearer_algorithms (RFC 7518 section 3.2)"
        )
    return secret


def _public_key(key_file: str) -> Any:
    setting = "kafka.oauthbearer_key_file"
    data = _read(key_file, setting)
    try:
        return load_pem_public_key(data)
    except (ValueError, TypeError):
        raise OAuthConfigError(
            f"setting '{setting}': {Path(key_file).name} is not a PEM public key"
        ) from None


def _jwks_keys(jwks_file: str) -> dict[str | None, Any]:
    setting = "kafka.oauthbearer_jwks_file"
    data = _read(jwks_file, setting)
    try:
        keys = jwt.PyJWKSet.from_json(data.decode())
    except (jwt.PyJWTError, ValueError, UnicodeDecodeError) as exc:
        raise OAuthConfigError(
            f"setting '{setting}': {Path(jwks_file).name} is not a usable JWKS "
            f"({exc.__class__.__name__})"
        ) from None
    found: dict[str | None, Any] = {}
    for key in keys.keys:
        if key.key_id:
            found[key.key_id] = key.key
    if not found:
        raise OAuthConfigError(f"setting '{setting}': no key with a 'kid' in the JWKS")
    return found


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OAuthConfigError(
            f"setting '{setting}': cannot read {Path(path).name}: {exc.__class__.__name__}"
        ) from None


def parse_client_first(message: bytes) -> str:
    """The bearer token of RFC 7628's initial client response,
    `gs2-header %x01 auth=Bearer <token> %x01 [key=value %x01]* %x01`; extensions (Kafka's
    SASL extensions) are accepted and ignored. `AuthenticationFailed` when malformed."""
    if len(message) > MAX_TOKEN_BYTES:
        raise AuthenticationFailed(f"OAUTHBEARER message of {len(message)} bytes is too long")
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed("OAUTHBEARER message is not UTF-8") from None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not gs2.startswith(("n,", "y,")) or not rest.endswith("\x01\x01"):
        raise AuthenticationFailed("OAUTHBEARER message is malformed")
    token = ""
    for pair in rest[:-2].split("\x01"):
        key, equals, value = pair.partition("=")
        if not equals:
            raise AuthenticationFailed("OAUTHBEARER message is malformed")
        if key == "auth":
            scheme, _, token = value.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthenticationFailed("OAUTHBEARER auth is not 'Bearer <token>'")
    if not token:
        raise AuthenticationFailed("OAUTHBEARER message holds no auth=Bearer token")
    return token.strip()


def seconds_left(token: VerifiedToken, now: float | None = None) -> float:
    """How long the token stays valid from now (wall clock)."""
    return token.expires_at - (time.time() if now is None else now)
