"""An append waiting on a frozen broker keeps its partition open (docs/offsets.md).

The idle sweep closed any partition unused for `kafka.idle_close_seconds`, counting from the
append's start: an append that waited longer on a stalled broker had its partition closed
under it and failed ("produce ... failed: partition closed"), although the broker went on to
store the record, so a client's retry stored it twice. Here the idle close is 1 s and the
broker is frozen for 4 s during an acks=all produce with no retries: the produce must
succeed once the broker resumes, and the record be there once.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from harness import kafka_wire
from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until

FREEZE_SECONDS = 4.0  # the fault itself: four times the idle close


def test_a_partition_waited_on_is_not_closed_as_idle(tmp_path) -> None:
    extra = ["--set", "kafka.idle_close_seconds=1", "--set", "kafka.default_partitions=1"]
    gw = GatewayProcess(tmp_path / "gw", extra=extra).start()
    try:
        kafka_wire.produce(gw.kafka_port, "stalled", [b"first"])  # the partition is open
        producer = Producer(
            {
                "bootstrap.servers": gw.bootstrap,
                "acks": "all",
                "retries": 0,
                "enable.idempotence": False,
                "message.timeout.ms": 60000,
                "request.timeout.ms": 60000,
            }
        )
        outcome: list[KafkaError | None] = []
        broker = gw.broker_pid()
        os.kill(broker, signal.SIGSTOP)
        try:
            producer.produce("stalled", b"second", on_delivery=lambda err, _m: outcome.append(err))
            sender = threading.Thread(target=producer.flush, args=(90,), daemon=True)
            sender.start()
            time.sleep(FREEZE_SECONDS)  # the broker stays frozen this long
        finally:
            os.kill(broker, signal.SIGCONT)
        wait_until(lambda: outcome, 60, message="the produce to be answered")
        # `is None`: comparing librdkafka's KafkaError with == leaves an exception pending
        assert len(outcome) == 1 and outcome[0] is None, f"{outcome}\n{gw.log_tail()}"
        assert "partition closed" not in gw.log_path.read_text()
        consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "stall-check"})
        consumer.assign([TopicPartition("stalled", 0, 0)])
        values: list[bytes] = []

        def read_all() -> bool:
            message = consumer.poll(1)
            if message is not None and not message.error():
                values.append(message.value())
            return len(values) >= 2

        wait_until(read_all, 30, interval=0, message="both records")
        consumer.close()
        assert values == [b"first", b"second"]
    finally:
        gw.stop()
