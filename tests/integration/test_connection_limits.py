"""Half-sent frames, idle sockets and socket floods are bounded (issue 10, item 12).

A dedicated gateway with short timeouts and a low per-IP limit, spoken to with raw sockets
on loopback. Every test client here is 127.0.0.1, so the per-IP limit is the thing under
test, not something to work around: the bounded numbers (a few dozen sockets, seconds of
timeouts) stand in for the defaults (1000 per IP, 30 s and 10 min).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pika
import pytest
from pamqp import commands

from harness.gateway_process import GatewayProcess, set_flags
from harness.raw_amqp_socket import open_connection
from harness.raw_kafka_socket import recv_frame, seconds_until_closed
from harness.waiting import wait_until
from pulsar_gateway.handlers.amqp.frames import PROTOCOL_HEADER, encode_method
from pulsar_gateway.kafka_codec import protocol

FRAME_TIMEOUT = 1.0
IDLE = 4.0
HANDSHAKE = 2.0
PER_IP = 24


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    settings = {
        "kafka.frame_timeout_seconds": FRAME_TIMEOUT,
        "kafka.connection_idle_seconds": IDLE,
        "kafka.max_connections_per_ip": PER_IP,
        "amqp.frame_timeout_seconds": FRAME_TIMEOUT,
        "amqp.handshake_timeout_seconds": HANDSHAKE,
        "amqp.max_connections_per_ip": PER_IP,
    }
    extra = set_flags(settings)
    process = GatewayProcess(tmp_path_factory.mktemp("guarded"), extra=extra)
    process.start()
    yield process
    process.stop()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def call(sock: socket.socket, api: int, version: int, body: dict, correlation: int = 1) -> dict:
    """One request on ``sock`` and its decoded answer."""
    sock.sendall(protocol.encode_request(api, version, correlation, "limits", body))
    return protocol.decode_response(api, version, memoryview(recv_frame(sock)))


def api_versions(sock: socket.socket, correlation: int = 1) -> dict:
    return call(sock, 18, 0, {}, correlation)


@pytest.mark.parametrize(
    "partial",
    [
        pytest.param(b"\x00\x00", id="half a size prefix"),
        pytest.param(struct.pack(">i", 100) + struct.pack(">hhih", 18, 0, 1, -1), id="half a body"),
    ],
)
def test_kafka_half_sent_frame_is_closed_after_the_frame_timeout(
    guarded: GatewayProcess, partial: bytes
) -> None:
    stalled = guarded.metric("gateway_bad_input_total", protocol="kafka", reason="frame_timeout")
    sock = connect(guarded.kafka_port)
    api_versions(sock)
    sock.sendall(partial)
    took = seconds_until_closed(sock)
    sock.close()
    assert FRAME_TIMEOUT * 0.9 <= took < FRAME_TIMEOUT + 3, f"closed after {took:.2f} s"
    assert (
        guarded.metric("gateway_bad_input_total", protocol="kafka", reason="frame_timeout")
        == stalled + 1
    )
    wait_until(lambda: "frame stalled" in guarded.log_tail(100), 10, message="the log line")


def test_kafka_idle_connection_is_closed_but_a_long_request_is_not_idleness(
    guarded: GatewayProcess, topic_name: str
) -> None:
    idle = connect(guarded.kafka_port)
    api_versions(idle)
    took = seconds_until_closed(idle)
    idle.close()
    assert IDLE * 0.9 <= took < IDLE + 3, f"idle connection closed after {took:.2f} s"

    # a request outstanding for longer than the idle timeout keeps its connection
    busy = connect(guarded.kafka_port)
    topic = {"name": topic_name, "num_partitions": 1, "replication_factor": 1}
    created = call(busy, 19, 5, {"topics": [topic], "timeout_ms": 10000})
    assert created["topics"][0]["error_code"] == 0, created
    started = time.monotonic()
    slow_answer = _long_poll_fetch(busy, topic_name, wait_ms=int((IDLE + 1.5) * 1000))
    assert time.monotonic() - started >= IDLE + 1
    assert slow_answer["error_code"] == 0
    assert api_versions(busy, 3)["error_code"] == 0, "the busy connection was closed as idle"
    busy.close()


def _long_poll_fetch(sock: socket.socket, topic: str, wait_ms: int) -> dict:
    """A Fetch at the end of an empty topic, which the gateway holds for its max wait."""
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}
    body = {
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": 1024,
        "isolation_level": 0,
        "session_id": 0,
        "topics": [{"topic": topic, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return call(sock, 1, 12, body, 2)


def test_kafka_idle_sockets_over_the_per_ip_limit_are_refused(guarded: GatewayProcess) -> None:
    held = [connect(guarded.kafka_port) for _ in range(PER_IP)]
    try:
        # the gateway counts a connection once it accepted it: one round trip each proves it
        for number, sock in enumerate(held):
            api_versions(sock, number)
        _refuses_five_more(guarded, "kafka", guarded.kafka_port)
        wait_until(
            lambda: "kafka.max_connections_per_ip" in guarded.log_tail(100),
            10,
            message="the refusal's log line",
        )
        # a slot freed is a slot a real client gets
        held.pop().close()
        client = wait_until(lambda: _served(guarded.kafka_port), 10, message="a free slot")
        client.close()
    finally:
        for sock in held:
            sock.close()


def _refuses_five_more(gateway: GatewayProcess, protocol_name: str, port: int) -> None:
    """With the per-IP limit reached, five more sockets are closed at once, and counted."""

    def refused() -> float:
        return gateway.metric(
            "gateway_connections_refused_total",
            protocol=protocol_name,
            reason="max_connections_per_ip",
        )

    before = refused()
    for _ in range(5):
        extra = connect(port)
        assert seconds_until_closed(extra, 10) < 1.5, "a socket over the limit stayed open"
        extra.close()
    assert refused() == before + 5


def _served(port: int) -> socket.socket | None:
    sock = connect(port)
    try:
        api_versions(sock)
        return sock
    except ConnectionError:
        sock.close()
        return None


def _bad_input(gateway: GatewayProcess, reason: str) -> float:
    return gateway.metric("gateway_bad_input_total", protocol="amqp", reason=reason)


def test_amqp_half_sent_frame_is_closed_even_with_heartbeats_off(guarded: GatewayProcess) -> None:
    stalled = _bad_input(guarded, "frame_timeout")
    sock = open_connection(guarded.amqp_port, heartbeat=0)
    # heartbeats off and nothing sent: an idle connection stays open, as in RabbitMQ
    sock.settimeout(FRAME_TIMEOUT * 2)
    with pytest.raises(TimeoutError):
        sock.recv(1)
    open_channel = encode_method(1, commands.Channel.Open())
    sock.sendall(open_channel[: len(open_channel) - 3])
    took = seconds_until_closed(sock)
    sock.close()
    assert FRAME_TIMEOUT * 0.9 <= took < FRAME_TIMEOUT + 3, f"closed after {took:.2f} s"
    assert _bad_input(guarded, "frame_timeout") == stalled + 1
    wait_until(lambda: "a frame stalled" in guarded.log_tail(100), 10, message="the log line")


@pytest.mark.parametrize(
    "sent", [pytest.param(b"", id="nothing"), pytest.param(PROTOCOL_HEADER, id="header only")]
)
def test_amqp_handshake_that_never_completes_is_closed(guarded: GatewayProcess, sent) -> None:
    timeouts = _bad_input(guarded, "handshake_timeout")
    sock = socket.create_connection(("127.0.0.1", guarded.amqp_port), timeout=30)
    sock.sendall(sent)
    took = seconds_until_closed(sock)
    sock.close()
    assert HANDSHAKE * 0.9 <= took < HANDSHAKE + 3, f"closed after {took:.2f} s"
    assert _bad_input(guarded, "handshake_timeout") == timeouts + 1


def test_amqp_sockets_over_the_per_ip_limit_are_refused(guarded: GatewayProcess) -> None:
    held = []
    try:
        for _ in range(PER_IP):
            # open (heartbeats off): no handshake or frame timeout closes them meanwhile
            held.append(open_connection(guarded.amqp_port, heartbeat=0))
        _refuses_five_more(guarded, "amqp", guarded.amqp_port)
        held.pop().close()
        parameters = pika.URLParameters(guarded.amqp_url)
        client = wait_until(
            lambda: _pika_connects(parameters), 10, message="a real client in the freed slot"
        )
        client.close()
    finally:
        for sock in held:
            sock.close()


def _pika_connects(parameters: pika.URLParameters) -> pika.BlockingConnection | None:
    try:
        return pika.BlockingConnection(parameters)
    except pika.exceptions.AMQPConnectionError:
        return None
