"""Toward an external Pulsar (docs/security.md, "Toward Pulsar"): TLS with a trusted CA and
hostname verification, a token, for the binary protocol and the admin REST calls.

The "external Pulsar" is a separately started pulsar-lite behind a TLS proxy
(harness/tls_proxy.py); pulsar-lite checks no token, so the tests check what the
client sends: the proxy keeps each connection's first bytes (Pulsar's CONNECT, where the
token travels). The admin calls go to a local HTTPS server that records their headers.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness.certificates import make_certificates
from harness.gateway_process import REPO, GatewayProcess, set_flags
from harness.tls_proxy import TlsProxy
from pulsar_gateway.gateway.backend.admin import AdminError, PulsarAdmin
from pulsar_gateway.gateway.backend.connection_security import (
    PulsarSecurity,
    PulsarSecurityError,
)
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.pulsar_backend import BackendError, PulsarBackend
from pulsar_gateway.gateway.config import PulsarSection
from pulsar_gateway.gateway.messages import OutMessage

TOKEN = "eyJhbGciOiJub25lIn0.test-token-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("pulsar-tls"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    loop = asyncio.new_event_loop()
    started = EmbeddedBroker(tmp_path_factory.mktemp("cluster"))
    loop.run_until_complete(started.start())
    yield started
    loop.run_until_complete(started.stop())
    loop.close()


def _proxy(broker: EmbeddedBroker, certificates: dict[str, Path], host: str) -> TlsProxy:
    port = int(broker.service_url.rsplit(":", 1)[1])
    return TlsProxy(port, certificates["cert"], certificates["key"], host=host).start()


@pytest.fixture
def proxy(broker: EmbeddedBroker, certificates: dict[str, Path]) -> Iterator[TlsProxy]:
    started = _proxy(broker, certificates, "127.0.0.1")
    yield started
    started.stop()


def _token_file(where: Path, token: str = TOKEN) -> Path:
    path = where / "pulsar.token"
    path.write_text(token + "\n")
    return path


def test_gateway_fronts_pulsar_over_tls_with_a_token(
    tmp_path: Path, proxy: TlsProxy, certificates: dict[str, Path]
) -> None:
    settings = {
        "pulsar.tls_trust_certs_file": certificates["ca"],
        "pulsar.auth_token_file": _token_file(tmp_path),
    }
    url = f"pulsar+ssl://localhost:{proxy.port}"
    gateway = GatewayProcess(tmp_path / "gw", extra=["--pulsar-url", url, *set_flags(settings)])
    gateway.start()
    try:
        # `users` reaches the same Pulsar with the same settings (here from the environment)
        environ = {
            f"PULSAR_GATEWAY_PULSAR__{k.split('.')[1].upper()}": str(v) for k, v in settings.items()
        }
        command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", "tina"]
        command += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
        added = subprocess.run(
            command, input="tina pw\n", text=True, capture_output=True, cwd=REPO, timeout=60,
            env={**os.environ, "PULSAR_GATEWAY_PULSAR__SERVICE_URL": url, **environ},
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        topic = f"tls-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": gateway.bootstrap})
        producer.produce(topic, b"over tls", b"k")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "tls"})
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = None
        for _ in range(30):
            message = consumer.poll(1)
            if message is not None and not message.error():
                break
        consumer.close()
        assert message is not None and message.value() == b"over tls"
    finally:
        assert gateway.stop() == 0, gateway.log_tail()
    # every connection the gateway opened to Pulsar went through TLS and carried the token
    assert proxy.first_bytes
    assert all(TOKEN.encode() in first for first in proxy.first_bytes)
    for log in (gateway.log_path, gateway.data_dir / "pulsar-client.log"):
        assert TOKEN not in log.read_text(errors="replace")


async def _send_one(url: str, security: PulsarSecurity, where: Path) -> None:
    backend = PulsarBackend(
        url, operation_timeout_seconds=3, security=security, client_log=where / "client.log"
    )
    await backend.start()
    try:
        await backend.send(
            f"persistent://public/default/v-{uuid.uuid4().hex[:6]}", [OutMessage(b"x")]
        )
    finally:
        await backend.close()


def test_the_broker_certificate_is_verified(
    tmp_path: Path, broker: EmbeddedBroker, certificates: dict[str, Path]
) -> None:
    """A broker whose certificate is for another name (here 127.0.0.2, not in it) or
    signed by a CA not trusted is refused before anything is sent."""
    elsewhere = _proxy(broker, certificates, "127.0.0.2")
    (tmp_path / "other").mkdir()
    other_ca = make_certificates(tmp_path / "other")["ca"]
    try:
        url = f"pulsar+ssl://127.0.0.2:{elsewhere.port}"

        def security(**more: Any) -> PulsarSecurity:
            settings = {"service_url": url, "tls_trust_certs_file": str(certificates["ca"])}
            return PulsarSecurity.from_settings(PulsarSection(**{**settings, **more}))

        with pytest.raises(BackendError):
            asyncio.run(_send_one(url, security(), tmp_path))
        with pytest.raises(BackendError):
            asyncio.run(_send_one(url, security(tls_trust_certs_file=str(other_ca)), tmp_path))
        assert not any(elsewhere.first_bytes)  # no CONNECT got through
        # the same broker is accepted once the name is not checked
        asyncio.run(_send_one(url, security(tls_hostname_verification=False), tmp_path))
        assert any(elsewhere.first_bytes)
    finally:
        elsewhere.stop()


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str]]

    def _answer(self) -> None:
        self.seen.append({"path": self.path, **dict(self.headers.items())})
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(204)
        self.end_headers()

    do_PUT = do_POST = do_GET = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def admin_servers(certificates: dict[str, Path]) -> Iterator[tuple[dict[str, int], list[dict]]]:
    """HTTPS servers on 127.0.0.1 (named in the certificate) and 127.0.0.2 (not named),
    recording every request they answer."""
    seen: list[dict[str, str]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates["cert"], certificates["key"])
    servers = {}
    for host in ("127.0.0.1", "127.0.0.2"):
        server = http.server.ThreadingHTTPServer((host, 0), handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[host] = server
    yield {host: server.server_address[1] for host, server in servers.items()}, seen
    for server in servers.values():
        server.shutdown()
        server.server_close()


def test_admin_calls_carry_the_token_over_verified_tls(
    tmp_path: Path, admin_servers: tuple[dict[str, int], list[dict]], certificates: dict[str, Path]
) -> None:
    ports, seen = admin_servers
    token_file = _token_file(tmp_path)

    def admin(host: str = "localhost", **more: Any) -> PulsarAdmin:
        port = ports["127.0.0.2" if host == "127.0.0.2" else "127.0.0.1"]
        settings = {
            "service_url": "pulsar+ssl://localhost:6651",
            "admin_url": f"https://{host}:{port}",
            "tls_trust_certs_file": str(certificates["ca"]),
            "auth_token_file": str(token_file),
        }
        security = PulsarSecurity.from_settings(PulsarSection(**{**settings, **more}))
        return PulsarAdmin(f"https://{host}:{port}", timeout=5, security=security)

    topic = "persistent://public/default/t"
    asyncio.run(admin().create_partitioned_topic(topic, 3))
    assert seen[-1]["Authorization"] == f"Bearer {TOKEN}"
    assert seen[-1]["path"] == "/admin/v2/persistent/public/default/t/partitions"
    # a token rotated on disk is sent from the next call on, without a restart
    token_file.write_text("rotated-token\n")
    asyncio.run(admin().update_partitions(topic, 4))
    assert seen[-1]["Authorization"] == "Bearer rotated-token"
    calls = len(seen)
    with pytest.raises(AdminError):  # 127.0.0.2 is not a name in the certificate
        asyncio.run(admin("127.0.0.2").update_partitions(topic, 5))
    with pytest.raises(AdminError):  # the system's CAs do not know the test CA
        asyncio.run(admin(tls_trust_certs_file="").update_partitions(topic, 5))
    assert len(seen) == calls  # neither reached the server
    asyncio.run(admin("127.0.0.2", tls_hostname_verification=False).update_partitions(topic, 5))
    assert len(seen) == calls + 1


def test_unusable_files_stop_start_up_naming_the_setting(
    tmp_path: Path, certificates: dict[str, Path]
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    url = "pulsar+ssl://localhost:6651"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tls_trust_certs_file": str(garbage)}, "pulsar.tls_trust_certs_file"),
        ({"auth_token_file": str(empty)}, "pulsar.auth_token_file"),
        (
            {"oauth2_issuer_url": "https://idp", "oauth2_credentials_file": str(garbage)},
            "pulsar.oauth2_credentials_file",
        ),
        (
            {"tls_cert_file": str(garbage), "tls_key_file": str(certificates["key"])},
            "pulsar.tls_cert_file",
        ),
    ]
    for settings, named in cases:
        with pytest.raises(PulsarSecurityError, match=named) as refused:
            PulsarSecurity.from_settings(PulsarSection(service_url=url, **settings))
        assert "not a certificate" not in str(refused.value)
    # and from a real process: the message on its way out
    gateway = GatewayProcess(
        tmp_path / "gw",
        extra=["--pulsar-url", url, *set_flags({"pulsar.auth_token_file": empty})],
    )
    with pytest.raises(RuntimeError, match="pulsar.auth_token_file"):
        gateway.start()


def test_oauth2_and_tls_authentication_use_pulsar_clients_classes(
    tmp_path: Path, certificates: dict[str, Path]
) -> None:
    """What can be checked without an authorization server or an authenticating broker:
    the parameters handed to pulsar-client's AuthenticationOauth2 and AuthenticationTLS."""
    credentials = tmp_path / "credentials.json"
    credentials.write_text(json.dumps({"client_id": "gw", "client_secret": "s3cret"}))
    security = PulsarSecurity.from_settings(
        PulsarSection(
            service_url="pulsar+ssl://localhost:6651",
            oauth2_issuer_url="https://idp.example",
            oauth2_credentials_file=str(credentials),
            oauth2_audience="urn:pulsar",
        )
    )
    params = json.loads(security.oauth2_params)
    assert params == {
        "type": "client_credentials",
        "issuer_url": "https://idp.example",
        "private_key": credentials.resolve().as_uri(),
        "audience": "urn:pulsar",
    }
    assert "s3cret" not in repr(security)
    assert type(security.client_options()["authentication"]).__name__ == "AuthenticationOauth2"
    tls = PulsarSecurity.from_settings(
        PulsarSection(
            service_url="pulsar+ssl://localhost:6651",
            tls_cert_file=str(certificates["cert"]),
            tls_key_file=str(certificates["key"]),
        )
    )
    assert type(tls.client_options()["authentication"]).__name__ == "AuthenticationTLS"
    assert tls.admin_context() is not None  # the client certificate for admin calls too
