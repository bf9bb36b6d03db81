"""Server TLS contexts for the listeners, from a certificate, its key and an optional CA.

With a CA file, clients must present a certificate it signed (mutual TLS); without one,
any client may connect and authenticates, if at all, with SASL. Python's defaults pick the
protocol versions and ciphers (TLS 1.2 and up).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any


class TlsConfigError(Exception):
    """A certificate, key or CA file that cannot be used; the message names the setting."""


class EncryptedKey(Exception):
    """A private key that needs a passphrase: refused, never asked for."""


def _no_passphrase() -> bytes:
    raise EncryptedKey("the key is encrypted")


def load_key_pair(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    """`load_cert_chain` that never asks for a passphrase: without a password callback,
    OpenSSL prompts on the terminal for an encrypted key, with the event loop blocked until
    someone types. An encrypted key raises EncryptedKey instead."""
    context.load_cert_chain(cert_file, key_file, password=_no_passphrase)


def encrypted_key_problem(setting: str) -> str:
    """The one line start-up stops with for an encrypted key."""
    return (
        f"setting '{setting}': the key is encrypted; give an unencrypted key file (readable "
        "by the gateway's user only): the gateway never asks for a passphrase"
    )


def server_context(
    section: str, cert_file: str, key_file: str, ca_file: str = ""
) -> ssl.SSLContext:
    """The context for `section`'s listener (`kafka` or `amqp`), loaded now so that a bad
    file stops start-up with the setting's name instead of failing each handshake."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        load_key_pair(context, cert_file, key_file)
    except EncryptedKey:
        raise TlsConfigError(encrypted_key_problem(f"{section}.tls_key_file")) from None
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"setting '{section}.tls_cert_file'/'{section}.tls_key_file': cannot load "
            f"{Path(cert_file).name} with its key: {exc.__class__.__name__}"
        ) from None
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"setting '{section}.tls_ca_file': cannot load {Path(ca_file).name}: "
                f"{exc.__class__.__name__}"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def certificate_common_name(certificate: Any) -> str:
    """The common name of a client certificate the listener verified (`peercert`), or ""
    (no TLS, no CA asked for certificates, or no common name): the user of AMQP's EXTERNAL
    and of Kafka's certificate principal (kafka.tls_certificate_users)."""
    for rdn in (certificate or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""
