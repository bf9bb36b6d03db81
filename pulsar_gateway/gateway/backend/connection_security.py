"""How the gateway proves itself to an external Pulsar, and checks it is talking to it.

From the `[pulsar]` settings (docs/security.md, "Toward Pulsar"): TLS (a trusted CA file
and hostname verification) and one authentication method, built with pulsar-client's own
classes (`AuthenticationToken`, `AuthenticationOauth2`, `AuthenticationTLS`), for the
binary protocol; and the same trust, client certificate and `Authorization: Bearer` header
for the admin REST calls (admin.py).

Everything is loaded and checked once, at start-up, so a file that cannot be used stops
the gateway with the setting's name. A token file is then re-read at each use (Pulsar's
token supplier, and each admin call): a token rotated on disk is picked up without a
restart. The token itself is never logged nor shown in an error.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar

from pulsar_gateway.gateway.config import PulsarSection
from pulsar_gateway.security.tls import EncryptedKey, encrypted_key_problem, load_key_pair

log = logging.getLogger("gateway.backend")


class PulsarSecurityError(Exception):
    """A setting whose file cannot be used; the message names it, never a secret."""


@dataclass(frozen=True)
class PulsarSecurity:
    """The checked `[pulsar]` security settings; `NO_SECURITY` for the embedded broker."""

    trust_file: str = ""
    verify_hostname: bool = True
    method: str = "none"
    token: Callable[[], str] | None = field(default=None, repr=False)
    oauth2_params: str = field(default="", repr=False)
    cert_file: str = ""
    key_file: str = ""

    @classmethod
    def from_settings(cls, settings: PulsarSection) -> PulsarSecurity:
        if settings.tls_trust_certs_file:
            _load_trust(settings.tls_trust_certs_file)
        method = settings.auth_method
        token: Callable[[], str] | None = None
        oauth2 = ""
        if method == "token":
            token = _token_source(settings)
        elif method == "oauth2":
            oauth2 = _oauth2_params(settings)
        elif method == "tls":
            _load_client_certificate(settings.tls_cert_file, settings.tls_key_file)
        return cls(
            trust_file=settings.tls_trust_certs_file,
            verify_hostname=settings.tls_hostname_verification,
            method=method,
            token=token,
            oauth2_params=oauth2,
            cert_file=settings.tls_cert_file,
            key_file=settings.tls_key_file,
        )

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for `pulsar.Client` (and its asyncio twin)."""
        options: dict[str, Any] = {}
        if self.trust_file:
            options["tls_trust_certs_file_path"] = self.trust_file
            options["tls_validate_hostname"] = self.verify_hostname
        authentication = self._authentication()
        if authentication is not None:
            options["authentication"] = authentication
        return options

    def _authentication(self) -> pulsar.Authentication | None:
        if self.method == "token" and self.token is not None:
            return pulsar.AuthenticationToken(self.token)
        if self.method == "oauth2":
            return pulsar.AuthenticationOauth2(self.oauth2_params)
        if self.method == "tls":
            return pulsar.AuthenticationTLS(self.cert_file, self.key_file)
        return None

    def admin_headers(self) -> dict[str, str]:
        """The admin API's `Authorization` header (token authentication only: the OAuth2
        token pulsar-client fetches is not handed out, so admin calls go without one)."""
        if self.method == "token" and self.token is not None:
            return {"Authorization": f"Bearer {self.token()}"}
        return {}

    def admin_context(self) -> ssl.SSLContext | None:
        """The TLS context of https:// admin calls: the trust file (else the system's CAs),
        hostname verification, and the client certificate with AuthenticationTLS."""
        if not self.trust_file and self.method != "tls":
            return None
        context = ssl.create_default_context(cafile=self.trust_file or None)
        if not self.verify_hostname:
            context.check_hostname = False
        if self.method == "tls":
            load_key_pair(context, self.cert_file, self.key_file)
        return context


NO_SECURITY = PulsarSecurity()


def _load_trust(path: str) -> None:
    try:
        ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise PulsarSecurityError(
            f"setting 'pulsar.tls_trust_certs_file': cannot load {Path(path).name} as PEM "
            f"certificates: {exc.__class__.__name__}"
        ) from None


def _load_client_certificate(cert_file: str, key_file: str) -> None:
    try:
        load_key_pair(ssl.create_default_context(), cert_file, key_file)
    except EncryptedKey:
        # pulsar-client would ask for its passphrase on the terminal, or fail each connect
        raise PulsarSecurityError(encrypted_key_problem("pulsar.tls_key_file")) from None
    except (OSError, ssl.SSLError) as exc:
        raise PulsarSecurityError(
            "setting 'pulsar.tls_cert_file'/'pulsar.tls_key_file': cannot load "
            f"{Path(cert_file).name} with its key: {exc.__class__.__name__}"
        ) from None


def _token_source(settings: PulsarSection) -> Callable[[], str]:
    value = settings.auth_token.get_secret_value().strip()
    if value:
        return lambda: value
    source = _TokenFile(Path(settings.auth_token_file))
    source.read()  # an unreadable or empty file stops start-up now
    return source


class _TokenFile:
    """A token file, re-read at each call; a failed read later (a rotation half done)
    keeps the last good token, with a warning, instead of failing inside pulsar-client."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last = ""

    def read(self) -> str:
        try:
            token = self.path.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise PulsarSecurityError(
                f"setting 'pulsar.auth_token_file': cannot read {self.path.name}: "
                f"{exc.__class__.__name__}"
            ) from None
        if not token:
            raise PulsarSecurityError(
                f"setting 'pulsar.auth_token_file': {self.path.name} is empty"
            )
        self._last = token
        return token

    def __call__(self) -> str:
        try:
            return self.read()
        except PulsarSecurityError as exc:
            log.warning("%s; using the token read before", exc)
            return self._last


def _oauth2_params(settings: PulsarSection) -> str:
    """pulsar-client's client-credentials parameters; the credentials file must be the JSON
    with client_id and client_secret that Pulsar's OAuth2 plugin reads."""
    path = Path(settings.oauth2_credentials_file)
    try:
        credentials = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PulsarSecurityError(
            f"setting 'pulsar.oauth2_credentials_file': cannot read {path.name} as JSON: "
            f"{exc.__class__.__name__}"
        ) from None
    if not isinstance(credentials, dict) or not {"client_id", "client_secret"} <= set(credentials):
        raise PulsarSecurityError(
            "setting 'pulsar.oauth2_credentials_file': needs client_id and client_secret"
        )
    params = {
        "type": "client_credentials",
        "issuer_url": settings.oauth2_issuer_url,
        "private_key": path.resolve().as_uri(),
    }
    if settings.oauth2_audience:
        params["audience"] = settings.oauth2_audience
    if settings.oauth2_scope:
        params["scope"] = settings.oauth2_scope
    return json.dumps(params)
