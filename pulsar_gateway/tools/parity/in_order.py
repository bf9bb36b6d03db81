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
import dataclasses
import time
from collections.abc import Generator, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from pulsar_gateway.tools.parity.chunks import Chunk, Row, kafka_chunks, no_collector
from pulsar_gateway.tools.parity.fingerprint import headers_bytes
from pulsar_gateway.tools.parity.records import plain_headers
from pulsar_gateway.tools.parity.sources import pulsar_chunks


@dataclass(frozen=True)
class OffsetMap:
    """Where each source offset of one partition should be on the target: translation
    runs (source start, target start, length), else the aligned starts, else nowhere."""

    runs: tuple[tuple[int, int, int], ...] = ()
    align: tuple[int, int] | None = None

    def span(self, source: int, count: int) -> int | None:
        """Where source offsets [source, source + count) should start on the target when
        one run (or the aligned starts) takes them all, else None."""
        if self.runs:
            index = bisect.bisect_right(self.runs, source, key=_run_start) - 1
            if index >= 0:
                start, target, length = self.runs[index]
                if source + count <= start + length:
                    return target + source - start
            return None
        return self.target_of(source)

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
    cpu_seconds: float = 0.0  # the task's own CPU (job.py sums it per phase)

    @property
    def identical(self) -> bool:
        return self.first_difference is None


def same_row(a: Row, b: Row) -> bool:
    """Key, value, headers and timestamp equal (offsets are checked by the caller).
    Headers compare by their encoding when the readers' containers differ."""
    if a == b:
        return True
    return (
        a[0] == b[0]
        and a[1] == b[1]
        and a[3] == b[3]
        and headers_bytes(plain_headers(a[2])) == headers_bytes(plain_headers(b[2]))
    )


def agreeing(offsets: OffsetMap, source: Chunk, target: Chunk) -> int:
    """How many of two equally long chunks' records agree before the first that does not
    (all of them: their length). When both sides' offsets follow each other and one run
    maps the source's onto the target's, the rows are compared as two lists at once;
    otherwise, or when the lists differ, record by record, exactly as strictly."""
    source_offsets, source_rows = source
    target_offsets, target_rows = target
    count = len(source_rows)
    if (
        isinstance(source_offsets, range)
        and isinstance(target_offsets, range)
        and offsets.span(source_offsets[0], count) == target_offsets[0]
        and source_rows == target_rows
    ):
        return count
    for i in range(count):
        if target_offsets[i] != offsets.target_of(source_offsets[i]):
            return i
        if not same_row(source_rows[i], target_rows[i]):
            return i
    return count


def walk(
    topic: str,
    partition: int,
    offsets: OffsetMap,
    source: Iterable[Chunk],
    target: Iterable[Chunk],
) -> Walk:
    """Walk both logs, a stretch as long as both sides' next chunks at a time; stop at the
    first place they part."""
    count = 0
    sources, targets = _filled(source), _filled(target)
    left = next(sources, None)
    right = next(targets, None)
    while left is not None and right is not None:
        size = min(len(left[1]), len(right[1]))
        here = (left[0][:size], left[1][:size])
        there = (right[0][:size], right[1][:size])
        agreed = agreeing(offsets, here, there)
        count += agreed
        if agreed < size:
            return Walk(topic, partition, count, (here[0][agreed], there[0][agreed]))
        left = (left[0][size:], left[1][size:]) if size < len(left[1]) else next(sources, None)
        right = (right[0][size:], right[1][size:]) if size < len(right[1]) else next(targets, None)
    if left is not None:
        return Walk(topic, partition, count, (left[0][0], None))
    if right is not None:
        return Walk(topic, partition, count, (None, right[0][0]))
    return Walk(topic, partition, count)


def _filled(chunks: Iterable[Chunk]) -> Iterator[Chunk]:
    return (chunk for chunk in chunks if chunk[1])


def walk_partition(job: dict[str, Any]) -> Walk:
    """One Spark task: read both sides of a partition (job.py's `walk_jobs` builds the
    job) and walk them."""
    cpu = time.process_time()
    topic, partition = job["topic"], int(job["partition"])
    offsets = OffsetMap(
        tuple(tuple(run) for run in job["runs"]),  # type: ignore[misc]
        tuple(job["align"]) if job["align"] is not None else None,  # type: ignore[arg-type]
    )
    source_start, source_end = job["source_range"]
    source = kafka_chunks(job["source"], topic, partition, source_start, source_end)
    target = _target_chunks(job)
    with closing(source), closing(target), no_collector():
        result = walk(topic, partition, offsets, source, target)
    return dataclasses.replace(result, cpu_seconds=time.process_time() - cpu)


def _target_chunks(job: dict[str, Any]) -> Generator[Chunk, None, None]:
    """The gateway's side: its Pulsar topic numbered as the gateway numbers it, or its
    Kafka port; nothing for a partition it does not have."""
    if job["target_range"] is None:
        return
    start, end = job["target_range"]
    if job["pulsar"] is not None:
        client = job.get("pulsar_client", "native")
        yield from pulsar_chunks(job["service_url"], job["pulsar"], client)
    else:
        yield from kafka_chunks(job["target"], job["topic"], int(job["partition"]), start, end)
