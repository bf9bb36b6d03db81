"""The wire client's authentication from the gateway's `[pulsar]` settings: a token file
re-read at each connect, OAuth2 client credentials exchanged at a real (local) HTTP issuer
and cached until near expiry, a TLS client certificate in the SSL context."""

from __future__ import annotations

import asyncio
import http.server
import json
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.certificates import make_certificates_with_clients
from pulsar_gateway.gateway.backend.connection_security import PulsarSecurity
from pulsar_gateway.gateway.backend.wire.auth import (
    OAuth2ClientCredentials,
    TlsAuthentication,
    TokenAuthentication,
    authentication_for,
    ssl_context_for,
)
from pulsar_gateway.gateway.backend.wire.errors import PulsarError
from pulsar_gateway.gateway.config import PulsarSection

URL = "pulsar+ssl://pulsar.example:6651"


class Issuer:
    """An OAuth2 issuer on loopback: its OpenID configuration and a token endpoint that
    hands out numbered tokens and records every form it was sent."""

    def __init__(self) -> None:
        self.forms: list[dict[str, list[str]]] = []
        self.fail = False
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                base = f"http://127.0.0.1:{self.server.server_address[1]}"
                self._reply({"issuer": base, "token_endpoint": base + "/token"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers["Content-Length"])
                issuer.forms.append(urllib.parse.parse_qs(self.rfile.read(length).decode()))
                if issuer.fail:
                    self.send_response(500)
                    self.end_headers()
                    return
                self._reply({"access_token": f"access-{len(issuer.forms)}", "expires_in": 3600})

            def _reply(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    started = Issuer()
    yield started
    started.server.shutdown()


def test_oauth2_client_credentials_are_exchanged_and_cached(issuer: Issuer, tmp_path) -> None:
    credentials = tmp_path / "credentials.json"
    credentials.write_text(json.dumps({"client_id": "gw", "client_secret": "s3cret"}))
    settings = PulsarSection(
        service_url=URL,
        oauth2_issuer_url="https://idp.example/",
        oauth2_credentials_file=str(credentials),
        oauth2_audience="urn:pulsar",
        oauth2_scope="produce",
    )
    mapped = authentication_for(PulsarSecurity.from_settings(settings))
    assert isinstance(mapped, OAuth2ClientCredentials) and mapped.method == "token"
    assert mapped.issuer_url == "https://idp.example"
    assert mapped.credentials_file == credentials.resolve()
    assert (mapped.audience, mapped.scope) == ("urn:pulsar", "produce")
    # the settings insist on https; the exchange itself is tested on a loopback issuer
    now = [0.0]
    auth = OAuth2ClientCredentials(
        issuer.url, str(credentials), "urn:pulsar", "produce", clock=lambda: now[0]
    )

    async def scenario() -> None:
        assert await auth.data() == b"access-1"
        assert await auth.data() == b"access-1"  # cached
        now[0] = 3600 - 30.0  # within the refresh margin of its expiry
        assert await auth.data() == b"access-2"
        issuer.fail = True
        now[0] = 10_000.0
        with pytest.raises(PulsarError) as failed:
            await auth.data()
        assert "s3cret" not in str(failed.value)

    asyncio.run(scenario())
    form = issuer.forms[0]
    assert form["grant_type"] == ["client_credentials"]
    assert (form["client_id"], form["client_secret"]) == (["gw"], ["s3cret"])
    assert (form["audience"], form["scope"]) == (["urn:pulsar"], ["produce"])


def test_a_token_file_is_read_at_each_connect(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    security = PulsarSecurity.from_settings(
        PulsarSection(service_url=URL, auth_token_file=str(token))
    )
    auth = authentication_for(security)
    assert isinstance(auth, TokenAuthentication)

    async def scenario() -> None:
        assert await auth.data() == b"first"
        token.write_text("rotated\n")
        assert await auth.data() == b"rotated"

    asyncio.run(scenario())
    assert "first" not in repr(auth) and "rotated" not in repr(auth)


def test_a_client_certificate_goes_in_the_tls_context(tmp_path: Path) -> None:
    files = make_certificates_with_clients(tmp_path, "gateway")
    security = PulsarSecurity.from_settings(
        PulsarSection(
            service_url=URL,
            tls_trust_certs_file=str(files["ca"]),
            tls_cert_file=str(files["gateway.pem"]),
            tls_key_file=str(files["gateway.key"]),
        )
    )
    auth = authentication_for(security)
    assert isinstance(auth, TlsAuthentication) and auth.method == "tls"
    context = ssl_context_for(security, tls_url=True)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert ssl_context_for(security, tls_url=False) is None
