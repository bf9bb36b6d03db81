"""The console's migrations view on files the tools' own writers leave in a data directory:
a run's progress (tools/migration/progress.py) with a killed run told apart from a running
one, and parity reports (tools/parity/job.py's publish_report) listed newest first, with
their offending records shown to administrators only."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pulsar_gateway.console.migrations_view import MigrationsView
from pulsar_gateway.console.routes import Console
from pulsar_gateway.gateway import tool_reports
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.handlers.http_login import HttpCaller
from pulsar_gateway.security.rights import Rights
from pulsar_gateway.tools.gateway_link import GatewayLink
from pulsar_gateway.tools.migration.progress import MigrationProgress
from pulsar_gateway.tools.parity.job import ParityPlan, publish_report

AUTHORIZER = Authorizer()
ADMIN = HttpCaller("guest", AUTHORIZER.unrestricted("http", "127.0.0.1", "guest"))
ALICE = HttpCaller("alice", AUTHORIZER.bound("http", "127.0.0.1", "alice"))


class Monitor:
    """A caller with describe on the cluster: may monitor, is no administrator."""

    user = "monitor"
    administrator = False
    may_monitor = True


def report(verdict: str, name: str) -> dict:
    record = {"offset": 7, "key": "k7", "value": "v7", "headers": [["h", "x"]], "timestamp": 1}
    return {
        "verdict": verdict,
        "source": "old:9092",
        "target": "gw:9092",
        "migration": name,
        "seconds": 1.5,
        "totals": {"source_records": 10, "target_records": 9, "missing": 1},
        "partitions": [
            {"topic": "t", "partition": 0, "ok": True, "source_records": 5, "target_records": 5},
            {
                "topic": "t",
                "partition": 1,
                "ok": verdict == "pass",
                "source_records": 5,
                "target_records": 4,
                "missing": 1,
                "examples": {
                    "missing": [
                        {
                            "source_offset": 7,
                            "target_offset": None,
                            "source_record": record,
                            "target_record": None,
                        }
                    ]
                },
            },
        ],
        "groups": [{"group": "g", "topic": "t", "partition": 1, "drift": 2}],
    }


def publish(data_dir: Path, verdict: str, name: str) -> None:
    plan = ParityPlan(
        "old:9092", "gw:9092", GatewayLink("pulsar://x", data_dir=str(data_dir)), name
    )
    publish_report(plan, report(verdict, name), "<html><style>p{}</style><p>report</p></html>")


def test_a_runs_progress_and_a_killed_run(tmp_path: Path) -> None:
    view = MigrationsView(tmp_path)
    assert view.overview(ADMIN)["migrations"] == []
    run = MigrationProgress.for_gateway("orders/eu", "old:9092", "gw:9092", str(tmp_path))
    run.plan({("orders", 0): 100, ("orders", 1): 50})
    run.advance("orders", 0, 40)
    run.write(force=True)
    (shown,) = view.overview(ADMIN)["migrations"]
    assert (shown["name"], shown["state"], shown["done"], shown["total"]) == (
        "orders/eu",
        "copying",
        40,
        150,
    )
    assert [(p["partition"], p["done"]) for p in shown["partitions"]] == [(0, 40), (1, 0)]
    run.finish_partition("orders", 1, "refused")
    run.end("failed", "1 partitions failed")
    (shown,) = view.overview(ADMIN)["migrations"]
    assert shown["state"] == "failed" and shown["partitions_failed"] == 1
    assert shown["partitions"][0]["error"] == "refused"  # failures first
    # a run whose process is gone without writing its end: stopped
    code = (
        "from pulsar_gateway.tools.migration.progress import MigrationProgress as M\n"
        f"r = M.for_gateway('gone', 's', 't', {str(tmp_path)!r})\n"
        "r.plan({('x', 0): 10}); r.advance('x', 0, 3); r.write(force=True)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    states = {m["name"]: m["state"] for m in view.overview(ADMIN)["migrations"]}
    assert states == {"gone": "stopped", "orders/eu": "failed"}


def test_parity_reports_newest_first_records_for_administrators(tmp_path: Path) -> None:
    view = MigrationsView(tmp_path)
    publish(tmp_path, "fail", "first")
    publish(tmp_path, "pass", "second")
    listed = view.overview(ADMIN)["parity"]
    assert [(p["migration"], p["verdict"]) for p in listed] == [
        ("second", "pass"),
        ("first", "fail"),
    ]
    failed = listed[1]
    assert failed["failing_partitions"] == 1 and failed["groups_drifting"] == 1
    detail = view.parity_report(ADMIN, failed["id"])
    (offending,) = detail["offending"]
    assert offending["problem"] == "missing" and offending["source_record"]["key"] == "k7"
    assert [f["partition"] for f in detail["failing"]] == [1]
    hidden = view.parity_report(Monitor(), failed["id"])  # type: ignore[arg-type]
    assert "source_record" not in hidden["offending"][0]
    assert b"report" in view.parity_html(ADMIN, failed["id"])
    for caller in (Monitor(), ALICE):
        with pytest.raises(Exception, match="administrators only|describe on the cluster"):
            view.parity_html(caller, failed["id"])  # type: ignore[arg-type]
    with pytest.raises(Exception, match="describe on the cluster"):
        view.overview(ALICE)
    for bad in ("../gateway-link", "20260101T000000.000Z-../../x", "nope"):
        with pytest.raises(Exception, match="no such parity report"):
            view.parity_report(ADMIN, bad)


def test_only_the_newest_reports_are_kept(tmp_path: Path) -> None:
    directory = tmp_path / tool_reports.PARITY
    directory.mkdir()
    for i in range(5):
        (directory / f"20260101T00000{i}.000Z-m.json").write_text("{}")
        (directory / f"20260101T00000{i}.000Z-m.html").write_text("")
    tool_reports.keep_newest(directory, 2)
    assert sorted(p.name for p in directory.iterdir()) == [
        "20260101T000003.000Z-m.html",
        "20260101T000003.000Z-m.json",
        "20260101T000004.000Z-m.html",
        "20260101T000004.000Z-m.json",
    ]


def test_the_routes_serve_the_html_report(tmp_path: Path) -> None:
    publish(tmp_path, "fail", "m")
    console = Console(
        lambda: {"ok": True},
        None,
        None,
        None,
        list,
        lambda name: Rights(),
        ["guest"],
        MigrationsView(tmp_path),
    )
    status, _, body = asyncio.run(console("GET", "/console/api/migrations", ADMIN, b""))
    (listed,) = json.loads(body)["parity"]
    path = f"/console/reports/parity/{listed['id']}.html"
    assert asyncio.run(console("GET", path, ADMIN, b""))[:2] == (200, "text/html; charset=utf-8")
    assert asyncio.run(console("GET", path, ALICE, b""))[0] == 403
    assert asyncio.run(console("GET", "/console/reports/parity/x.html", ADMIN, b""))[0] == 404
