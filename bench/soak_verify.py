"""Reading everything back after the load stops, and holding it against what each client
was told: every acknowledged message present exactly once, in order per key (Kafka) or per
queue (AMQP). Each problem found is listed with the fault that preceded it.

Kafka is read by a fresh consumer from the beginning of each partition, up to the high
watermark taken after the producers finished. An acknowledged record must be at the very
offset its delivery report named: a record that moved would break every committed offset.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from bench.soak_common import KafkaAck, KafkaFailure, QueueLedger, Timeline, parse_value
from bench.soak_kafka import LOGGER

EXAMPLES = 15
Ident = tuple[str, str, int]  # (client, key or queue, seq)
Place = tuple[str, int, int]  # (topic, partition, offset)


@dataclass
class Readback:
    """Every record of the soak's partitions, in log order."""

    found: dict[Ident, list[Place]] = field(default_factory=lambda: defaultdict(list))
    logs: dict[tuple[str, int], list[tuple[int, Ident]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    foreign: list[str] = field(default_factory=list)
    high: dict[str, int] = field(default_factory=dict)
    gaps: int = 0
    problems: list[str] = field(default_factory=list)


def read_back(bootstrap: str, partitions: dict[str, int], deadline: float = 240) -> Readback:
    result = Readback()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"soak-verify-{time.time_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 16 << 20,
            "logger": logging.getLogger(LOGGER),
        }
    )
    try:
        todo: dict[tuple[str, int], int] = {}
        for topic, count in partitions.items():
            for p in range(count):
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                result.high[f"{topic}-{p}"] = high
                if high > 0:
                    todo[(topic, p)] = high
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for (t, p) in todo])
        last: dict[tuple[str, int], int] = {}
        ends = time.monotonic() + deadline
        while todo and time.monotonic() < ends:
            for message in consumer.consume(5000, 1):
                where = (message.topic(), message.partition())
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if message.offset() >= todo.get(where, 0):
                            todo.pop(where, None)
                    else:
                        result.problems.append(f"read-back {where}: {error.name()}")
                    continue
                offset = message.offset()
                if where in last and offset != last[where] + 1:
                    result.gaps += 1
                last[where] = offset
                ident = parse_value(message.value())
                if ident is None:
                    result.foreign.append(f"{where[0]}-{where[1]}@{offset}")
                    continue
                result.found[ident].append((where[0], where[1], offset))
                result.logs[where].append((offset, ident))
                if offset + 1 >= todo.get(where, 0):
                    todo.pop(where, None)
        for where, high in todo.items():
            result.problems.append(
                f"{where[0]}-{where[1]}: not read up to its high watermark {high} "
                f"within {deadline:g} s (reached {last.get(where, -1)})"
            )
    finally:
        consumer.close()
    return result


def verify_kafka(
    readback: Readback,
    acks: list[KafkaAck],
    failures: list[KafkaFailure],
    timeline: Timeline,
    roles: dict[str, str],
) -> dict[str, Any]:
    """Per producer: acknowledged, verified, lost, duplicated, misplaced, reordered, and
    ghosts (failed deliveries that were stored after all)."""
    by_ident = {(a.client, a.key, a.seq): a for a in acks}
    reordered_idents: set[Ident] = set()
    for records in readback.logs.values():
        highest: dict[tuple[str, str], int] = {}
        first: set[Ident] = set()
        for _, ident in sorted(records):
            if ident in first:
                continue  # a later copy is a duplicate, counted as such, not a reorder
            first.add(ident)
            stream = ident[:2]
            if ident[2] < highest.get(stream, -1):
                reordered_idents.add(ident)
            highest[stream] = max(highest.get(stream, -1), ident[2])
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    examples: dict[str, list[str]] = defaultdict(list)

    def example(kind: str, text: str) -> None:
        if len(examples[kind]) < EXAMPLES:
            examples[kind].append(text)

    for ident, ack in by_ident.items():
        row = rows[ack.client]
        row["acknowledged"] += 1
        places = readback.found.get(ident, [])
        acked_at = f"{ack.topic}-{ack.partition}@{ack.offset}"
        when = timeline.explain(ack.at)
        if not places:
            row["lost"] += 1
            example("lost", f"{ack.key} seq {ack.seq} acknowledged at {acked_at} ({when})")
        elif len(places) > 1:
            row["duplicated"] += len(places) - 1
            found = ", ".join(f"{t}-{p}@{o}" for t, p, o in places)
            example(
                "duplicated", f"{ack.key} seq {ack.seq} acked at {acked_at}, found {found} ({when})"
            )
        elif places[0] != (ack.topic, ack.partition, ack.offset):
            row["misplaced"] += 1
            t, p, o = places[0]
            example(
                "misplaced",
                f"{ack.key} seq {ack.seq} acked at {acked_at}, found at {t}-{p}@{o} ({when})",
            )
        if ident in reordered_idents:
            row["reordered"] += 1
            example(
                "reordered", f"{ack.key} seq {ack.seq} after a higher seq in {acked_at} ({when})"
            )
        if len(places) == 1 and places[0] == (ack.topic, ack.partition, ack.offset):
            if ident not in reordered_idents:
                row["verified"] += 1
    for failure in failures:
        row = rows[failure.client]
        row["failed"] += 1
        ident = (failure.client, failure.key, failure.seq)
        if ident in by_ident:
            continue
        if readback.found.get(ident):
            row["ghosts"] += 1
            example(
                "ghosts",
                f"{failure.key} seq {failure.seq} failed ({failure.error}) but is stored "
                f"({timeline.explain(failure.at)})",
            )
    table = []
    for client in sorted(rows):
        row = rows[client]
        table.append(
            {
                "producer": client,
                "role": roles.get(client, ""),
                **{
                    k: row[k]
                    for k in (
                        "acknowledged",
                        "verified",
                        "lost",
                        "duplicated",
                        "misplaced",
                        "reordered",
                        "failed",
                        "ghosts",
                    )
                },
            }
        )
    totals = Counter()
    for row in rows.values():
        totals.update(row)
    return {
        "clients": table,
        "totals": dict(totals),
        "examples": dict(examples),
        "foreign_records": readback.foreign[:EXAMPLES],
        "foreign_count": len(readback.foreign),
        "offset_gaps": readback.gaps,
        "high_watermarks": readback.high,
        "problems": readback.problems,
    }


def verify_amqp(ledgers: list[QueueLedger], timeline: Timeline) -> dict[str, Any]:
    """Per queue: what its consumer acknowledged during the run plus what the drain found,
    against what its publisher was confirmed. A redelivered message arriving out of order
    is counted as redelivered, not reordered: a requeue puts it back at the head. Order is
    judged on each message's first arrival; a second copy is a duplicate."""
    table = []
    totals: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)

    def example(kind: str, text: str) -> None:
        if len(examples[kind]) < EXAMPLES:
            examples[kind].append(text)

    for ledger in ledgers:
        counts = Counter(seq for seq, *_ in ledger.received)
        receipts: dict[int, list[str]] = defaultdict(list)
        for seq, redelivered, at, source in ledger.received:
            if counts[seq] > 1:
                flag = " (redelivered)" if redelivered else ""
                receipts[seq].append(f"{source}{flag} at {timeline.explain(at)}")
        row: Counter[str] = Counter()
        row["published"] = ledger.published
        row["confirmed"] = len(ledger.confirmed)
        row["nacked"] = len(ledger.nacked)
        row["in doubt"] = len(ledger.in_doubt)
        highest = -1
        reordered: set[int] = set()
        first: set[int] = set()
        for seq, redelivered, at, source in ledger.received:
            if seq in first:
                continue  # a later copy is a duplicate, counted as such, not a reorder
            first.add(seq)
            if seq < highest:
                if redelivered:
                    row["redelivered"] += 1
                else:
                    reordered.add(seq)
                    example(
                        "reordered",
                        f"{ledger.queue} seq {seq} after seq {highest} ({source}, "
                        f"{timeline.explain(at)})",
                    )
            highest = max(highest, seq)
        for seq, at in sorted(ledger.confirmed.items()):
            seen = counts.get(seq, 0)
            when = timeline.explain(at)
            if seen == 0:
                row["lost"] += 1
                example("lost", f"{ledger.queue} seq {seq} confirmed ({when})")
            elif seen > 1:
                row["duplicated"] += seen - 1
                example(
                    "duplicated",
                    f"{ledger.queue} seq {seq} confirmed at {at:.1f} s, received {seen} times: "
                    + "; ".join(receipts[seq]),
                )
            elif seq in reordered:
                row["reordered"] += 1
            else:
                row["verified"] += 1
        for seq, at in ledger.nacked.items():
            if counts.get(seq):
                row["ghosts"] += 1
                example(
                    "ghosts",
                    f"{ledger.queue} seq {seq} nacked but delivered ({timeline.explain(at)})",
                )
        for seq in ledger.in_doubt:
            if counts.get(seq, 0) > 1:
                row["duplicated"] += counts[seq] - 1
                example(
                    "duplicated",
                    f"{ledger.queue} seq {seq} (in doubt) received {counts[seq]} times",
                )
        known = set(ledger.confirmed) | set(ledger.nacked) | set(ledger.in_doubt)
        row["unknown"] = sum(1 for seq in counts if seq not in known) + ledger.foreign
        totals.update(row)
        table.append(
            {
                "queue": ledger.queue,
                "publisher": ledger.publisher,
                **{
                    k: row[k]
                    for k in (
                        "published",
                        "confirmed",
                        "verified",
                        "lost",
                        "duplicated",
                        "reordered",
                        "redelivered",
                        "nacked",
                        "in doubt",
                        "ghosts",
                        "unknown",
                    )
                },
            }
        )
    return {"queues": table, "totals": dict(totals), "examples": dict(examples)}
