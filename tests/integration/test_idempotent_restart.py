"""Idempotent producers across a gateway kill -9 (issue 10, item 3): a batch stored before
the crash and retried after the restart is recognised, so every record is written once.

The state comes back from the log itself (stamped batches, replayed from the last offset
checkpoint), for both entry formats."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, Producer

from harness import kafka_wire
from harness.gateway_process import GatewayProcess
from harness.partition_records import read_to_end
from harness.waiting import wait_until

OUT_OF_ORDER_SEQUENCE_NUMBER = 45


@pytest.mark.parametrize("entry_format", ["pulsar", "kafka"])
def test_a_batch_retried_after_a_restart_is_stored_once(tmp_path, topic_name, entry_format) -> None:
    """The exact retries a client makes: the last batch and an older one of its last five,
    after a kill -9 between their first attempt and the retry."""
    gw = GatewayProcess(
        tmp_path / "gw",
        extra=[
            "--set",
            f"kafka.entry_format={entry_format}",
            "--set",
            "kafka.index_interval=10",  # the state comes from a checkpoint plus a replay
        ],
    ).start()
    try:
        pid, epoch = kafka_wire.init_producer_id(gw.kafka_port)

        def produce(sequence: int, values: list[bytes]) -> dict:
            return kafka_wire.produce(
                gw.kafka_port,
                topic_name,
                values,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=sequence,
            )

        batches = [[b"%02d-%d" % (n, i) for i in range(3)] for n in range(12)]
        bases = [produce(3 * n, values)["base_offset"] for n, values in enumerate(batches)]
        assert bases == [3 * n for n in range(12)]
        gw.kill()
        gw.start()
        for n in (11, 8):  # the last batch, and one of the five before
            again = produce(3 * n, batches[n])
            assert again["error_code"] == 0 and again["base_offset"] == 3 * n, again
        assert produce(40, [b"gap"])["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(36, [b"next"])["base_offset"] == 36
        rows = read_to_end(gw.bootstrap, topic_name)
        expected = [value for values in batches for value in values] + [b"next"]
        assert rows == list(enumerate(expected))
    finally:
        gw.stop()


def test_librdkafka_retries_across_a_gateway_kill_write_once(tmp_path, topic_name) -> None:
    """An idempotent confluent-kafka producer writing while the gateway is killed (kill -9,
    with its broker) and restarted, twice: every record is in the log exactly once, in order."""
    gw = GatewayProcess(tmp_path / "gw").start()
    total = 40_000
    acked: list[tuple[int, bytes]] = []
    failed: list[KafkaError] = []
    done = threading.Event()

    def write() -> None:
        producer = Producer(
            {
                "bootstrap.servers": gw.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "batch.num.messages": 200,
                "message.timeout.ms": 180000,
            }
        )

        def report(err: KafkaError | None, msg: object) -> None:
            if err is None:
                acked.append((msg.offset(), msg.value()))
            else:
                failed.append(err)

        for i in range(total):
            while True:
                try:
                    producer.produce(topic_name, f"{i:08d}".encode(), on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 50 == 0:
                producer.poll(0.001)  # a steady stream: batches in flight when the kill comes
        producer.flush(180)
        done.set()

    writer = threading.Thread(target=write, daemon=True)
    try:
        writer.start()
        for kill in (1, 2):
            wait_until(lambda k=kill: len(acked) >= k * total // 4, 120, message="records acked")
            gw.kill()
            gw.start()
        assert done.wait(240), f"{len(acked)} of {total} acked"
        assert failed == [], failed[:3]
        rows = read_to_end(gw.bootstrap, topic_name)
        values = [value for _, value in rows]
        assert len(values) == len(set(values)), (
            f"{len(values) - len(set(values))} records stored twice"
        )
        assert values == [f"{i:08d}".encode() for i in range(total)]
        assert sorted(acked) == rows  # each at the offset its acknowledgement named
    finally:
        gw.stop()
