"""One Kafka group member in its own process, for group tests that kill members.

`python -m harness.group_member CLIENT BOOTSTRAP TOPIC GROUP` with CLIENT one
of confluent, kafka-python, aiokafka. Prints JSON lines: {"assigned": [partitions]}
when the assignment changes, and {"records": [[p, offset, value]], "committed":
{p: offset}} after each synchronous commit (records are printed only once their
commit succeeded or failed, with "committed" empty on failure). SIGTERM closes the
consumer cleanly (LeaveGroup); SIGKILL is the crash case.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

SESSION_MS = 6000
HEARTBEAT_MS = 1000
stopping = False


def _say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _stop(*_: Any) -> None:
    global stopping
    stopping = True


def _report(batch: list[list[Any]], committed: dict[int, int]) -> None:
    if batch:
        _say(records=batch, committed={str(p): o for p, o in committed.items()})


def run_confluent(bootstrap: str, topic: str, group: str) -> None:
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "confluent-member",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
        }
    )
    consumer.subscribe([topic])
    assigned: list[int] | None = None
    while not stopping:
        messages = consumer.consume(100, 0.2)
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != assigned:
            assigned = now
            _say(assigned=now)
        batch = [[m.partition(), m.offset(), m.value().decode()] for m in messages if not m.error()]
        if not batch:
            continue
        committed: dict[int, int] = {}
        try:
            for tp in consumer.commit(asynchronous=False) or []:
                if tp.error is None and tp.offset >= 0:
                    committed[tp.partition] = tp.offset
        except KafkaException:
            committed = {}
        _report(batch, committed)
    consumer.close()


def run_kafka_python(bootstrap: str, topic: str, group: str) -> None:
    import logging

    from kafka.errors import KafkaError

    from harness.kafka_python_group import group_consumer

    logging.basicConfig(stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kafka.coordinator").setLevel(logging.DEBUG)

    consumer = group_consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="kafka-python-member",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )
    assigned: list[int] | None = None
    while not stopping:
        polled = consumer.poll(timeout_ms=200)
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != assigned:
            assigned = now
            _say(assigned=now)
        batch = [[r.partition, r.offset, r.value.decode()] for rs in polled.values() for r in rs]
        if not batch:
            continue
        committed: dict[int, int] = {}
        try:
            consumer.commit()
            for tp, records in polled.items():
                committed[tp.partition] = records[-1].offset + 1
        except KafkaError:
            committed = {}
        _report(batch, committed)
    consumer.close()


async def run_aiokafka(bootstrap: str, topic: str, group: str) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="aiokafka-member",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )
    await consumer.start()
    assigned: list[int] | None = None
    while not stopping:
        polled = await consumer.getmany(timeout_ms=200)
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != assigned:
            assigned = now
            _say(assigned=now)
        batch = [[r.partition, r.offset, r.value.decode()] for rs in polled.values() for r in rs]
        if not batch:
            continue
        committed: dict[int, int] = {}
        try:
            await consumer.commit()
            for tp, records in polled.items():
                committed[tp.partition] = records[-1].offset + 1
        except KafkaError:
            committed = {}
        _report(batch, committed)
    await consumer.stop()


def main() -> None:
    client, bootstrap, topic, group = sys.argv[1:5]
    signal.signal(signal.SIGTERM, _stop)
    if client == "confluent":
        run_confluent(bootstrap, topic, group)
    elif client == "kafka-python":
        run_kafka_python(bootstrap, topic, group)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, topic, group))
    else:
        raise SystemExit(f"unknown client {client}")
    _say(closed=True)


if __name__ == "__main__":
    main()
