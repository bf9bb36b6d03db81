"""A broker that stalls heals by itself (issue 10, item 1).

The embedded broker is frozen for 15 s (SIGSTOP, then SIGCONT) while an idempotent and a
plain producer (acks=all) write and a consumer long-polls. While it is frozen `/health`
answers 503 and `gateway_backend_up` is 0, and a Produce is answered REQUEST_TIMED_OUT by
its `timeout_ms`. Within 5 s of the resume produce and fetch work again, and every record
a producer was told was stored is in the log exactly once, in order, at dense offsets.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from harness import kafka_wire
from harness.gateway_process import GatewayProcess
from harness.partition_records import read_to_end
from harness.waiting import wait_until

FREEZE_SECONDS = 15.0
RESUME_DEADLINE = 5.0
REQUEST_TIMED_OUT = 7


@dataclass
class Writer:
    """A producer writing numbered values until told to stop, with every delivery report."""

    topic: str
    config: dict
    acked: list[tuple[int, bytes]] = field(default_factory=list)
    failed: list[KafkaError] = field(default_factory=list)
    sent: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        producer = Producer(self.config)

        def report(err: KafkaError | None, msg: object) -> None:
            if err is None:
                self.acked.append((msg.offset(), msg.value()))
            else:
                self.failed.append(err)

        while not self.stop.is_set():
            producer.produce(self.topic, f"{self.sent:08d}".encode(), on_delivery=report)
            self.sent += 1
            producer.poll(0.01)
        assert producer.flush(120) == 0


def _health_status(gw: GatewayProcess) -> tuple[int, dict]:
    """`/health`'s status code and body (503 included, which `GatewayProcess.health` hides)."""
    url = f"http://127.0.0.1:{gw.metrics_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except OSError:
        return 0, {}


def _check_log(bootstrap: str, writer: Writer) -> None:
    rows = read_to_end(bootstrap, writer.topic)
    assert [offset for offset, _ in rows] == list(range(len(rows))), "offsets are not dense"
    values = [value for _, value in rows]
    doubled = {value for value in values if values.count(value) > 1}
    assert not doubled, f"{len(doubled)} records of {writer.topic} stored twice"
    assert writer.failed == [], writer.failed[:3]
    assert len(writer.acked) == writer.sent
    # every acknowledged record at the offset its acknowledgement named, in produce order
    assert sorted(writer.acked) == sorted(rows)
    assert values == sorted(values)


def test_a_frozen_broker_heals_by_itself(tmp_path) -> None:
    gw = GatewayProcess(tmp_path / "gw", extra=["--set", "kafka.default_partitions=1"]).start()
    try:
        common = {"bootstrap.servers": gw.bootstrap, "acks": "all", "linger.ms": 5}
        writers = [
            # times out during the freeze and retries: the retries must be deduplicated
            Writer(
                "stall-idempotent",
                {
                    **common,
                    "enable.idempotence": True,
                    "request.timeout.ms": 4000,
                    "message.timeout.ms": 120000,
                },
            ),
            # waits longer than the freeze: its requests are answered once the broker resumes
            Writer("stall-plain", {**common, "request.timeout.ms": 30000}),
        ]
        threads = [threading.Thread(target=w.run, daemon=True) for w in writers]
        fetched: list[tuple[str, int]] = []
        stop_fetching = threading.Event()

        def fetch() -> None:
            consumer = Consumer(
                {
                    "bootstrap.servers": gw.bootstrap,
                    "group.id": "stall-live",
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 5000,  # a long poll that spans the freeze
                }
            )
            consumer.assign([TopicPartition(w.topic, 0, 0) for w in writers])
            while not stop_fetching.is_set():
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    fetched.append((msg.topic(), msg.offset()))
            consumer.close()

        kafka_wire.produce(gw.kafka_port, "stall-raw", [b"before"])  # the topic exists
        for thread in threads:
            thread.start()
        wait_until(lambda: all(len(w.acked) > 50 for w in writers), 30, message="records acked")
        fetcher = threading.Thread(target=fetch, daemon=True)
        fetcher.start()
        wait_until(lambda: len(fetched) > 50, 30, message="the consumer to fetch")

        broker = gw.broker_pid()
        os.kill(broker, signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            status = wait_until(
                lambda: _health_status(gw)[0] == 503 and _health_status(gw),
                10,
                0.2,
                "/health to answer 503 for a frozen broker",
            )
            assert status[1]["ok"] is False
            assert gw.metric("gateway_backend_up") == 0
            started = time.monotonic()
            answer = kafka_wire.produce(gw.kafka_port, "stall-raw", [b"frozen"], timeout_ms=2000)
            took = time.monotonic() - started
            assert answer["error_code"] == REQUEST_TIMED_OUT, answer
            assert took < 4, f"Produce with timeout_ms=2000 answered after {took:.1f} s"
            acked_during = [len(w.acked) for w in writers]
            # the fault is the freeze itself: hold it for its full length
            time.sleep(max(0.0, frozen_at + FREEZE_SECONDS - time.monotonic()))
        finally:
            os.kill(broker, signal.SIGCONT)
        resumed_at = time.monotonic()

        def produce_works() -> float:
            answer = kafka_wire.produce(gw.kafka_port, "stall-raw", [b"after"], timeout_ms=1000)
            return answer["error_code"] == 0 and time.monotonic() - resumed_at

        first_produce = wait_until(produce_works, RESUME_DEADLINE, 0.05, "a produce to succeed")
        fetched_before = len(fetched)
        wait_until(
            lambda: len(fetched) > fetched_before + 20, RESUME_DEADLINE, message="fetches to resume"
        )
        wait_until(lambda: _health_status(gw)[0] == 200, RESUME_DEADLINE, message="/health ok")
        assert gw.metric("gateway_backend_up") == 1
        recovered = time.monotonic() - resumed_at
        wait_until(
            lambda: all(len(w.acked) > n + 50 for w, n in zip(writers, acked_during, strict=True)),
            RESUME_DEADLINE,
            message="the producers to be acknowledged again",
        )
        for writer in writers:
            writer.stop.set()
        for thread in threads:
            thread.join(150)
        stop_fetching.set()
        fetcher.join(30)
        print(
            f"\nfirst produce {first_produce:.2f} s after SIGCONT; produce, fetch and health back "
            f"within {recovered:.2f} s; records: "
            + ", ".join(f"{w.topic} {w.sent} sent / {len(w.acked)} acked" for w in writers)
        )
        for writer in writers:
            _check_log(gw.bootstrap, writer)
    finally:
        for writer in writers:
            writer.stop.set()
        stop_fetching.set()
        gw.stop()
