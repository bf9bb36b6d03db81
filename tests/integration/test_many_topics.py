"""1,000 topics of 10 partitions: Pulsar producers and readers open on demand and close when
idle, so the gateway's footprint follows what is in use, not what exists.

Records go to partition 0 of every topic and to every partition of 100 topics (1,900 partition
logs): opening all 10,000 at once works too but takes minutes on pulsar-lite, whose CPU is
the limit when thousands of readers attach (see the closing note of issue 2)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until

TOPICS = 1000
PARTITIONS = 10


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
        assert gw.health()["open_partitions"] == 0  # nothing opened until used

        used = [(name, 0) for name in names]
        used += [(name, p) for name in names[:100] for p in range(1, PARTITIONS)]
        producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 20})
        for name, partition in used:
            producer.produce(name, f"{name}/{partition}".encode(), partition=partition)
        assert producer.flush(300) == 0
        # only what is used is open: never more than the partitions written to (all of them
        # on an idle machine; on a loaded one the first written may have idled out already,
        # kafka.idle_close_seconds being 20 s here, so an exact count made this test flaky)
        assert 0 < gw.health()["open_partitions"] <= len(used)

        consumer = Consumer(
            {"bootstrap.servers": gw.bootstrap, "group.id": "many", "enable.auto.commit": False}
        )
        sample = used[::37]
        consumer.assign([TopicPartition(n, p, 0) for n, p in sample])
        got = set()
        deadline = time.time() + 60
        while len(got) < len(sample) and time.time() < deadline:
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                got.add(msg.value().decode())
        consumer.close()
        assert got == {f"{n}/{p}" for n, p in sample}

        # idle partitions (their readers and producers) are closed
        wait_until(
            # asked again when /health misses its 1 s answer while thousands close at once on
            # a loaded machine: what is named here is that they close
            lambda: (gw.health() or {}).get("open_partitions") == 0,
            60,
            0.5,
            message=lambda: f"idle partitions to close ({gw.health()} from /health)",
        )
    finally:
        gw.stop()
