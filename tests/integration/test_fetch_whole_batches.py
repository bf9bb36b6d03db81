"""A fetch never returns part of a batch (docs/offsets.md, "A batch is numbered whole"), also
when its byte limit falls inside one and the records come from storage below the tail cache:
in the `pulsar` entry format a produced batch is one Pulsar message per record, and a read
cut by bytes used to stop wherever the limit fell."""

from __future__ import annotations

import socket
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import GatewayProcess
from harness.raw_kafka_socket import recv_frame
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.record_batch import decode_batches, encode_batch
from tests.unit.test_fetch_limits import fetch_body

PRODUCE, FETCH = 0, 1
SIZES = [1, 7, 23, 2, 40, 5, 13, 31, 3, 17]  # records per produced batch
VALUE = b"v" * 300


def _produce(sock: socket.socket, topic: str) -> None:
    first = 0
    for number, size in enumerate(SIZES):
        records = [(i, 1_700_000_000_000, b"k", VALUE, []) for i in range(size)]
        body = {
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [{"index": 0, "records": bytes(encode_batch(0, records))}],
                }
            ],
        }
        sock.sendall(protocol.encode_request(PRODUCE, 9, number, "t", body))
        answer = protocol.decode_response(PRODUCE, 9, memoryview(recv_frame(sock)))
        partition = answer["responses"][0]["partition_responses"][0]
        assert (partition["error_code"], partition["base_offset"]) == (0, first)
        first += size


def _walk(sock: socket.socket, topic: str, offset: int, partition_max: int) -> list[int]:
    """Where each Fetch answer from `offset` on ends."""
    ends = []
    while offset < sum(SIZES):
        body = fetch_body([(topic, 0, offset, partition_max)], max_bytes=52_428_800)
        sock.sendall(protocol.encode_request(FETCH, 12, len(ends), "t", body))
        answer = protocol.decode_response(FETCH, 12, memoryview(recv_frame(sock)))
        batches = decode_batches(bytes(answer["responses"][0]["partitions"][0]["records"] or b""))
        assert batches, f"no records at {offset}"
        offset = batches[-1].base_offset + batches[-1].last_offset_delta + 1
        ends.append(offset)
    return ends


def test_byte_limited_fetches_from_storage_stop_between_batches(tmp_path: Path, topic_name) -> None:
    settings = ["--set", "kafka.tail_cache_records=5"]  # reads below it come from storage
    gateway = GatewayProcess(tmp_path / "gw", extra=settings).start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
        boundaries = {sum(SIZES[: i + 1]) for i in range(len(SIZES))}
        with socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=30) as sock:
            _produce(sock, topic_name)
            for start, partition_max in [(0, 2000), (0, 700), (3, 5000), (40, 1)]:
                ends = _walk(sock, topic_name, start, partition_max)
                assert set(ends) <= boundaries, (start, partition_max, ends)
        gateway.stop()
        gateway.start()  # every read now starts in storage
        with socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=30) as sock:
            ends = _walk(sock, topic_name, 0, 2000)
        assert set(ends) <= boundaries, ends
    finally:
        gateway.stop()
