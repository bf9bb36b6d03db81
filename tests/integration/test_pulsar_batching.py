"""`pulsar`-format partitions are written with Pulsar-side batching, and a batch never
opens a ledger.

Batching is what makes the default path affordable: one Pulsar entry per Kafka record cost
the broker about 40 us of CPU per record, a batched entry about 1 us (docs/backend.md,
"Throughput facts behind the hot paths"). But a pulsar-client reader that reads the first
message of a batch acknowledges the entry before it, and for entry 0 of a ledger that is
entry -1: pulsar-lite fails to convert it and drops the whole client connection, every
producer and reader on it (docs/backend.md, "A batch must not open a ledger"). So the
gateway sends the first message of a topic's ledger alone, and batches after it; also
after a broker restart, in case the topic's ledger changed with it.
"""

from __future__ import annotations

import pulsar
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import GatewayProcess

TOPIC = "batched"
PULSAR_TOPIC = f"persistent://public/default/{TOPIC}-partition-0"
ROUNDS = 2
RECORDS = 3000
DEFECT = "out of range integral type conversion"


def _produce(bootstrap: str, round_number: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce(TOPIC, f"{round_number}-{i}".encode(), partition=0)
    assert producer.flush(60) == 0


def _ids(broker_port: int, expected: int) -> list[tuple[int, int, int]]:
    client = pulsar.Client(f"pulsar://127.0.0.1:{broker_port}", operation_timeout_seconds=10)
    try:
        reader = client.create_reader(PULSAR_TOPIC, pulsar.MessageId.earliest)
        ids: list[tuple[int, int, int]] = []
        while len(ids) < expected:
            mid = reader.read_next(10_000).message_id()
            key = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
            if not ids or key > ids[-1]:  # pulsar-lite readers may replay (docs/backend.md)
                ids.append(key)
        return ids
    finally:
        client.close()


def test_records_are_batched_and_no_batch_opens_a_ledger(tmp_path) -> None:
    gw = GatewayProcess(tmp_path / "gw").start()
    try:
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1)])[TOPIC].result(30)
        for round_number in range(ROUNDS):
            if round_number:
                gw.kill_broker()  # a restarted broker may open a new ledger
            _produce(gw.bootstrap, round_number)
        ids = _ids(gw.broker_port, ROUNDS * RECORDS)
        for ledger in sorted({ledger for ledger, _, _ in ids}):
            first = min(key for key in ids if key[0] == ledger)
            assert first[1:] == (0, -1), f"ledger {ledger} opens with {first}, not a lone entry"
        batched = [key for key in ids if key[2] >= 0]
        assert len(batched) > RECORDS, "the records were not batched"
        assert DEFECT not in gw.broker_log()
    finally:
        gw.stop()
