"""Before a Kafka connection logs in (SASL on), a stranger holds next to nothing (issue 33,
"lockout before login").

Once, three sockets sending only the size prefixes of 100 MiB frames took the listener's
whole queued-bytes budget before anyone looked at their headers or their login state, and
no client got an answer for as long as they liked. Now, before login: a frame over
`kafka.max_unauthenticated_frame_bytes` (Kafka's sasl.server.max.receive.size) closes its
connection at once, a request other than ApiVersions or SASL closes it from its header
alone (its body is never read), what it may queue is one such frame, a connection that has
not logged in within `kafka.login_timeout_seconds` is closed, and one address may hold only
`kafka.max_unauthenticated_connections_per_ip` such connections.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from harness.gateway_process import REPO, GatewayProcess, set_flags
from harness.raw_kafka_socket import recv_frame, seconds_until_closed
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

MIB = 1024 * 1024
LOGIN_TIMEOUT = 2.0
STRANGERS_PER_IP = 6
USER, PASSWORD = "alice", "alice pw"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    settings = {
        "kafka.sasl_mechanisms": "PLAIN",
        "kafka.login_timeout_seconds": LOGIN_TIMEOUT,
        "kafka.max_unauthenticated_connections_per_ip": STRANGERS_PER_IP,
        # small enough that one 100 MiB frame let in would fill it
        "kafka.max_queued_request_bytes": 16 * MIB,
        "authorization.superusers": USER,
    }
    process = GatewayProcess(tmp_path_factory.mktemp("before-login"), extra=set_flags(settings))
    process.start()
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", USER]
    command += ["--gateway-health", f"http://127.0.0.1:{process.metrics_port}"]
    subprocess.run(command, input=PASSWORD + "\n", text=True, check=True, cwd=REPO, timeout=60)
    yield process
    assert process.stop() == 0, process.log_tail()


def connect(gateway: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=10)


def call(sock: socket.socket, api: int, version: int, body: dict, correlation: int = 1) -> dict:
    sock.sendall(protocol.encode_request(api, version, correlation, "strangers", body))
    return protocol.decode_response(api, version, memoryview(recv_frame(sock)))


def log_in(sock: socket.socket) -> None:
    shake = call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert shake["error_code"] == ErrorCode.NONE, shake
    token = f"\x00{USER}\x00{PASSWORD}".encode()
    answer = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token}, 2)
    assert answer["error_code"] == ErrorCode.NONE, answer


def served_after_login(gateway: GatewayProcess) -> float:
    """Seconds a fresh client takes to log in and get a Metadata answer."""
    started = time.monotonic()
    with connect(gateway) as sock:
        call(sock, ApiKey.API_VERSIONS, 0, {})
        log_in(sock)
        call(sock, ApiKey.METADATA, 9, {"topics": [], "allow_auto_topic_creation": False}, 3)
    return time.monotonic() - started


def claim(size: int, api_key: int = ApiKey.API_VERSIONS) -> bytes:
    """A size prefix and the header's first bytes, and nothing of the rest."""
    return struct.pack(">ihhi", size, api_key, 0, 7)


def bad_input(gateway: GatewayProcess, reason: str) -> float:
    return gateway.metric("gateway_bad_input_total", protocol="kafka", reason=reason)


def test_size_prefixes_before_login_lock_nobody_out(gateway: GatewayProcess) -> None:
    refused = bad_input(gateway, "unauthenticated_frame_size")
    strangers = [connect(gateway) for _ in range(3)]
    try:
        for sock in strangers:
            sock.sendall(claim(100 * MIB))
        took = served_after_login(gateway)
        assert took < 2.0, f"a client waited {took:.2f} s behind three strangers"
        for sock in strangers:
            assert seconds_until_closed(sock, 10) < 1.5, "a 100 MiB frame before login"
    finally:
        for sock in strangers:
            sock.close()
    assert bad_input(gateway, "unauthenticated_frame_size") == refused + 3
    wait_until(
        lambda: "kafka.max_unauthenticated_frame_bytes" in gateway.log_tail(200),
        10,
        message="the refusal's log line",
    )


def test_a_large_api_versions_before_login_is_not_read(gateway: GatewayProcess) -> None:
    """A 20 MiB ApiVersions once got an answer; now it closes its connection unread."""
    with connect(gateway) as sock:
        body = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 1, -1) + b"\x00" * (20 * MIB)
        try:
            sock.sendall(struct.pack(">i", len(body)) + body)
        except OSError:
            pass  # closed while we were still sending
        with pytest.raises((ConnectionError, OSError)):
            recv_frame(sock)


def test_other_requests_before_login_are_refused_from_their_header(
    gateway: GatewayProcess,
) -> None:
    with connect(gateway) as sock:
        sock.sendall(claim(400 * 1024, ApiKey.METADATA))  # the body never comes
        assert seconds_until_closed(sock, 10) < 1.5


def test_a_connection_that_does_not_log_in_is_closed(gateway: GatewayProcess) -> None:
    timeouts = bad_input(gateway, "login_timeout")
    with connect(gateway) as sock:
        call(sock, ApiKey.API_VERSIONS, 0, {})
        took = seconds_until_closed(sock, 20)
    assert LOGIN_TIMEOUT * 0.9 <= took < LOGIN_TIMEOUT + 2, f"closed after {took:.2f} s"
    assert bad_input(gateway, "login_timeout") == timeouts + 1
    # a logged-in connection is not closed by the login deadline
    with connect(gateway) as sock:
        log_in(sock)
        time.sleep(LOGIN_TIMEOUT + 0.5)
        assert call(sock, ApiKey.API_VERSIONS, 0, {}, 5)["error_code"] == 0


def test_strangers_per_address_are_capped_and_logging_in_frees_a_place(
    gateway: GatewayProcess,
) -> None:
    def refused() -> float:
        return gateway.metric(
            "gateway_connections_refused_total",
            protocol="kafka",
            reason="max_unauthenticated_connections_per_ip",
        )

    before = refused()
    strangers = [connect(gateway) for _ in range(STRANGERS_PER_IP)]
    try:
        for number, sock in enumerate(strangers):
            call(sock, ApiKey.API_VERSIONS, 0, {}, number)
        with connect(gateway) as extra:
            assert seconds_until_closed(extra, 5) < 1.0, "one stranger too many stayed open"
        assert refused() == before + 1
        log_in(strangers[0])  # no longer a stranger: its place is free
        with connect(gateway) as fresh:
            assert call(fresh, ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    finally:
        for sock in strangers:
            sock.close()
