"""`pulsar-gateway migrate`: copy topics and group positions from a Kafka cluster.

Topics go through the gateway's Kafka listener (so the running gateway numbers the
records and knows the topics); the translation table goes to the gateway's metadata
store in Pulsar, found through the gateway's /health. Resumable: run it again after
a kill and it goes on where the translation table and the target say it stopped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.tools.gateway_link import GatewayLink
from pulsar_gateway.tools.migration.copier import PartitionCopier, PartitionResult
from pulsar_gateway.tools.migration.errors import MigrationError
from pulsar_gateway.tools.migration.kafka_side import KafkaCluster
from pulsar_gateway.tools.migration.pace import Pace
from pulsar_gateway.tools.migration.progress import MigrationProgress
from pulsar_gateway.tools.migration.translation import group_key

log = logging.getLogger("gateway.migrate")


@dataclass
class MigrationPlan:
    source: str  # bootstrap servers of the old cluster
    target: str  # the gateway's Kafka listener
    link: GatewayLink
    name: str  # the translation table's name; parity looks it up by the same name
    topics: list[str] = field(default_factory=list)
    topic_pattern: str | None = None
    group_pattern: str | None = ".*"
    parallel: int = 4
    entry_format: str | None = None  # for topics migrate creates; None: the gateway's default
    max_records_per_second: float = 0.0  # the whole copy's bound (pace.py); 0: none


@dataclass
class MigrationSummary:
    partitions: list[PartitionResult] = field(default_factory=list)
    groups: dict[str, dict[str, dict[int, tuple[int, int]]]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> list[PartitionResult]:
        return [p for p in self.partitions if p.error]

    @property
    def copied(self) -> int:
        return sum(p.copied for p in self.partitions)


class _RateColumn(TextColumn):
    def __init__(self) -> None:
        super().__init__("")

    def render(self, task: Any) -> Any:
        elapsed = task.finished_time or task.elapsed or 0
        speed = task.completed / elapsed if elapsed > 0.5 else 0
        return f"{speed:,.0f} records/s"


async def migrate(plan: MigrationPlan, console: Console | None = None) -> MigrationSummary:
    console = console or Console(stderr=True)
    started = time.monotonic()
    source = KafkaCluster(plan.source)
    target = KafkaCluster(plan.target)
    backend = PulsarBackend(plan.link.service_url)
    await source.start()
    await target.start()
    await backend.start()
    summary = MigrationSummary()
    metadata = MetadataStore(backend, plan.link.metadata_namespace)
    published = MigrationProgress.for_gateway(
        plan.name, plan.source, plan.target, plan.link.data_dir
    )
    published.write(force=True)
    try:
        await metadata.load()
        topics = await source.topics(plan.topics, plan.topic_pattern)
        if not topics:
            raise MigrationError("no topics to migrate (give --topics or --topic-regex)")
        counts = await source.partition_counts(topics)
        configs = {"pulsar.entry.format": plan.entry_format} if plan.entry_format else None
        created = await target.create_topics(counts, configs)
        if created:
            console.print(f"created on the gateway: {', '.join(created)}")
        tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])]
        ranges = await source.offset_range(tps)
        target_ends = {tp: end for tp, (_, end) in (await target.offset_range(tps)).items()}

        with _progress(console) as progress:
            copier = PartitionCopier(
                plan.name,
                metadata,
                await source.leaders(topics),
                await target.leaders(topics),
                lambda topic, partition, n: None,
                Pace(plan.max_records_per_second),
            )
            lefts = {(tp.topic, tp.partition): _left(copier, tp, ranges[tp]) for tp in tps}
            task = progress.add_task("copying", total=sum(lefts.values()))
            published.plan(lefts)

            def advance(topic: str, partition: int, n: int) -> None:
                progress.advance(task, n)
                published.advance(topic, partition, n)

            copier.progress = advance
            gate = asyncio.Semaphore(plan.parallel)

            async def one(tp: TopicPartition) -> PartitionResult:
                async with gate:
                    try:
                        result = await copier.copy(
                            tp.topic, tp.partition, ranges[tp], target_ends[tp]
                        )
                    except Exception as exc:  # noqa: BLE001 - reported per partition
                        log.error("copying %s-%d failed: %s", tp.topic, tp.partition, exc)
                        result = PartitionResult(tp.topic, tp.partition, error=str(exc))
                    published.finish_partition(tp.topic, tp.partition, result.error)
                    return result

            summary.partitions = list(await asyncio.gather(*(one(tp) for tp in tps)))
            progress.update(task, description="copied")

        if plan.group_pattern is not None:
            published.state = "groups"
            published.write(force=True)
            summary.groups = await _translate_groups(plan, source, target, metadata, copier, tps)
        failed = len(summary.failed)
        published.end(
            "failed" if failed else "done",
            f"{failed} partitions failed" if failed else None,
            len(summary.groups),
        )
    except BaseException as exc:
        published.end("failed", str(exc) or type(exc).__name__)
        raise
    finally:
        await metadata.close()  # a snapshot it started must not outlive the client
        await backend.close()
        await target.close()
        await source.close()
    summary.seconds = time.monotonic() - started
    return summary


def _left(copier: PartitionCopier, tp: TopicPartition, source: tuple[int, int]) -> int:
    state = copier.state_of(tp.topic, tp.partition)
    start = source[0] if state is None else max(state.next_source, source[0])
    return max(0, source[1] - start)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


async def _translate_groups(
    plan: MigrationPlan,
    source: KafkaCluster,
    target: KafkaCluster,
    metadata: MetadataStore,
    copier: PartitionCopier,
    tps: list[TopicPartition],
) -> dict[str, dict[str, dict[int, tuple[int, int]]]]:
    """Each source group's commits on the migrated partitions, as target offsets,
    committed on the gateway and kept beside the translation table."""
    done: dict[str, dict[str, dict[int, tuple[int, int]]]] = {}
    for group in await source.groups(plan.group_pattern):
        committed = await source.committed(group, tps)
        if not committed:
            continue
        translated: dict[TopicPartition, int] = {}
        record: dict[str, dict[int, tuple[int, int]]] = {}
        for tp, offset in committed.items():
            state = copier.state_of(tp.topic, tp.partition)
            if state is None:
                continue
            translated[tp] = state.next_target_for(offset)
            record.setdefault(tp.topic, {})[tp.partition] = (offset, translated[tp])
        if not translated:
            continue
        await target.commit(group, translated)
        await metadata.put(
            group_key(plan.name, group),
            {t: {str(p): list(pair) for p, pair in parts.items()} for t, parts in record.items()},
        )
        done[group] = record
    return done


def print_summary(summary: MigrationSummary, console: Console) -> None:
    table = Table(title="migration")
    for column in ("topic", "partitions", "copied now", "found copied", "lost to retention"):
        table.add_column(column, justify="right" if column != "topic" else "left")
    by_topic: dict[str, list[PartitionResult]] = {}
    for result in summary.partitions:
        by_topic.setdefault(result.topic, []).append(result)
    for topic, results in sorted(by_topic.items()):
        table.add_row(
            topic,
            str(len(results)),
            f"{sum(r.copied for r in results):,}",
            f"{sum(r.recovered for r in results):,}",
            f"{sum(r.skipped_by_retention for r in results):,}",
        )
    console.print(table)
    for group, topics in sorted(summary.groups.items()):
        moved = ", ".join(
            f"{t}-{p}: {s}->{d}"
            for t, parts in sorted(topics.items())
            for p, (s, d) in parts.items()
        )
        console.print(f"group [bold]{group}[/]: {moved}")
    rate = summary.copied / summary.seconds if summary.seconds else 0
    console.print(
        f"{summary.copied:,} records copied in {summary.seconds:.1f} s ({rate:,.0f} records/s)"
    )
    for result in summary.failed:
        console.print(f"[red]FAILED[/] {result.topic}-{result.partition}: {result.error}")
