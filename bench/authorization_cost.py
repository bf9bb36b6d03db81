"""What the authorizer costs a Produce and a Fetch, beside the same requests unchecked.

In one process, on the in-memory storage (so the gateway's own handler work is all that
is measured): the same Produce (one 100-byte record) and Fetch requests through the one
dispatcher, for a connection rights do not bind (the path without authorization, as with
SASL off: the peer) and for a bound user whose matching grant is the first of 1 or the
last of 50 grants. Rounds alternate between the cases, so machine noise hits all of them
alike; CPU time (process_time) per request and the ratios to the unchecked case are
printed, and written as JSON plus a self-contained HTML report. The check alone (one
`topic_allowed` call, as Produce makes per partition) is timed too: on a shared machine
the requests' own noise is far larger than it.

    .venv/bin/python -m bench.authorization_cost [--requests 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import time
import timeit
from pathlib import Path
from typing import Any

from harness.kafka_memory_store import memory_storage
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.handlers.kafka.authorization import topic_allowed
from pulsar_gateway.handlers.kafka.context import BrokerIdentity, KafkaContext
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.requests import answer
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.kafka_codec.record_batch import Record, encode_batch
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.rights import Rights, RightsTable
from pulsar_gateway.tools import html_report

TOPIC = "team-a/orders/bench"
READ_TOPIC = "team-a/orders/bench-read"  # one record: every Fetch does the same work


def frames(records: bytes, produce_to: str = TOPIC) -> dict[str, memoryview]:
    produce = {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": produce_to, "partition_data": [{"index": 0, "records": records}]}],
    }
    partition = {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": 0,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
        "partition_max_bytes": 1024,
    }
    fetch = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1024,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": READ_TOPIC, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return {
        "produce": memoryview(protocol.encode_request(ApiKey.PRODUCE, 9, 1, "b", produce)[4:]),
        "fetch": memoryview(protocol.encode_request(ApiKey.FETCH, 12, 1, "b", fetch)[4:]),
    }


def contexts() -> dict[str, KafkaContext]:
    """The unchecked context and two bound ones, over one memory storage."""
    storage = memory_storage()
    base = KafkaContext(
        KafkaSection(),
        storage,
        BrokerIdentity(1, "bench", 9092, "bench"),
        GroupCoordinator(storage.offsets),
    )
    one = model.grant(Rights(), model.NAMESPACE, "team-a/orders", ["read", "write"])
    many = Rights()
    for index in range(49):
        many = model.grant(many, model.NAMESPACE, f"other-{index}/ns", ["read", "write"])
    many = model.grant(many, model.NAMESPACE, "team-a/orders", ["read", "write"])
    authorizer = Authorizer(RightsTable({"one": one, "many": many}))
    return {
        "unchecked": base,
        "1 grant": dataclasses.replace(base, access=authorizer.bound("kafka", "p", "one")),
        "50 grants": dataclasses.replace(base, access=authorizer.bound("kafka", "p", "many")),
    }


async def cpu_per_request(context: KafkaContext, frame: memoryview, requests: int) -> float:
    header = protocol.parse_request_header(frame)
    start = time.process_time()
    for _ in range(requests):
        await answer(context, header, frame)
    return (time.process_time() - start) / requests


def check_alone(context: KafkaContext, calls: int) -> float:
    """Seconds per `topic_allowed` call (the answer remembered after the first)."""
    timer = timeit.Timer(lambda: topic_allowed(context, TOPIC, "write"), timer=time.process_time)
    return timer.timeit(number=calls) / calls


async def measure(requests: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    cases = contexts()
    storage = cases["unchecked"].storage
    await storage.topics.create("persistent://" + TOPIC, 1)
    wire = frames(encode_batch(0, [Record(0, 0, b"k", b"x" * 100, [])]))
    await storage.topics.create("persistent://" + READ_TOPIC, 1)
    seed = frames(encode_batch(0, [Record(0, 0, b"k", b"x" * 100, [])]), READ_TOPIC)["produce"]
    await answer(cases["unchecked"], protocol.parse_request_header(seed), seed)
    results: dict[str, dict[str, list[float]]] = {api: {} for api in (*wire, "check")}
    for _ in range(rounds):
        for name, context in cases.items():
            results["check"].setdefault(name, []).append(check_alone(context, requests * 10))
        for api, frame in wire.items():
            for name, context in cases.items():
                seconds = await cpu_per_request(context, frame, requests)
                results[api].setdefault(name, []).append(seconds)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("reports/authorization-cost"))
    args = parser.parse_args()
    results = asyncio.run(measure(args.requests, args.rounds))
    rows: list[dict[str, Any]] = []
    for api, cases in results.items():
        base = statistics.median(cases["unchecked"])
        for name, samples in cases.items():
            median = statistics.median(samples)
            rows.append(
                {
                    "api": api,
                    "case": name,
                    "cpu_us_per_request": round(median * 1e6, 2),
                    "spread_us": round((max(samples) - min(samples)) * 1e6, 2),
                    "ratio_to_unchecked": round(median / base, 3),
                }
            )
            print(
                f"{api:8} {name:10} {median * 1e6:8.2f} us CPU/request "
                f"(spread {(max(samples) - min(samples)) * 1e6:.2f})  x{median / base:.3f}"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    data = {"requests": args.requests, "rounds": args.rounds, "rows": rows}
    (args.out / "results.json").write_text(json.dumps(data, indent=2))
    charts = [
        html_report.bar_chart(
            f"{api}: CPU per request (median of {args.rounds} rounds)",
            [(r["case"], r["cpu_us_per_request"]) for r in rows if r["api"] == api],
            "us",
        )
        for api in results
    ]
    report = html_report.page(
        "Authorization cost per Kafka request", [*charts, html_report.table(rows)], data
    )
    (args.out / "report.html").write_text(report)
    print(f"wrote {args.out}/results.json and report.html")


if __name__ == "__main__":
    main()
