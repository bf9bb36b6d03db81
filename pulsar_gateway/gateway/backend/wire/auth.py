"""How the wire client proves itself to a broker: the method name and data CONNECT carries,
asked again for each new connection and whenever the broker sends AUTH_CHALLENGE (a token
refresh). From the gateway's `[pulsar]` settings (`connection_security.PulsarSecurity`):

- `token`: the token from the setting or its file, re-read at each use (rotation on disk);
- `oauth2`: client credentials exchanged at the issuer for an access token, sent as a
  `token` (what Pulsar's OAuth2 plugin does), fetched again shortly before it expires;
- `tls`: method "tls" with no data; the certificate travels in the TLS handshake, so the
  SSL context carries it (`ssl_context_for`).

Secrets are never logged; errors name the setting, not its value.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pulsar_gateway.gateway.backend.wire.errors import PulsarError

# An access token is fetched again when less than this is left of its life.
OAUTH2_REFRESH_MARGIN_SECONDS = 60.0
OAUTH2_HTTP_TIMEOUT_SECONDS = 10.0


class Authentication(Protocol):
    @property
    def method(self) -> str:
        """The method's name in CONNECT ("none": no authentication)."""
        ...

    async def data(self) -> bytes:
        """The bytes CONNECT (and AUTH_RESPONSE) carries for this method."""
        ...


@dataclass(frozen=True)
class NoAuthentication:
    method: str = "none"

    async def data(self) -> bytes:
        return b""


@dataclass(frozen=True)
class TokenAuthentication:
    """A token from a callable, called at each connect (a file is re-read each time)."""

    token: Callable[[], str] = field(repr=False)
    method: str = "token"

    async def data(self) -> bytes:
        return self.token().encode()


@dataclass(frozen=True)
class TlsAuthentication:
    """Client certificate authentication: the certificate is in the SSL context."""

    method: str = "tls"

    async def data(self) -> bytes:
        return b""


class OAuth2ClientCredentials:
    """OAuth2 client credentials: an access token from the issuer's token endpoint (found
    in its OpenID configuration), cached until shortly before it expires."""

    method = "token"

    def __init__(
        self,
        issuer_url: str,
        credentials_file: str,
        audience: str = "",
        scope: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer_url = issuer_url.rstrip("/")
        self.credentials_file = Path(credentials_file)
        self.audience = audience
        self.scope = scope
        self._clock = clock
        self._token = ""
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def data(self) -> bytes:
        async with self._lock:
            if not self._token or self._clock() > self._expires - OAUTH2_REFRESH_MARGIN_SECONDS:
                # urllib blocks: the exchange runs in a worker thread, rarely (once per token)
                token, lifetime = await asyncio.to_thread(self._fetch)
                self._token = token
                self._expires = self._clock() + lifetime
            return self._token.encode()

    def _fetch(self) -> tuple[str, float]:
        try:
            credentials = json.loads(self.credentials_file.read_text())
            endpoint = self._token_endpoint()
            form = {
                "grant_type": "client_credentials",
                "client_id": credentials["client_id"],
                "client_secret": credentials["client_secret"],
            }
            if self.audience:
                form["audience"] = self.audience
            if self.scope:
                form["scope"] = self.scope
            request = urllib.request.Request(
                endpoint,
                data=urllib.parse.urlencode(form).encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            answer = _read_json(request)
            return str(answer["access_token"]), float(answer.get("expires_in", 3600))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PulsarError(
                f"OAuth2 token from {self.issuer_url} failed: {exc.__class__.__name__}"
            ) from None

    def _token_endpoint(self) -> str:
        config = _read_json(
            urllib.request.Request(self.issuer_url + "/.well-known/openid-configuration")
        )
        return str(config["token_endpoint"])


def _read_json(request: urllib.request.Request) -> Any:
    with urllib.request.urlopen(request, timeout=OAUTH2_HTTP_TIMEOUT_SECONDS) as answer:  # noqa: S310
        return json.loads(answer.read())


NO_AUTHENTICATION = NoAuthentication()


def authentication_for(security: Any) -> Authentication:
    """The method of a checked `PulsarSecurity` (connection_security.py)."""
    if security.method == "token" and security.token is not None:
        return TokenAuthentication(security.token)
    if security.method == "oauth2":
        params = json.loads(security.oauth2_params)
        return OAuth2ClientCredentials(
            params["issuer_url"],
            urllib.request.url2pathname(urllib.parse.urlsplit(params["private_key"]).path),
            params.get("audience", ""),
            params.get("scope", ""),
        )
    if security.method == "tls":
        return TlsAuthentication()
    return NO_AUTHENTICATION


def ssl_context_for(security: Any, tls_url: bool) -> ssl.SSLContext | None:
    """The TLS context for `pulsar+ssl://` (or for a client certificate); None: plain TCP."""
    if not tls_url:
        return None
    context = ssl.create_default_context(cafile=security.trust_file or None)
    if not security.verify_hostname:
        context.check_hostname = False
    if security.method == "tls":
        context.load_cert_chain(security.cert_file, security.key_file)
    return context
