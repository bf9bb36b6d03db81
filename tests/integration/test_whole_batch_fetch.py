"""A produced batch becomes visible to fetches whole, in the `pulsar` entry format where each
record is a Pulsar message of its own (docs/offsets.md, "A batch is numbered whole"): while
batches of ten records stream in, pipelined on one connection, a fetch loop on another sees
the high watermark only ever at a multiple of ten, and every record set it gets ends at a
batch boundary."""

from __future__ import annotations

import socket
import threading
import time
import uuid

from harness.raw_kafka_socket import recv_frame
from harness.send_order import create_topic
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.record_batch import decode_batches, encode_batch

BATCH = 10
BATCHES = 600


def _produce_body(topic: str, number: int) -> dict:
    records = [(i, 1000, None, b"%d-%d" % (number, i), []) for i in range(BATCH)]
    return {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30_000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": 0, "records": bytes(encode_batch(0, records))}],
            }
        ],
    }


def _fetch_body(topic: str, offset: int) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 24,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 24,
                    }
                ],
            }
        ],
    }


def _produce_pipelined(port: int, topic: str) -> None:
    """Every batch in its own Produce, sent without waiting; the answers read meanwhile."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        answers = threading.Thread(target=lambda: [recv_frame(sock) for _ in range(BATCHES)])
        answers.start()
        for number in range(BATCHES):
            sock.sendall(protocol.encode_request(0, 7, number, "p", _produce_body(topic, number)))
        answers.join(60)


def test_fetches_never_see_part_of_a_batch(gateway) -> None:
    topic = f"whole-{uuid.uuid4().hex[:10]}"
    create_topic(gateway.bootstrap, topic, 1)
    producer = threading.Thread(target=_produce_pipelined, args=(gateway.kafka_port, topic))
    producer.start()
    watermarks: list[int] = []
    cut: list[int] = []
    offset = 0
    correlation = 0
    with socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=60) as sock:
        deadline = time.monotonic() + 90
        while offset < BATCH * BATCHES and time.monotonic() < deadline:
            correlation += 1
            sock.sendall(
                protocol.encode_request(1, 4, correlation, "f", _fetch_body(topic, offset))
            )
            answer = protocol.decode_response(1, 4, memoryview(recv_frame(sock)))
            partition = answer["responses"][0]["partitions"][0]
            assert partition["error_code"] == 0
            watermarks.append(partition["high_watermark"])
            records = [
                batch.base_offset + record.offset_delta
                for batch in decode_batches(bytes(partition["records"] or b""))
                for record in batch.records
            ]
            if records:
                assert records[0] == offset
                offset = records[-1] + 1
                if offset % BATCH:
                    cut.append(offset)
    producer.join(60)
    assert offset == BATCH * BATCHES
    inside = [mark for mark in watermarks if mark % BATCH]
    assert not inside, (
        f"{len(inside)} of {len(watermarks)} fetches ended inside a batch: {inside[:5]}"
    )
    assert not cut, f"record sets ended inside a batch at {cut[:5]}"
