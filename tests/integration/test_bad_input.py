"""Malformed Kafka frames: the connection is refused or closed with a log line, the
process lives, and other connections never notice."""

from __future__ import annotations

import random
import socket
import struct

import pytest
from confluent_kafka import Producer

from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol


def _connect(gateway) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=5)
    return sock


def _closed(sock: socket.socket) -> bool:
    try:
        sock.settimeout(5)
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def _api_versions_ok(gateway) -> None:
    sock = _connect(gateway)
    sock.sendall(protocol.encode_request(18, 0, 99, "probe", {}))
    size = struct.unpack(">i", sock.recv(4))[0]
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    response = protocol.decode_response(18, 0, memoryview(data))
    assert response["error_code"] == 0
    sock.close()


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


CASES = {
    # a complete frame of noise (a random size prefix would often promise more bytes,
    # and waiting for them is right); seeded, so a failure reproduces
    "random bytes": lambda: _frame(random.Random(20261123).randbytes(4092)),
    "frame over the limit": lambda: struct.pack(">i", 2_000_000_000) + b"x" * 100,
    "negative size": lambda: struct.pack(">i", -5),
    "unknown api key": lambda: _frame(struct.pack(">hhih", 999, 0, 1, -1)),
    "unsupported version": lambda: _frame(struct.pack(">hhih", 3, 999, 1, -1)),
    "truncated body": lambda: protocol.encode_request(3, 1, 7, "c", {"topics": [{"name": "abc"}]})[
        :-2
    ],
    "garbage body": lambda: _frame(struct.pack(">hhih", 0, 9, 1, -1) + b"\xff" * 64),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_frame_closes_only_its_connection(gateway, case) -> None:
    bystander = _connect(gateway)
    bad = _connect(gateway)
    payload = CASES[case]()
    if case == "truncated body":
        # the size prefix promises more than is sent: the gateway waits, then the client gives up
        bad.sendall(payload)
        bad.shutdown(socket.SHUT_WR)
    else:
        bad.sendall(payload)
    assert _closed(bad), f"{case}: connection stayed open"
    # the process lives and the bystander is served
    bystander.sendall(protocol.encode_request(18, 0, 5, "bystander", {}))
    assert len(bystander.recv(4)) == 4
    bystander.close()
    _api_versions_ok(gateway)
    assert gateway.process.poll() is None


def test_bad_frames_are_logged(gateway) -> None:
    bad = _connect(gateway)
    bad.sendall(_frame(struct.pack(">hhih", 999, 0, 1, -1)))
    assert _closed(bad)
    wait_until(
        lambda: "unsupported API" in gateway.log_tail(400),
        10,
        message="the refused frame to be logged",
    )


def test_unsupported_api_versions_version_gets_v0_answer(gateway) -> None:
    sock = _connect(gateway)
    sock.sendall(_frame(struct.pack(">hhih", 18, 99, 42, -1)))
    size = struct.unpack(">i", sock.recv(4))[0]
    data = sock.recv(size)
    response = protocol.decode_response(18, 0, memoryview(data))
    assert response["error_code"] == 35  # UNSUPPORTED_VERSION
    assert any(item["api_key"] == 0 for item in response["api_keys"])


def test_corrupt_batch_gets_corrupt_message(gateway, topic_name) -> None:
    from pulsar_gateway.kafka_codec.record_batch import encode_batch

    batch = bytearray(encode_batch(0, [(0, 1000, b"k", b"v", [])]))
    batch[-1] ^= 0xFF  # break the CRC
    request = protocol.encode_request(
        0,
        9,
        3,
        "c",
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [
                {"name": topic_name, "partition_data": [{"index": 0, "records": bytes(batch)}]}
            ],
        },
    )
    sock = _connect(gateway)
    sock.sendall(request)
    size = struct.unpack(">i", sock.recv(4))[0]
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    response = protocol.decode_response(0, 9, memoryview(data))
    partition = response["responses"][0]["partition_responses"][0]
    assert partition["error_code"] == 2  # CORRUPT_MESSAGE
    # and a good producer right after is fine
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(topic_name, b"fine")
    assert producer.flush(30) == 0
