"""Client quotas on a real gateway (docs/quotas.md): set with AlterClientQuotas, kept across
a restart, enforced by throttling: confluent-kafka sees throttle events and delivers every
record, another client id is not throttled, and a muted connection's next answer waits."""

from __future__ import annotations

import socket
import time
import uuid

from confluent_kafka import Producer

from harness import kafka_wire
from harness.gateway_process import GatewayProcess
from harness.raw_kafka_socket import recv_frame
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.record_batch import encode_batch

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49


def set_quota(port: int, client_id: str, key: str, value: float | None) -> int:
    body = {
        "entries": [
            {
                "entity": [{"entity_type": "client-id", "entity_name": client_id}],
                "ops": [{"key": key, "value": value or 0.0, "remove": value is None}],
            }
        ],
        "validate_only": False,
    }
    return kafka_wire.call(port, ALTER_CLIENT_QUOTAS, 1, body)["entries"][0]["error_code"]


def quotas_of(port: int) -> list[dict]:
    body = {"components": [{"entity_type": "client-id", "match_type": 2, "match": None}]}
    return kafka_wire.call(port, DESCRIBE_CLIENT_QUOTAS, 1, {**body, "strict": False})["entries"]


def produce_all(bootstrap: str, topic: str, client_id: str, count: int) -> tuple[int, list]:
    """(records delivered, throttle times reported) for `count` records of 1 kB."""
    throttles: list[float] = []
    delivered = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": "all",
            "linger.ms": 5,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    for i in range(count):
        producer.produce(
            topic, b"%05d" % i + b"x" * 1000, on_delivery=lambda e, m: delivered.append(e)
        )
        producer.poll(0)
    producer.flush(120)
    producer.poll(0.5)  # throttle events come through poll
    assert all(error is None for error in delivered), delivered[:3]
    return len(delivered), throttles


def test_a_producer_over_its_quota_is_throttled_and_loses_nothing(tmp_path) -> None:
    gw = GatewayProcess(tmp_path / "gw").start()
    try:
        topic = f"quota-{uuid.uuid4().hex[:6]}"
        assert set_quota(gw.kafka_port, "slow", "producer_byte_rate", 20_000) == 0
        assert set_quota(gw.kafka_port, "slow", "request_percentage", 50) != 0  # not enforced
        count, throttles = produce_all(gw.bootstrap, topic, "slow", 400)
        assert count == 400
        assert throttles and max(throttles) > 0, "the gateway never said to back off"
        count, free = produce_all(gw.bootstrap, topic, "fast", 400)
        assert count == 400 and not free, free

        gw.stop()
        gw.start()
        assert quotas_of(gw.kafka_port) == [
            {
                "entity": [{"entity_type": "client-id", "entity_name": "slow"}],
                "values": [{"key": "producer_byte_rate", "value": 20000.0}],
            }
        ]
        assert set_quota(gw.kafka_port, "slow", "producer_byte_rate", None) == 0
        assert quotas_of(gw.kafka_port) == []
    finally:
        gw.stop()


def test_a_muted_connection_is_read_again_only_after_its_throttle_time(tmp_path) -> None:
    """KIP-219: the answer says how long to back off, and the gateway reads nothing more
    from the connection for that long, whether or not the client listens."""
    gw = GatewayProcess(tmp_path / "gw").start()
    try:
        topic = f"muted-{uuid.uuid4().hex[:6]}"
        assert set_quota(gw.kafka_port, "rude", "producer_byte_rate", 1_000) == 0
        batch = encode_batch(0, [(0, 1000, None, b"y" * 20_000, [])])
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        }
        with socket.create_connection(("127.0.0.1", gw.kafka_port), timeout=60) as sock:
            sock.sendall(protocol.encode_request(0, 9, 1, "rude", body))
            first = protocol.decode_response(0, 9, memoryview(recv_frame(sock)))
            answered = time.monotonic()
            throttle = first["throttle_time_ms"]
            assert throttle > 1000, first  # 20 kB against 1 kB/s
            sock.sendall(protocol.encode_request(0, 9, 2, "rude", body))
            second = protocol.decode_response(0, 9, memoryview(recv_frame(sock)))
            waited = time.monotonic() - answered
        assert second["responses"][0]["partition_responses"][0]["error_code"] == 0
        assert waited >= throttle / 1000 - 0.2, (waited, throttle)
    finally:
        gw.stop()
