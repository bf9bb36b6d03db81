"""The console on a member of a two-gateway cluster (docs/console.md): each member reads
the partitions it serves and names the others as served elsewhere, never opening them
(two numberers of one partition would disagree); between them the members account for
every record, and the message browser refuses a partition served elsewhere."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import (
    GatewayProcess,
    cluster_member,
    wait_until_members_see_each_other,
)
from harness.shared_broker import SharedBroker
from harness.waiting import wait_until

PARTITIONS = 6
PER_PARTITION = 4


def get(member: GatewayProcess, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{member.metrics_port}{path}",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_each_member_shows_what_it_serves(tmp_path: Path) -> None:
    broker = SharedBroker(tmp_path / "broker").start()
    members: list[GatewayProcess] = []
    try:
        for node in (1, 2):
            member = cluster_member(tmp_path / f"g{node}", broker.service_url, f"m{node}", node)
            members.append(member.start())
        wait_until_members_see_each_other(members)
        servers = ",".join(m.bootstrap for m in members)
        topic = f"spread-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": servers})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        producer = Producer({"bootstrap.servers": servers})
        for partition in range(PARTITIONS):
            for i in range(PER_PARTITION):
                producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
        assert producer.flush(60) == 0

        def pages() -> list[Any]:
            return [get(member, f"/console/api/topics/{topic}")[1] for member in members]

        def accounted() -> list[Any] | None:
            shown = pages()
            served = [
                [p for p in page["partitions"] if p.get("served_here") is not False]
                for page in shown
            ]
            owned = sorted(p["partition"] for rows in served for p in rows)
            records = sum(p["records"] for rows in served for p in rows)
            done = owned == list(range(PARTITIONS)) and records == PARTITIONS * PER_PARTITION
            return served if done else None

        wait_until(accounted, 30, 0.5, "the two members to account for every record")
        # each partition is served by one member, so the other names it as elsewhere
        here, elsewhere = next(
            (index, row["partition"])
            for index, page in enumerate(pages())
            for row in page["partitions"]
            if row.get("served_here") is False
        )
        path = f"/console/api/topics/{topic}/messages?partition={elsewhere}"
        assert get(members[here], path)[0] == 409
        status, page = get(members[1 - here], path)
        assert status == 200 and len(page["records"]) == PER_PARTITION
    finally:
        for member in members:
            member.stop()
        broker.stop()
