"""`/metrics` and the log under bad input (issue 10, item 18).

Refused Produce batches and bad AMQP input are counted, unknown Kafka API keys share one
series, and a flood of bad requests does not flood the log: each per-request warning passes
a few times per interval (the listener's LogLimiter), then says how many it held back.
"""

from __future__ import annotations

import socket
import struct

from harness.gateway_process import GatewayProcess
from harness.raw_amqp_socket import open_connection
from harness.raw_kafka_socket import frame, recv_frame, seconds_until_closed
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.record_batch import encode_batch

FLOOD = 40
BURST = 10  # LogLimiter's default burst per message and interval


def _connect(gateway: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=30)


def _log_count(gateway: GatewayProcess, text: str) -> int:
    return gateway.log_path.read_text(errors="replace").count(text)


def _corrupt_produce(topic: str, correlation: int) -> bytes:
    batch = bytearray(encode_batch(0, [(0, 1000, b"k", b"v", [])]))
    batch[-1] ^= 0xFF  # break the CRC
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}],
    }
    return protocol.encode_request(0, 9, correlation, "c", body)


def test_rejected_produce_batches_are_counted_and_their_warning_is_rate_limited(
    gateway: GatewayProcess, topic_name: str
) -> None:
    rejected = gateway.metric("gateway_produce_rejected_total", error="CORRUPT_MESSAGE")
    warned = _log_count(gateway, "rejected produce to")
    sock = _connect(gateway)
    for correlation in range(FLOOD):
        sock.sendall(_corrupt_produce(topic_name, correlation))
        response = protocol.decode_response(0, 9, memoryview(recv_frame(sock)))
        assert response["responses"][0]["partition_responses"][0]["error_code"] == 2
    sock.close()
    assert (
        gateway.metric("gateway_produce_rejected_total", error="CORRUPT_MESSAGE")
        == rejected + FLOOD
    )
    # at most a burst of the per-request warning, whatever the flood
    assert 0 < _log_count(gateway, "rejected produce to") - warned <= BURST


def test_unknown_api_keys_share_one_series_and_their_warnings_are_rate_limited(
    gateway: GatewayProcess,
) -> None:
    warned = _log_count(gateway, "unsupported API")
    for key in range(1000, 1000 + FLOOD):
        sock = _connect(gateway)
        sock.sendall(frame(struct.pack(">hhih", key, 0, 1, -1)))
        assert seconds_until_closed(sock) < 10
        sock.close()
    wait_until(
        lambda: _log_count(gateway, "unsupported API") > warned, 10, message="a logged refusal"
    )
    assert _log_count(gateway, "unsupported API") - warned <= BURST
    apis = {
        line.split('api="', 1)[1].split('"', 1)[0]
        for line in gateway.metrics().splitlines()
        if line.startswith("gateway_requests_total{")
    }
    assert "unknown" in apis
    assert apis <= set(protocol.API_NAMES.values()) | {"unknown"}, apis


def _amqp_bad_input(gateway: GatewayProcess, reason: str) -> float:
    return gateway.metric("gateway_bad_input_total", protocol="amqp", reason=reason)


def test_bad_amqp_input_is_counted(gateway: GatewayProcess) -> None:
    headers = _amqp_bad_input(gateway, "protocol_header")
    oversized = _amqp_bad_input(gateway, "frame_error")
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", gateway.amqp_port), timeout=30)
        sock.sendall(b"HTTP/1.1\r\n")
        assert seconds_until_closed(sock) < 10
        sock.close()
    sock = open_connection(gateway.amqp_port)
    # a frame header announcing a payload over frame_max (131072)
    sock.sendall(struct.pack(">BHI", 1, 1, 10_000_000))
    assert seconds_until_closed(sock) < 10
    sock.close()
    assert _amqp_bad_input(gateway, "protocol_header") == headers + 3
    assert _amqp_bad_input(gateway, "frame_error") == oversized + 1
