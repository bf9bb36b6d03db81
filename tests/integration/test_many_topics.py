"""1,000 topics of 10 partitions: Pulsar producers and readers open on demand and close when
idle, so the gateway's footprint follows what is in use, not what exists.

Records go to partition 0 of every topic and to every partition of 100 topics (1,900 partition
logs): opening all 10,000 at once works too but takes minutes on pulsar-lite, whose CPU is
the limit when thousands of readers attach (see the closing note of issue 2).

On an oversubscribed machine the opening is what takes long, not the closing: at load 23-28
on 2 cores the first produce to the 1,900 partitions took 300 s (librdkafka's requests timing
out after 60 s and retried), while 500 idle partitions of a probe with a 5 s idle timer were
all closed 8 s after the last write. The suite's 300 s pytest timeout then ran out in the
last step, the wait for the idle partitions to close, only because that is where the test
was by then. So this test has a budget of its own, and its waits stretch by the load per core
(harness/machine_load.py)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import GatewayProcess
from harness.machine_load import load_per_core
from harness.waiting import wait_until

TOPICS = 1000
PARTITIONS = 10


def _open_partitions(gw: GatewayProcess) -> int:
    """/health's count, asked again while it misses its 1 s answer on a loaded machine."""
    health = wait_until(gw.health, 30 * load_per_core(), 0.5, message="an answer from /health")
    return int(health["open_partitions"])


# about 55 s on an idle 2-core machine; most of it is opening the 1,900 partitions, which
# takes several minutes when the machine is oversubscribed (see above)
@pytest.mark.timeout(900)
def test_thousand_topics_of_ten_partitions(tmp_path) -> None:
    gw = GatewayProcess(tmp_path / "gw", extra=["--set", "kafka.idle_close_seconds=20"]).start()
    try:
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        names = [f"many-{i:04d}" for i in range(TOPICS)]
        for start in range(0, TOPICS, 100):
            futures = admin.create_topics(
                [NewTopic(n, PARTITIONS, 1) for n in names[start : start + 100]]
            )
            for future in futures.values():
                future.result(60)
        listed = admin.list_topics(timeout=30).topics
        assert all(len(listed[n].partitions) == PARTITIONS for n in names)
        assert _open_partitions(gw) == 0  # nothing opened until used

        used = [(name, 0) for name in names]
        used += [(name, p) for name in names[:100] for p in range(1, PARTITIONS)]
        producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 20})
        for name, partition in used:
            producer.produce(name, f"{name}/{partition}".encode(), partition=partition)
        assert producer.flush(300) == 0
        # only what is used is open: never more than the partitions written to (all of them
        # on an idle machine; on a loaded one the first written may have idled out already,
        # kafka.idle_close_seconds being 20 s here, so an exact count made this test flaky)
        assert 0 < _open_partitions(gw) <= len(used)

        consumer = Consumer(
            {"bootstrap.servers": gw.bootstrap, "group.id": "many", "enable.auto.commit": False}
        )
        sample = used[::37]
        consumer.assign([TopicPartition(n, p, 0) for n, p in sample])
        got = set()
        # the sample's partitions may have idled out while the rest was written: reopened
        # here, slowly on a loaded machine (60 s ran out at load 20 on 2 cores)
        deadline = time.time() + 60 * load_per_core()
        while len(got) < len(sample) and time.time() < deadline:
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                got.add(msg.value().decode())
        consumer.close()
        assert got == {f"{n}/{p}" for n, p in sample}

        # idle partitions (their readers and producers) are closed: after the 20 s idle
        # timer and its sweep every 10 s, about 30 s; a minute, stretched by the load
        wait_until(
            # asked again when /health misses its 1 s answer while thousands close at once on
            # a loaded machine: what is named here is that they close
            lambda: (gw.health() or {}).get("open_partitions") == 0,
            60 * load_per_core(),
            0.5,
            message=lambda: f"idle partitions to close ({gw.health()} from /health)",
        )
    finally:
        gw.stop()
