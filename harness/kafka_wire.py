"""Raw Kafka requests to a gateway, for tests that must see an exact answer (an error code a
client library would retry away, or the time an answer took)."""

from __future__ import annotations

import socket
from typing import Any

from harness.raw_kafka_socket import recv_frame
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.record_batch import encode_batch

PRODUCE = 0
INIT_PRODUCER_ID = 22


def call(port: int, api_key: int, version: int, body: dict, timeout: float = 30) -> dict:
    """One request on a fresh connection; the decoded response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(protocol.encode_request(api_key, version, 1, "test", body))
        data = recv_frame(sock)
    return protocol.decode_response(api_key, version, memoryview(data))


def produce(
    port: int,
    topic: str,
    values: list[bytes],
    timeout_ms: int = 10000,
    socket_timeout: float = 30,
    **batch: Any,
) -> dict:
    """Produce `values` as one batch to partition 0 with acks=all (`batch`: producer_id,
    producer_epoch, base_sequence); the partition's response."""
    records = encode_batch(0, [(i, 1000, None, v, []) for i, v in enumerate(values)], **batch)
    response = call(
        port,
        PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": timeout_ms,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": bytes(records)}]}
            ],
        },
        timeout=socket_timeout,
    )
    return response["responses"][0]["partition_responses"][0]


def init_producer_id(port: int) -> tuple[int, int]:
    """A new idempotent producer's id and epoch."""
    response = call(
        port,
        INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": None,
            "transaction_timeout_ms": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert response["error_code"] == 0, response
    return response["producer_id"], response["producer_epoch"]
