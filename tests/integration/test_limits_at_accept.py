"""Connection limits apply when a socket is accepted, on every listener, TLS ones too, and
the process keeps descriptors for /health (issue 33, "limits at accept").

TLS listeners (Kafka's and AMQPS) once counted a connection only after its TLS handshake:
3,000 silent sockets from one address were held (limit 1,000), and two floods used up the
process's descriptors until plaintext Kafka, AMQP and /health all failed, with nothing
logged. Now a TLS listener accepts plain sockets, counts them, and only then runs the
handshake, within a deadline; and a socket that would take one of the last descriptors
the process may open (RLIMIT_NOFILE) is refused with a log line.
"""

from __future__ import annotations

import resource
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.certificates import make_certificates
from harness.gateway_process import GatewayProcess, free_port, set_flags
from harness.raw_kafka_socket import recv_frame, seconds_until_closed
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol

PER_IP = 8
HANDSHAKE = 3.0  # kafka.frame_timeout_seconds (its TLS handshake deadline) and AMQP's
DESCRIPTORS = 400  # RLIMIT_NOFILE given to the gateway: 100 of them kept in reserve


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_gateway(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]
) -> Iterator[GatewayProcess]:
    amqps_port = free_port()
    settings = {
        "kafka.tls_cert_file": certs["cert"],
        "kafka.tls_key_file": certs["key"],
        "kafka.frame_timeout_seconds": HANDSHAKE,
        "kafka.max_connections_per_ip": PER_IP,
        "amqp.tls_cert_file": certs["cert"],
        "amqp.tls_key_file": certs["key"],
        "amqp.tls_port": amqps_port,
        "amqp.handshake_timeout_seconds": HANDSHAKE,
        "amqp.max_connections_per_ip": PER_IP,
    }
    process = GatewayProcess(tmp_path_factory.mktemp("tls-limits"), extra=set_flags(settings))
    process.amqps_port = amqps_port  # type: ignore[attr-defined]
    process.start()
    yield process
    assert process.stop() == 0, process.log_tail()


def _tls_port(gateway: GatewayProcess, listener: str) -> int:
    return gateway.kafka_port if listener == "kafka" else gateway.amqps_port  # type: ignore[attr-defined]


def _refused(gateway: GatewayProcess, listener: str, reason: str) -> float:
    return gateway.metric(
        "gateway_connections_refused_total", protocol=listener.rstrip("s"), reason=reason
    )


@pytest.mark.parametrize("listener", ["kafka", "amqps"])
def test_silent_tls_sockets_over_the_per_ip_limit_are_refused_at_once(
    tls_gateway: GatewayProcess, certs: dict[str, Path], listener: str
) -> None:
    port = _tls_port(tls_gateway, listener)
    before = _refused(tls_gateway, listener, "max_connections_per_ip")
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(PER_IP)]
    try:
        # none of them sent a ClientHello: the limit counts them all the same (accepted in
        # order, so they are counted before the next one)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            took = seconds_until_closed(extra, HANDSHAKE + 5)
        assert took < 1.0, f"a socket over the limit was held {took:.2f} s"
        assert _refused(tls_gateway, listener, "max_connections_per_ip") == before + 1
    finally:
        for sock in held:
            sock.close()
    # the held sockets' slots come back; a real TLS client is served
    wait_until(lambda: _tls_served(port, certs, listener), 10, message="a TLS client served")


def _tls_served(port: int, certs: dict[str, Path], listener: str) -> bool:
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
            with context.wrap_socket(plain, server_hostname="localhost") as sock:
                if listener == "kafka":
                    sock.sendall(protocol.encode_request(18, 0, 1, "tls", {}))
                    return len(recv_frame(sock)) > 4
                sock.sendall(b"AMQP\x00\x00\x09\x01")
                return sock.recv(7)[:1] == b"\x01"  # a method frame: Connection.Start
    except (OSError, ssl.SSLError):
        return False


@pytest.mark.parametrize("listener", ["kafka", "amqps"])
def test_a_tls_handshake_that_never_comes_is_closed(
    tls_gateway: GatewayProcess, listener: str
) -> None:
    port = _tls_port(tls_gateway, listener)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
        took = seconds_until_closed(silent, HANDSHAKE + 10)
    assert HANDSHAKE * 0.9 <= took < HANDSHAKE + 3, f"closed after {took:.2f} s"


@pytest.fixture(scope="module")
def few_descriptors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    settings = {"kafka.max_connections_per_ip": 5000, "amqp.max_connections_per_ip": 5000}
    process = GatewayProcess(tmp_path_factory.mktemp("few-fds"), extra=set_flags(settings))
    process.start()
    assert process.process is not None
    resource.prlimit(process.process.pid, resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))
    yield process
    assert process.stop() == 0, process.log_tail()


def test_a_socket_flood_leaves_descriptors_for_health(few_descriptors: GatewayProcess) -> None:
    gateway = few_descriptors
    before = _refused(gateway, "kafka", "file_descriptors")
    flood: list[socket.socket] = []
    try:
        for _ in range(DESCRIPTORS):
            for port in (gateway.kafka_port, gateway.amqp_port):
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        wait_until(
            lambda: (
                _refused(gateway, "kafka", "file_descriptors") > before
                and _refused(gateway, "amqp", "file_descriptors") > 0
            ),
            10,
            message="refusals near the descriptor limit, on both listeners",
        )
        started = time.monotonic()
        health = gateway.health()
        assert health is not None and health.get("ok"), f"/health during the flood: {health}"
        assert time.monotonic() - started < 2.0
        wait_until(lambda: "file_descriptors" in gateway.log_tail(200), 10, message="the log line")
    finally:
        for sock in flood:
            sock.close()

    # once the flood is gone, clients are served again
    def served() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=10) as sock:
                sock.sendall(protocol.encode_request(18, 0, 1, "after", {}))
                return len(recv_frame(sock)) > 4
        except OSError:
            return False

    wait_until(served, 10, message="a Kafka client after the flood")
