"""Metrics and health endpoints, and Fetch's long poll and byte limits, on real sockets."""

from __future__ import annotations

import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Producer

from harness.gateway_process import GatewayProcess
from harness.kafka_wire import produce
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol


def _call(gateway, api_key: int, version: int, body: dict) -> dict:
    with socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=30) as sock:
        sock.sendall(protocol.encode_request(api_key, version, 1, "test", body))
        size = struct.unpack(">i", sock.recv(4))[0]
        data = b""
        while len(data) < size:
            data += sock.recv(size - len(data))
    return protocol.decode_response(api_key, version, memoryview(data))


def _fetch(
    topic: str, offset: int, max_wait: int, min_bytes: int, max_bytes: int, partition_max: int
) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": partition_max,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def test_metrics_count_records_bytes_requests(gateway, topic_name) -> None:
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    for _ in range(25):
        producer.produce(topic_name, b"x" * 10)
    assert producer.flush(30) == 0
    text = gateway.metrics()
    records = [
        line
        for line in text.splitlines()
        if line.startswith("gateway_records_in_total") and topic_name in line
    ]
    assert records and float(records[0].split()[-1]) == 25.0
    assert any(
        line.startswith("gateway_bytes_in_total")
        and topic_name in line
        and float(line.split()[-1]) == 250.0
        for line in text.splitlines()
    )
    assert 'gateway_requests_total{api="Produce",error="none",protocol="kafka"}' in text
    assert "gateway_open_connections" in text
    health = gateway.health()
    assert health["ok"] and health["embedded"] and health["listeners"]["kafka"]


def test_fetch_long_poll_waits_for_data_and_honours_max_bytes(gateway, topic_name) -> None:
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(topic_name, b"first")
    assert producer.flush(30) == 0

    # at the end of the log, a fetch waits up to max_wait for min_bytes ...
    started = time.monotonic()
    empty = _call(gateway, 1, 12, _fetch(topic_name, 1, 700, 1, 1 << 20, 1 << 20))
    waited = time.monotonic() - started
    part = empty["responses"][0]["partitions"][0]
    assert part["high_watermark"] == 1 and len(part["records"]) == 0
    assert waited >= 0.6

    # ... and returns as soon as data arrives: produced once the gateway holds the fetch
    accepted = gateway.metric("gateway_connections_total", protocol="kafka")
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        waiting = pool.submit(
            _call, gateway, 1, 12, _fetch(topic_name, 1, 20000, 1, 1 << 20, 1 << 20)
        )
        wait_until(
            lambda: gateway.metric("gateway_connections_total", protocol="kafka") > accepted,
            10,
            message="the gateway to take the fetch's connection",
        )
        assert not waiting.done(), "the fetch returned before there was data"
        late = Producer({"bootstrap.servers": gateway.bootstrap})
        late.produce(topic_name, b"second")
        assert late.flush(30) == 0
        woke = waiting.result(30)
    assert time.monotonic() - started < 10
    assert b"second" in bytes(woke["responses"][0]["partitions"][0]["records"])

    # partition_max_bytes bounds the answer, but the first record always comes back
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 50})
    for _ in range(200):
        producer.produce(topic_name, b"y" * 100)
    assert producer.flush(30) == 0
    small = _call(gateway, 1, 12, _fetch(topic_name, 0, 0, 1, 1 << 20, 1000))
    big = _call(gateway, 1, 12, _fetch(topic_name, 0, 0, 1, 1 << 20, 1 << 20))
    small_size = len(small["responses"][0]["partitions"][0]["records"])
    big_size = len(big["responses"][0]["partitions"][0]["records"])
    assert 0 < small_size <= 1300 and big_size > 20000
    tiny = _call(gateway, 1, 12, _fetch(topic_name, 2, 0, 1, 1, 1))
    assert len(tiny["responses"][0]["partitions"][0]["records"]) > 0


def test_fetch_out_of_range_and_unknown_topic(gateway, topic_name) -> None:
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(topic_name, b"a")
    assert producer.flush(30) == 0
    beyond = _call(gateway, 1, 12, _fetch(topic_name, 99, 0, 1, 1 << 20, 1 << 20))
    assert beyond["responses"][0]["partitions"][0]["error_code"] == 1  # OFFSET_OUT_OF_RANGE
    missing = _call(gateway, 1, 12, _fetch("no-such-topic-x", 0, 0, 1, 1 << 20, 1 << 20))
    assert missing["responses"][0]["partitions"][0]["error_code"] == 3


def test_open_partitions_gauge_counts_open_partition_logs(gateway, topic_name) -> None:
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(topic_name, b"x")
    assert producer.flush(30) == 0
    gauge = [
        float(line.split()[-1])
        for line in gateway.metrics().splitlines()
        if line.startswith("gateway_open_partitions ")
    ]
    assert gauge and gauge[0] >= 1 and gauge[0] == gateway.health()["open_partitions"]


def test_a_partition_closes_when_its_long_poll_was_cut_off(tmp_path, topic_name) -> None:
    """A client that disconnects while its Fetch waits for data (a consumer closing at the
    end of a partition) must not leave the wait behind: a pending waiter counts as a request
    and the idle sweep never closes such a partition, so its reader, producer and tail cache
    stayed open for the gateway's lifetime."""
    gw = GatewayProcess(tmp_path / "gw", extra=["--set", "kafka.idle_close_seconds=2"]).start()
    try:
        assert produce(gw.kafka_port, topic_name, [b"only"])["error_code"] == 0
        with socket.create_connection(("127.0.0.1", gw.kafka_port), timeout=30) as sock:
            body = _fetch(topic_name, 1, 60_000, 1, 1 << 20, 1 << 20)
            sock.sendall(protocol.encode_request(1, 12, 1, "test", body))
            # the Fetch is read and unanswered: it waits for a record that never comes
            wait_until(
                lambda: gw.metric("gateway_queued_request_bytes", protocol="kafka") > 0,
                30,
                0.1,
                "the Fetch to wait",
            )
        wait_until(
            lambda: gw.health()["open_partitions"] == 0,
            30,  # well inside the Fetch's 60 s wait: only the cut can have ended it
            0.5,
            message=lambda: f"the partition to close ({gw.health()['open_partitions']} open)",
        )
    finally:
        gw.stop()
