"""Nothing acknowledged is lost: 100k records with acks=all while the embedded broker is
killed with SIGKILL mid-stream and restarted by the gateway.

The producer is idempotent, which is how a Kafka application asks for retries that keep
order and write once (without it, Kafka itself may reorder or duplicate on retry)."""

from __future__ import annotations

import os
import signal
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until

TOTAL = 100_000


def test_acknowledged_records_survive_broker_kill(tmp_path, topic_name) -> None:
    gw = GatewayProcess(tmp_path / "gw").start()
    try:
        producer = Producer(
            {
                "bootstrap.servers": gw.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "retries": 1000000,
            }
        )
        acked: list[tuple[int, bytes]] = []
        failed = []

        def report(err, msg) -> None:
            if err is None:
                acked.append((msg.offset(), msg.value()))
            else:
                failed.append(err)

        killed_after: list[int] = []  # acknowledgements when the broker was killed

        def kill_once_a_tenth_is_acked() -> None:
            if not killed_after and len(acked) >= TOTAL // 10:
                killed_after.append(len(acked))
                os.kill(gw.broker_pid(), signal.SIGKILL)

        for i in range(TOTAL):
            while True:
                try:
                    producer.produce(topic_name, f"{i:08d}".encode(), on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            kill_once_a_tenth_is_acked()

        def flushed() -> bool:
            producer.poll(0.1)
            kill_once_a_tenth_is_acked()
            return len(producer) == 0

        wait_until(flushed, 180, 0, message=lambda: f"the producer to flush ({len(acked)} acked)")
        assert killed_after and killed_after[0] < TOTAL, "the broker was not killed mid-stream"
        assert gw.health()["broker_restarts"] >= 1, "the gateway did not see the broker die"

        consumer = Consumer(
            {
                "bootstrap.servers": gw.bootstrap,
                "group.id": "d",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        fetched: list[tuple[int, bytes]] = []
        deadline = time.time() + 120
        while time.time() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:
                    break
                continue
            fetched.append((msg.offset(), msg.value()))
        consumer.close()
        assert [offset for offset, _ in fetched] == list(range(len(fetched)))
        values = [value for _, value in fetched]
        acked_values = {value for _, value in acked}
        # every acknowledged record is there exactly once ...
        counts: dict[bytes, int] = {}
        for value in values:
            counts[value] = counts.get(value, 0) + 1
        missing = [v for v in acked_values if v not in counts]
        doubled = [v for v in acked_values if counts.get(v, 0) > 1]
        assert not missing and not doubled, (
            f"{len(missing)} acknowledged records missing (e.g. {sorted(missing)[:3]}), "
            f"{len(doubled)} twice (e.g. {sorted(doubled)[:3]}); {len(fetched)} fetched, "
            f"{len(acked)} acked, {len(failed)} failed"
        )
        # ... at the offset its acknowledgement named, in produce order
        assert all(fetched[offset][1] == value for offset, value in acked)
        ordered = [value for value in values if value in acked_values]
        assert ordered == sorted(ordered)
        assert len(acked_values) == TOTAL - len(failed)
    finally:
        gw.stop()
