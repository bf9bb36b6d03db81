"""`/cluster` and `pulsar-gateway cluster status`: who owns what, as one member sees it."""

from __future__ import annotations

from rich.console import Console

from harness.cluster_view import FixedView, member
from pulsar_gateway.gateway.cluster.report import ownership
from pulsar_gateway.gateway.cluster.view import (
    Member,
    SingleMemberView,
    owner_of,
    partition_key,
    vhost_key,
)
from pulsar_gateway.tools.cluster_status import render


def test_every_key_is_counted_for_its_owner_and_listed_up_to_the_limit() -> None:
    a, b, c = member("a", 0), member("b", 1), member("c", 2)
    view = FixedView(a, [b, c])
    partitions = [partition_key("orders", i) for i in range(30)]
    report = ownership(view, {"partitions": lambda: partitions, "vhosts": lambda: []}, limit=10)
    counts = report["owned_by_member"]["partitions"]
    assert sum(counts.values()) == 30
    for name in ("a", "b", "c"):
        expected = sum(1 for key in partitions if owner_of(key, [a, b, c]).member_id == name)
        assert counts[name] == expected
    assert len(report["owners"]["partitions"]) == 10
    assert report["truncated"] == ["partitions"]
    assert report["owned_by_member"]["vhosts"] == {"a": 0, "b": 0, "c": 0}
    assert report["members"] == ["a", "b", "c"]  # the view's own status is kept


def test_a_single_gateway_owns_everything_and_renders() -> None:
    me = Member("host/9092", 0, "127.0.0.1", 9092, "127.0.0.1", 5672, 9404)
    report = ownership(SingleMemberView(me), {"vhosts": lambda: [vhost_key("/")]})
    assert report["owners"]["vhosts"] == {"amqp/vhost//": "host/9092"}
    console = Console(record=True, width=200)
    render(report, console)
    text = console.export_text()
    assert "host/9092 (single gateway (no [cluster]))" in text
    assert "127.0.0.1:9092" in text
    assert "(me)" in text
