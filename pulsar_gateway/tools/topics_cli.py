"""`pulsar-gateway topics pending-deletion`: the Pulsar topics of deleted Kafka topics whose
stored messages the backend could not delete (docs/pulsar-mapping.md, 'Deleting topics').

On the embedded broker, which has no admin API, DeleteTopics retires a topic at once for
Kafka clients but its Pulsar topics stay on disk; the gateway keeps one metadata key per
such incarnation. This lists them from the gateway's metadata store, as a gateway starting
now would load it, so an operator knows what a backend with deletion (or a new data
directory) would reclaim.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from pulsar_gateway.gateway.topic_names import kafka_topic_name
from pulsar_gateway.tools.gateway_link import GatewayLink


def add_parser(commands: Any, add_gateway_link: Callable[[argparse.ArgumentParser], None]) -> None:
    topics = commands.add_parser("topics", help="Kafka topics kept by the gateway")
    tools = topics.add_subparsers(dest="topics_command", metavar="TOOL")
    pending = tools.add_parser(
        "pending-deletion",
        help="Pulsar topics of deleted Kafka topics whose storage waits for reclamation",
        description="List the Pulsar topics of deleted Kafka topics whose stored messages the "
        "backend could not delete (the embedded broker has no admin API): the Kafka topic, "
        "its incarnations (runs of consecutive ones), partitions, Pulsar topics and when the "
        "last was deleted.",
    )
    add_gateway_link(pending)
    pending.add_argument("--json", action="store_true", help="print JSON instead of a table")


async def waiting(link: GatewayLink) -> list[dict[str, Any]]:
    """What the gateway's metadata store lists as waiting for reclamation."""
    # here, not at the top: building the command line must not load pulsar-client
    from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
    from pulsar_gateway.gateway.metadata_store import MetadataStore
    from pulsar_gateway.storage.kafka.topic_registry import TopicRegistry

    backend = PulsarBackend(link.service_url)
    await backend.start()
    metadata = MetadataStore(backend, link.metadata_namespace)
    try:
        await metadata.load()
        rows = TopicRegistry(metadata).waiting_for_reclamation()
    finally:
        await metadata.close()
        await backend.close()
    for row in rows:
        row["kafka_topic"] = kafka_topic_name(
            str(row.get("topic", "")), link.kafka_tenant, link.kafka_namespace
        )
    return sorted(rows, key=lambda row: (row["topic"], row["incarnations"][0]))


def render(rows: list[dict[str, Any]], console: Console) -> None:
    count = sum(row["incarnations"][1] - row["incarnations"][0] + 1 for row in rows)
    table = Table(title=f"{count} deleted topic incarnation(s) waiting for reclamation")
    for column in ("kafka topic", "incarnations", "partitions each", "pulsar topics", "last"):
        table.add_column(column)
    for row in rows:
        first, last = row["incarnations"]
        deleted = datetime.fromtimestamp(row.get("deleted_ms", 0) / 1000, UTC)
        oldest, newest = row["pulsar_topics"]
        table.add_row(
            row["kafka_topic"],
            str(first) if first == last else f"{first}-{last}",
            str(row["partitions"]),
            f"{oldest}-partition-*" + ("" if first == last else f" .. {newest}-partition-*"),
            deleted.strftime("%Y-%m-%d %H:%M:%S UTC"),
        )
    console.print(table)


async def run_topics(args: argparse.Namespace, link: GatewayLink) -> int:
    rows = await waiting(link)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        render(rows, Console())
    return 0
