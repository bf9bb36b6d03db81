"""Migration from a Kafka cluster (tansu plays the old cluster) into a real gateway, and
the Spark parity job: it passes on a faithful copy, and it names the partition and
offsets of every kind of damage it exists to catch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import REPO, GatewayProcess
from harness.tansu_process import TansuProcess
from pulsar_gateway.tools.gateway_link import discover
from pulsar_gateway.tools.parity.job import ParityPlan, Verdict, run_parity, spark_session
from pulsar_gateway.tools.parity.samples import preview

Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]], int]


@pytest.fixture(scope="module")
def tansu() -> Iterator[TansuProcess]:
    node = TansuProcess().start()
    yield node
    node.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _record(i: int) -> tuple[bytes, bytes | None, list[tuple[str, bytes]], int]:
    key = f"k{i % 13}".encode()
    value = None if i % 17 == 5 else f"value-{i}".encode()
    headers = [("trace", f"t{i}".encode()), ("bin", bytes([i % 256, 0, 255]))]
    if i % 7 == 0:
        headers.append(("trace", b"repeated"))
    return key, value, headers, 1_700_000_000_000 + i


def _fill_source(tansu: TansuProcess, topic: str, partitions: int, count: int) -> None:
    _create(tansu.bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5})
    for i in range(count):
        key, value, headers, ts = _record(i)
        producer.produce(topic, value, key, i % partitions, headers=headers, timestamp=ts)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _read_all(bootstrap: str, topic: str, partitions: int, **conf: Any) -> dict[int, list[Row]]:
    """Every record of every partition, by partition, in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **conf,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    rows: dict[int, list[Row]] = defaultdict(list)
    done: set[int] = set()
    deadline = time.time() + 120
    while len(done) < partitions and time.time() < deadline:
        for msg in consumer.consume(1000, 1):
            if msg.error():
                if msg.error().code() == -191:
                    done.add(msg.partition())
                continue
            rows[msg.partition()].append(
                (
                    msg.partition(),
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    list(msg.headers() or []),
                    msg.timestamp()[1],
                )
            )
    consumer.close()
    assert len(done) == partitions, "did not reach the end of every partition"
    return rows


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000}
    )
    consumer.commit(
        offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
    )
    consumer.close()


def _migrate_command(gateway: GatewayProcess, tansu: TansuProcess, topic: str, name: str):
    return [
        sys.executable,
        "-m",
        "pulsar_gateway.cli",
        "migrate",
        "--source",
        tansu.bootstrap,
        "--target",
        gateway.bootstrap,
        "--topics",
        topic,
        "--name",
        name,
        "--gateway-health",
        f"http://127.0.0.1:{gateway.metrics_port}",
    ]


def _migrate(
    gateway: GatewayProcess, tansu: TansuProcess, topic: str, name: str, *extra: str
) -> str:
    done = subprocess.run(
        _migrate_command(gateway, tansu, topic, name) + list(extra),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _parity(
    gateway: GatewayProcess,
    tansu: TansuProcess,
    spark: Any,
    topic: str | list[str],
    name: str,
    tmp_path: Any,
    groups: str | None = None,
    pulsar_client: str = "native",
) -> Verdict:
    plan = ParityPlan(
        source=tansu.bootstrap,
        target=gateway.bootstrap,
        link=discover(f"http://127.0.0.1:{gateway.metrics_port}"),
        name=name,
        topics=[topic] if isinstance(topic, str) else topic,
        group_pattern=groups,
        master="local[2]",
        report=str(tmp_path / "parity"),
        pulsar_client=pulsar_client,
    )
    verdict = run_parity(plan, spark=spark)
    assert verdict.json_path and verdict.json_path.exists()
    page = verdict.html_path.read_text()
    assert "<svg" in page and "http" not in page.split("</style>")[0]  # self-contained
    return verdict


def test_migrate_then_parity_passes_and_groups_resume(gateway, tansu, spark, tmp_path) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    _fill_source(tansu, topic, 3, 3000)
    group_a, group_b = f"ga-{topic}", f"gb-{topic}"
    _commit(tansu.bootstrap, group_a, {(topic, 0): 100, (topic, 1): 250})
    _commit(tansu.bootstrap, group_b, {(topic, 2): 10})
    out = _migrate(gateway, tansu, topic, name=topic)
    assert "3,000" in out

    source = _read_all(tansu.bootstrap, topic, 3)
    target = _read_all(gateway.bootstrap, topic, 3)
    for partition in range(3):  # key, value, headers (binary, repeated) and timestamps kept
        assert [r[1:] for r in target[partition]] == [r[1:] for r in source[partition]]

    verdict = _parity(gateway, tansu, spark, topic, topic, tmp_path, groups=f"g[ab]-{topic}")
    assert verdict.passed, verdict.to_json(None)  # type: ignore[arg-type]
    assert sum(p.source_records for p in verdict.partitions) == 3000
    # a faithful copy is settled by the in-order walk: no partition needed the content join
    assert {p.method for p in verdict.partitions} == {"in order"}
    assert {(g.group, g.partition, g.drift) for g in verdict.groups} == {
        (group_a, 0, 0),
        (group_a, 1, 0),
        (group_b, 2, 0),
    }

    # a group resuming on the gateway reads exactly what followed its old commit
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": group_a,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "session.timeout.ms": 6000,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: dict[int, list[int]] = defaultdict(list)
    eof: set[int] = set()
    deadline = time.time() + 60
    while len(eof) < 3 and time.time() < deadline:
        msg = consumer.poll(1)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == -191:
                eof.add(msg.partition())
            continue
        got[msg.partition()].append(msg.offset())
    consumer.close()
    assert got[0] == [r[1] for r in source[0][100:]]
    assert got[1] == [r[1] for r in source[1][250:]]
    assert got[2] == [r[1] for r in source[2]]  # no commit there: from the start


def _write_target(gateway: GatewayProcess, topic: str, rows: dict[int, list[Row]]) -> None:
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 5})
    for partition, records in rows.items():
        for _, _, key, value, headers, ts in records:
            producer.produce(topic, value, key, partition, headers=headers, timestamp=ts)
    assert producer.flush(60) == 0


def _swap(records: list[Row], a: int, b: int) -> list[Row]:
    records = list(records)
    records[a], records[b] = records[b], records[a]
    return records


# (name, how the target is damaged, partition, kind, (source offset, target offset))
DAMAGE = {
    "drop a record": (
        lambda rows: {0: rows[0], 1: rows[1][:17] + rows[1][18:]},
        1,
        "missing",
        (17, None),
    ),
    "duplicate a record": (
        lambda rows: {0: rows[0][:11] + rows[0][10:], 1: rows[1]},
        0,
        "duplicate",
        (None, 11),
    ),
    # offsets 3 and 16 of partition 0 hold the same key (k6)
    "swap two records of one key": (
        lambda rows: {0: _swap(rows[0], 3, 16), 1: rows[1]},
        0,
        "order_break",
        (3, 16),
    ),
    "change a header": (
        lambda rows: {
            0: rows[0],
            1: rows[1][:5]
            + [rows[1][5][:4] + ([("trace", b"changed")],) + rows[1][5][5:]]
            + rows[1][6:],
        },
        1,
        "header_mismatch",
        (5, 5),
    ),
    "lose a partition": (lambda rows: {0: rows[0]}, 1, "missing", (0, None)),
}


@dataclass
class DamagedCopy:
    """Each kind of damage in a topic of its own, every one compared by one parity run."""

    topics: dict[str, str]  # damage -> its topic
    source: dict[str, dict[int, list[Row]]]  # damage -> the source's records by partition
    target: dict[str, dict[int, list[Row]]]  # damage -> what the gateway was given
    verdict: Verdict


@pytest.fixture(scope="module")
def damaged_copy(gateway, tansu, spark, tmp_path_factory) -> DamagedCopy:
    """One parity run (one Spark job, one report) over a copy damaged once in each topic:
    cheaper than a run per damage, and it checks that each damage is named where it is
    and nowhere else."""
    run = uuid.uuid4().hex[:8]
    topics = {damage: f"damaged-{run}-{i}" for i, damage in enumerate(DAMAGE)}
    source, target = {}, {}
    for damage, topic in topics.items():
        _fill_source(tansu, topic, 2, 80)
        source[damage] = _read_all(tansu.bootstrap, topic, 2)
        assert source[damage][0][3][2] == source[damage][0][16][2]  # the swap relies on it
        target[damage] = DAMAGE[damage][0](source[damage])
        _create(gateway.bootstrap, topic, len(target[damage]))
        _write_target(gateway, topic, target[damage])
    verdict = _parity(
        gateway,
        tansu,
        spark,
        list(topics.values()),
        "no-such-migration",
        tmp_path_factory.mktemp("d"),
    )
    return DamagedCopy(topics, source, target, verdict)


def test_parity_fails_a_damaged_copy_and_names_only_the_damaged_partitions(damaged_copy) -> None:
    verdict = damaged_copy.verdict
    assert not verdict.passed
    assert len(verdict.partitions) == 2 * len(DAMAGE)  # every partition of every topic
    planted = {(damaged_copy.topics[d], DAMAGE[d][1]) for d in DAMAGE}
    failing = {(p.topic, p.partition) for p in verdict.partitions if not p.ok}
    assert failing == planted, [p.to_json() for p in verdict.partitions if not p.ok]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_parity_names_the_damage(damaged_copy, damage) -> None:
    verdict, topic = damaged_copy.verdict, damaged_copy.topics[damage]
    source, rows = damaged_copy.source[damage], damaged_copy.target[damage]
    _, partition, kind, (source_offset, target_offset) = DAMAGE[damage]
    reports = {p.partition: p for p in verdict.partitions if p.topic == topic}
    bad = reports[partition]
    assert not bad.ok and bad.counts[kind] >= 1, bad.to_json()
    assert bad.examples[kind][0] == (source_offset, target_offset), bad.to_json()
    # the report shows the offending records themselves, read back from each side
    if source_offset is not None:
        shown = verdict.sample(bad, "source", source_offset)
        assert shown is not None and shown.key == preview(source[partition][source_offset][2])
    if target_offset is not None:
        shown = verdict.sample(bad, "target", target_offset)
        assert shown is not None and shown.value == preview(rows[partition][target_offset][3])
    written = json.loads(verdict.json_path.read_text())  # type: ignore[union-attr]
    [entry] = [
        e for e in written["partitions"] if e["topic"] == topic and e["partition"] == partition
    ]
    first = entry["examples"][kind][0]
    assert (first["source_record"] is None) == (source_offset is None), first
    others = [p for p in reports.values() if p.partition != partition]
    assert others and all(p.ok for p in others), [p.to_json() for p in others]
    # only the damaged partition went on to the comparison by content
    assert bad.method == "by content"
    assert {p.method for p in others} == {"in order"}


def _shaped(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]:
    """Records of every shape the Pulsar mapping has (docs/pulsar-mapping.md): plain
    headers in name order and not, none, binary and repeated ones; text, binary, empty and
    no keys; null values."""
    key = [f"k{i % 5}".encode(), bytes([i % 256, 255]), b"", None][i % 4 if i % 3 else 0]
    value = None if i % 11 == 4 else f"value-{i}".encode()
    headers = [
        [("a", b"1"), ("n", str(i).encode())],
        [("z", b"last"), ("a", b"first")],
        [],
        [("bin", bytes([i % 256, 0, 255])), ("bin", b"again")],
    ][i % 4]
    return key, value, headers, 1_700_000_000_000 + i // 7


# partition -> how the copy is damaged, and where the walk must find the logs part
# (source offset, target offset)
PLANTED = {
    0: (lambda records: records[:11] + records[10:], (11, 11)),  # a record duplicated
    1: (lambda records: records[:17] + records[18:], (17, 17)),  # a record lost
    2: (lambda records: _swap(records, 2, 15), (2, 2)),  # two records swapped
}


def test_parity_reads_the_gateway_through_its_wire_client(gateway, tansu) -> None:
    """Parity's Pulsar reader through the gateway's own wire client (the default) gives
    the records pulsar-client's gives and Kafka consumers of the gateway read, keys,
    values, headers and timestamps exactly, at the gateway's offsets; and its in-order walk
    finds a planted duplicate, a lost record and two swapped records where they are."""
    from pulsar_gateway.gateway.topic_names import partition_topic
    from pulsar_gateway.tools.parity.in_order import walk_partition
    from pulsar_gateway.tools.parity.sources import pulsar_records

    topic = f"wire-{uuid.uuid4().hex[:8]}"
    _create(tansu.bootstrap, topic, 3)
    source = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5})
    for i in range(3 * 400):
        key, value, headers, ts = _shaped(i)
        source.produce(topic, value, key, i % 3, headers=headers, timestamp=ts)
    assert source.flush(60) == 0
    written = _read_all(tansu.bootstrap, topic, 3)
    _create(gateway.bootstrap, topic, 3)
    _write_target(gateway, topic, {p: damage(written[p]) for p, (damage, _) in PLANTED.items()})
    target = _read_all(gateway.bootstrap, topic, 3)
    link = discover(f"http://127.0.0.1:{gateway.metrics_port}")
    for partition, (_, parted) in PLANTED.items():
        spec = {
            "topic": topic,
            "partition": partition,
            "pulsar_topic": partition_topic(link.pulsar_name(topic), partition),
            "start": 0,
            "end": len(target[partition]),
        }
        native = list(pulsar_records(link.service_url, spec, "native"))
        reference = list(pulsar_records(link.service_url, spec, "pulsar-client"))
        assert [tuple(r) for r in native] == [tuple(r) for r in reference]
        assert [(r[0], r[1], r[2], list(r[3]), r[4]) for r in native] == [
            (offset, key, value, headers, ts)
            for _, offset, key, value, headers, ts in target[partition]
        ]
        job = {
            "topic": topic,
            "partition": partition,
            "source": tansu.bootstrap,
            "source_range": (0, len(written[partition])),
            "target": gateway.bootstrap,
            "target_range": (0, len(target[partition])),
            "pulsar": spec,
            "pulsar_client": "native",
            "service_url": link.service_url,
            "runs": [],
            "align": (0, 0),
        }
        assert walk_partition(job).first_difference == parted


def test_killed_migration_resumes_without_duplicates(tmp_path, tansu, spark) -> None:
    """SIGKILL migrate mid-copy, run it again: parity still passes."""
    gateway = GatewayProcess(tmp_path / "gw").start()
    try:
        topic = f"big-{uuid.uuid4().hex[:8]}"
        _fill_source(tansu, topic, 2, 120_000)
        # paced to about 6 s: unpaced, the copy can end between two looks at the target
        paced = ["--max-records-per-second", "20000"]
        process = subprocess.Popen(
            _migrate_command(gateway, tansu, topic, topic) + paced,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "w"})
        deadline = time.time() + 120
        written = 0
        while written < 20_000 and time.time() < deadline and process.poll() is None:
            try:
                written = sum(
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    for p in range(2)
                )
            except Exception:  # noqa: BLE001 - the topic is not created yet
                pass
            time.sleep(0.2)
        consumer.close()
        assert process.poll() is None, "migrate finished before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert 0 < written < 120_000

        _migrate(gateway, tansu, topic, name=topic)
        verdict = _parity(gateway, tansu, spark, topic, topic, tmp_path)
        assert verdict.passed, [p.to_json() for p in verdict.partitions if not p.ok]
        assert sum(p.target_records for p in verdict.partitions) == 120_000
    finally:
        gateway.stop()


def test_a_run_that_died_before_saving_is_recorded_not_rewritten(gateway, tansu) -> None:
    """The translation record trails the target (the run died between a write and its
    save): the next run counts what the target already holds instead of writing it
    again."""
    import asyncio

    from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
    from pulsar_gateway.gateway.metadata_store import MetadataStore
    from pulsar_gateway.tools.migration.translation import PartitionTranslation, partition_key

    topic = f"resume-{uuid.uuid4().hex[:8]}"
    _fill_source(tansu, topic, 1, 500)
    _migrate(gateway, tansu, topic, name=topic)
    link = discover(f"http://127.0.0.1:{gateway.metrics_port}")

    async def rewind() -> dict[str, Any]:
        backend = PulsarBackend(link.service_url)
        await backend.start()
        store = MetadataStore(backend, link.metadata_namespace)
        await store.load()
        key = partition_key(topic, topic, 0)
        finished = store.get(key)
        await store.put(key, PartitionTranslation(0, 0).to_json())  # as saved at the start
        await backend.close()
        return finished

    finished = asyncio.run(rewind())
    out = _migrate(gateway, tansu, topic, name=topic)
    lines = [line for line in out.splitlines() if topic in line]
    assert lines and lines[0].split("│")[3].strip() == "0", out  # copied now
    assert lines[0].split("│")[4].strip() == "500", out  # found copied
    target = _read_all(gateway.bootstrap, topic, 1)
    assert [r[1] for r in target[0]] == list(range(500))
    assert finished["runs"] == [[0, 0, 500]]


def test_migrate_into_the_kafka_entry_format_then_parity(gateway, tansu, spark, tmp_path) -> None:
    """Batches stored as sent: parity's Pulsar reader counts and opens them."""
    from confluent_kafka.admin import ConfigResource

    topic = f"batched-{uuid.uuid4().hex[:8]}"
    _fill_source(tansu, topic, 2, 2000)
    _migrate(gateway, tansu, topic, topic, "--entry-format", "kafka")
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["pulsar.entry.format"].value == "kafka"
    source = _read_all(tansu.bootstrap, topic, 2)
    target = _read_all(gateway.bootstrap, topic, 2)
    for partition in range(2):
        assert [r[1:] for r in target[partition]] == [r[1:] for r in source[partition]]
    verdict = _parity(gateway, tansu, spark, topic, topic, tmp_path)
    assert verdict.passed, [p.to_json() for p in verdict.partitions if not p.ok]
    assert sum(p.target_records for p in verdict.partitions) == 2000
