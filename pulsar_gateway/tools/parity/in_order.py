"""Parity's first pass: each partition's two logs walked side by side, in offset order.

A faithful copy holds the source's records, in the source's order, at the target
offsets the migration's translation runs give (or, for a partition copied without one,
at the same distance from the target's start). That is one streaming pass per
partition: no digests, no shuffle, no join, and nothing kept per record (what pulsar-lite
sends a Pulsar reader ahead of its reads is another matter: docs/tools.md, "How parity
compares").
The pass only says "identical" or "differs here"; a partition that differs goes on to
the general comparison (compare.py), which matches records by content and names each
problem. On a passing migration every partition ends here.
"""

from __future__ import annotations

import bisect
from collections.abc import Generator, Iterable
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from pulsar_gateway.tools.parity.fingerprint import headers_bytes
from pulsar_gateway.tools.parity.sources import Record, kafka_records, pulsar_records


@dataclass(frozen=True)
class OffsetMap:
    """Where each source offset of one partition should be on the target: translation
    runs (source start, target start, length), else the aligned starts, else nowhere."""

    runs: tuple[tuple[int, int, int], ...] = ()
    align: tuple[int, int] | None = None

    def target_of(self, source: int) -> int | None:
        if self.runs:
            index = bisect.bisect_right(self.runs, source, key=_run_start) - 1
            if index >= 0:
                start, target, length = self.runs[index]
                if source < start + length:
                    return target + source - start
            return None
        if self.align is None:
            return None
        source_start, target_start = self.align
        return target_start + source - source_start


def _run_start(run: tuple[int, int, int]) -> int:
    return run[0]


@dataclass(frozen=True)
class Walk:
    """The pass over one partition: how many records agreed and, when the logs part,
    where first (source offset, target offset; None past that log's end)."""

    topic: str
    partition: int
    records: int
    first_difference: tuple[int | None, int | None] | None = None

    @property
    def identical(self) -> bool:
        return self.first_difference is None


def same_record(a: Record, b: Record) -> bool:
    """Key, value, headers and timestamp equal (offsets are checked by the caller).
    Headers compare by their encoding when the readers' containers differ."""
    if a[1:] == b[1:]:
        return True
    return (
        a[1] == b[1]
        and a[2] == b[2]
        and a[4] == b[4]
        and headers_bytes(a[3]) == headers_bytes(b[3])
    )


def walk(
    topic: str,
    partition: int,
    offsets: OffsetMap,
    source: Iterable[Record],
    target: Iterable[Record],
) -> Walk:
    """Walk both logs; stop at the first place they part."""
    count = 0
    targets = iter(target)
    for record in source:
        other = next(targets, None)
        if other is None:
            return Walk(topic, partition, count, (record[0], None))
        if other[0] != offsets.target_of(record[0]) or not same_record(record, other):
            return Walk(topic, partition, count, (record[0], other[0]))
        count += 1
    extra = next(targets, None)
    if extra is not None:
        return Walk(topic, partition, count, (None, extra[0]))
    return Walk(topic, partition, count)


def walk_partition(job: dict[str, Any]) -> Walk:
    """One Spark task: read both sides of a partition (job.py's `walk_jobs` builds the
    job) and walk them."""
    topic, partition = job["topic"], int(job["partition"])
    offsets = OffsetMap(
        tuple(tuple(run) for run in job["runs"]),  # type: ignore[misc]
        tuple(job["align"]) if job["align"] is not None else None,  # type: ignore[arg-type]
    )
    source_start, source_end = job["source_range"]
    source = kafka_records(job["source"], topic, partition, source_start, source_end)
    target = _target_records(job)
    with closing(source), closing(target):
        return walk(topic, partition, offsets, source, target)


def _target_records(job: dict[str, Any]) -> Generator[Record, None, None]:
    """The gateway's side: its Pulsar topic numbered as the gateway numbers it, or its
    Kafka port; nothing for a partition it does not have."""
    if job["target_range"] is None:
        return
    start, end = job["target_range"]
    if job["pulsar"] is not None:
        client = job.get("pulsar_client", "native")
        yield from pulsar_records(job["service_url"], job["pulsar"], client)
    else:
        yield from kafka_records(job["target"], job["topic"], int(job["partition"]), start, end)
