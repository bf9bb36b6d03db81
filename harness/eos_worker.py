"""One exactly-once consume-transform-produce worker, run as its own process so that a test
can kill it with SIGKILL mid-transaction: reads `source` (read_committed, as group `group`),
writes each record as `out-<value>` to `sink`, and commits its input offsets in the same
transaction (send_offsets_to_transaction), batch by batch, until it is killed. Once a batch's
output is stored and before it commits, it prints `open <first input offset>` and holds the
transaction open for PAUSE seconds: a test that kills it then kills it mid-transaction.

    python -m harness.eos_worker BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID PAUSE
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer


def main(
    bootstrap: str, source: str, sink: str, group: str, transactional_id: str, pause: str
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
        }
    )
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    )
    producer.init_transactions(60)
    consumer.subscribe([source])
    while True:
        messages = [m for m in consumer.consume(1000, timeout=1) if not m.error()]
        if not messages:
            continue
        producer.begin_transaction()
        for message in messages:
            producer.produce(sink, b"out-" + message.value())
        producer.flush(60)
        print(f"open {messages[0].offset()}", flush=True)
        time.sleep(float(pause))
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 60
        )
        producer.commit_transaction(60)


if __name__ == "__main__":
    main(*sys.argv[1:7])
