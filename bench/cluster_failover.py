"""Failover of a gateway cluster (issue 12): time from kill -9 of a member to the first
successful produce, on the survivor, to a partition the killed member led.

    python -m bench.cluster_failover [--kills 5] [--lease 6] [--heartbeat 1]

One embedded broker, two `pulsar-gateway run` members with `[cluster]` in front of it. Each
round kills the member that leads some partition, then sends a one-record acks=all Produce
to that partition to the survivor every 20 ms (a raw request, so client back-off does not
count) until one is stored; then starts the killed member again and waits until both serve.
Before the kills, the CPU an idle member spends on membership is measured beside a gateway
alone on the same broker.
The floor is `cluster.lease_seconds` (the survivor takes over one lease after the last
heartbeat it read), so the report gives each time beside it as a ratio. The workers bench
(N workers under a supervisor) reuses `first_produce_after`.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.proc import cpu_seconds
from bench.report import bar_chart, write_report
from bench.suite import machine
from harness.gateway_process import GatewayProcess, cluster_member, set_flags
from harness.raw_kafka_socket import recv_frame
from harness.shared_broker import SharedBroker
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.record_batch import encode_batch

console = Console()
PRODUCE, METADATA = 0, 3


def _call(port: int, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(protocol.encode_request(api, version, 1, "failover-bench", body))
        return protocol.decode_response(api, version, memoryview(recv_frame(sock)))


def leaders(port: int, topic: str) -> dict[int, int]:
    """partition -> leader node id, from Metadata v12 (auto-creating the topic)."""
    body = {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": True}
    response = _call(port, METADATA, 12, body)
    return {p["partition_index"]: p["leader_id"] for p in response["topics"][0]["partitions"]}


def produce_once(port: int, topic: str, partition: int) -> int:
    """One record with acks=all; the partition's error code (-1: no answer)."""
    batch = encode_batch(0, [(0, int(time.time() * 1000), None, b"failover", [])])
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": bytes(batch)}]}
        ],
    }
    try:
        response = _call(port, PRODUCE, 9, body)
    except OSError:
        return -1
    return response["responses"][0]["partition_responses"][0]["error_code"]


def first_produce_after(
    killed_at: float, port: int, topic: str, partition: int, timeout: float = 60
) -> float:
    """Seconds from `killed_at` (time.monotonic()) to the first produce to `partition`
    through the gateway on `port` that is stored."""
    deadline = killed_at + timeout
    while time.monotonic() < deadline:
        if produce_once(port, topic, partition) == ErrorCode.NONE:
            return time.monotonic() - killed_at
        time.sleep(0.02)
    raise TimeoutError(f"no produce to {topic}-{partition} stored within {timeout} s")


def idle_cpu(members: list[GatewayProcess], alone: GatewayProcess, seconds: float) -> dict:
    """CPU per second of each idle cluster member (heartbeats, reading them, following the
    metadata log) beside a gateway alone on the same broker, measured over the same window."""
    pids = {m.process.pid: f"member {i + 1}" for i, m in enumerate(members)}
    pids[alone.process.pid] = "alone"
    before = {pid: cpu_seconds([pid]) for pid in pids}
    time.sleep(seconds)
    return {name: (cpu_seconds([pid]) - before[pid]) / seconds for pid, name in pids.items()}


def _both_serving(members: list[GatewayProcess]) -> bool:
    views = [m.cluster() for m in members]
    return all(v.get("serving") and len(v.get("members", [])) == len(members) for v in views)


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    broker = SharedBroker(scratch / "broker").start()
    members = [
        cluster_member(
            scratch / f"g{node}",
            broker.service_url,
            f"m{node}",
            node,
            heartbeat_seconds=args.heartbeat,
            lease_seconds=args.lease,
        )
        for node in (1, 2)
    ]
    alone = GatewayProcess(
        scratch / "alone", extra=set_flags({"pulsar.service_url": broker.service_url})
    )
    times: list[float] = []
    idle: dict[str, float] = {}
    try:
        for member in [*members, alone]:
            member.start()
        wait_until(lambda: _both_serving(members), 60, 0.1, "both members serving")
        idle = idle_cpu(members, alone, args.idle_seconds)
        console.print(
            "idle CPU per second: "
            + ", ".join(f"{name} {share * 1000:.1f} ms" for name, share in idle.items())
        )
        alone.stop()
        topic = "failover"
        _call(
            members[0].kafka_port,
            19,  # CreateTopics
            4,
            {
                "topics": [
                    {
                        "name": topic,
                        "num_partitions": 12,
                        "replication_factor": -1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 10000,
                "validate_only": False,
            },
        )
        for round_ in range(args.kills):
            wait_until(lambda: _both_serving(members), 60, 0.1, "both members serving")
            victim, survivor = members[round_ % 2], members[(round_ + 1) % 2]
            victim_node = 1 + round_ % 2
            led = [
                p for p, node in leaders(survivor.kafka_port, topic).items() if node == victim_node
            ]
            partition = led[0]
            assert produce_once(victim.kafka_port, topic, partition) == ErrorCode.NONE
            killed_at = time.monotonic()
            victim.kill()
            took = first_produce_after(killed_at, survivor.kafka_port, topic, partition)
            times.append(took)
            console.print(
                f"kill {round_ + 1}: first produce on {topic}-{partition} after {took:.2f} s"
            )
            victim.start()
    finally:
        for member in members:
            member.stop()
        broker.stop()
    return {
        "idle_cpu_seconds_per_second": idle,
        "seconds": times,
        "p50": statistics.median(times),
        "max": max(times),
        "ratio_to_lease_p50": statistics.median(times) / args.lease,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--lease", type=float, default=6.0)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("reports/cluster-failover"))
    args = parser.parse_args()
    results: dict[str, Any] = {
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "environment": {**machine(), "loadavg_at_start": os.getloadavg()},
    }
    with tempfile.TemporaryDirectory() as scratch:
        results["failover"] = run(args, Path(scratch))
    results["environment"]["loadavg_at_end"] = os.getloadavg()
    failover = results["failover"]
    console.print(
        f"kill -9 -> first stored produce on a moved partition: p50 {failover['p50']:.2f} s, "
        f"max {failover['max']:.2f} s (lease {args.lease:g} s; p50/lease "
        f"{failover['ratio_to_lease_p50']:.2f})"
    )
    chart = bar_chart(
        "kill -9 -> first stored produce on a moved partition",
        [(f"kill {i + 1}", s) for i, s in enumerate(failover["seconds"])] + [("lease", args.lease)],
        "s",
    )
    rows = [{"kill": i + 1, "seconds": round(s, 2)} for i, s in enumerate(failover["seconds"])]
    json_path, html_path = write_report(args.out, "Cluster failover", results, [chart], rows)
    console.print(f"wrote {json_path} and {html_path}")


if __name__ == "__main__":
    main()
