"""The console's migrations page on a real gateway: a real `pulsar-gateway migrate` from a
Kafka cluster (tansu) shown while it copies (paused with SIGSTOP, so the page is seen
mid-run) and once it is done, the page following it by itself; a parity report written
by parity's own report writer, listed with its verdict and counts, its offending records
on its page and its HTML report served; a user without rights sees none of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import REPO, GatewayProcess
from harness.tansu_process import TansuProcess
from harness.waiting import wait_until
from pulsar_gateway.tools.gateway_link import discover
from pulsar_gateway.tools.parity.compare import PartitionReport
from pulsar_gateway.tools.parity.job import ParityPlan, Verdict, write_report
from pulsar_gateway.tools.parity.samples import RecordSample
from tests.integration.test_console import (
    ALICE,
    CHROMIUM,
    CHROMIUM_ARGS,
    GUEST,
    PASSWORD,
    SCREENSHOTS,
    call,
    users,
)

RECORDS = 20_000
PARTITIONS = 2
TOPIC = f"moving-{uuid.uuid4().hex[:6]}"
NAME = f"eu-move-{uuid.uuid4().hex[:4]}"


@pytest.fixture(scope="module")
def tansu() -> Iterator[TansuProcess]:
    node = TansuProcess().start()
    yield node
    node.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("console-migrations"))
    process.start()
    users(process, "add", "alice", password=PASSWORD)
    users(process, "grant", "alice", "--namespace", "public/team-a", "-o", "all")
    yield process
    assert process.stop() == 0, process.log_tail()


def fill(tansu: TansuProcess) -> None:
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(TOPIC, f"value-{i}".encode(), f"k{i % 13}".encode(), i % PARTITIONS)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def runs(gateway: GatewayProcess) -> dict[str, Any]:
    status, answer = call(gateway, "/console/api/migrations")
    assert status == 200, answer
    return {r["name"]: r for r in answer["migrations"]}


def damaged_report(gateway: GatewayProcess, tmp_path: Any) -> Verdict:
    """A failed parity verdict written by parity's own writer: partition 1 lost source
    offset 7 and holds offset 9 twice."""
    plan = ParityPlan(
        source="old:9092",
        target=gateway.bootstrap,
        link=discover(f"http://127.0.0.1:{gateway.metrics_port}"),
        name=NAME,
        topics=[TOPIC],
        report=str(tmp_path / "parity"),
    )
    half = RECORDS // PARTITIONS
    ok = PartitionReport(TOPIC, 0, half, half, method="in order")
    bad = PartitionReport(TOPIC, 1, half, half)
    bad.counts["missing"], bad.counts["duplicate"] = 1, 1
    bad.examples = {"missing": [(7, None)], "duplicate": [(9, 10)]}
    verdict = Verdict(False, [ok, bad], [], 2.5, {})
    lost = RecordSample(7, "k7", "value-lost", (("trace", "t7"),), 1_700_000_000_000)
    twice = RecordSample(10, "k9", "value-twice", (), 1_700_000_000_001)
    verdict.samples = {(TOPIC, 1, "source", 7): lost, (TOPIC, 1, "target", 10): twice}
    write_report(plan, verdict)
    return verdict


def test_migrations_and_parity_in_the_console(
    gateway: GatewayProcess, tansu: TansuProcess, tmp_path: Any
) -> None:
    from playwright.sync_api import sync_playwright

    assert runs(gateway) == {}
    fill(tansu)
    command = [sys.executable, "-m", "pulsar_gateway.cli", "migrate", "--source"]
    command += [tansu.bootstrap, "--target", gateway.bootstrap, "--topics", TOPIC]
    command += ["--name", NAME, "--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
    # paced to about 10 s, so the page can be read while the copy runs (unpaced, 20k
    # records were sometimes copied between two looks and "copying" never seen)
    command += ["--max-records-per-second", str(RECORDS // 10)]
    migrate = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    errors: list[str] = []
    base = f"http://127.0.0.1:{gateway.metrics_port}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(
                http_credentials={"username": GUEST[0], "password": GUEST[1]},
                viewport={"width": 1280, "height": 900},
            )
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            try:
                wait_until(
                    lambda: runs(gateway).get(NAME, {}).get("state") == "copying",
                    timeout=60,
                    interval=0.05,
                    message="migrate copying",
                )
                migrate.send_signal(signal.SIGSTOP)  # held mid-run while the page is read
                running = runs(gateway)[NAME]
                assert running["total"] == RECORDS and running["done"] < RECORDS
                assert running["partition_count"] == PARTITIONS
                page.goto(f"{base}/#/migrations")
                page.wait_for_selector("#page[data-loaded='migrations']")
                page.wait_for_selector(f"tr:has-text('{NAME}') .warn:text-is('copying')")
                page.screenshot(path=str(SCREENSHOTS / "migrations-running.png"), full_page=True)
            finally:
                migrate.send_signal(signal.SIGCONT)
            assert migrate.wait(300) == 0
            done = runs(gateway)[NAME]
            assert (done["state"], done["done"], done["total"]) == ("done", RECORDS, RECORDS)
            assert all(p["done"] == p["total"] == RECORDS // PARTITIONS for p in done["partitions"])
            # the open page follows the run to its end by itself
            page.wait_for_selector(f"tr:has-text('{NAME}') .ok:text-is('done')", timeout=20_000)
            verdict = damaged_report(gateway, tmp_path)
            assert verdict.json_path is not None and verdict.json_path.exists()
            page.wait_for_selector(f"tr:has-text('{NAME}') :text-is('NO PARITY')", timeout=20_000)
            page.screenshot(path=str(SCREENSHOTS / "migrations.png"), full_page=True)
            page.click(f"tr:has-text('{NAME}') a:text-is('details')")
            page.wait_for_selector("#page[data-loaded='parity']")
            text = page.inner_text("#page")
            assert "value-lost" in text and "value-twice" in text and "Lost" in text
            page.screenshot(path=str(SCREENSHOTS / "parity.png"), full_page=True)
            with page.expect_popup() as opened:
                page.click("#parity-html")
            report = opened.value
            report.wait_for_load_state()
            assert "NO PARITY" in report.inner_text("body")
            report.screenshot(path=str(SCREENSHOTS / "parity-html.png"), full_page=True)
            # a run whose process died before its end: stopped, with how to resume it
            data_dir = discover(base).data_dir
            code = (
                "from pulsar_gateway.tools.migration.progress import MigrationProgress as M\n"
                f"r = M.for_gateway('killed-run', 's:1', 't:2', {data_dir!r})\n"
                "r.plan({('x', 0): 10}); r.advance('x', 0, 3); r.write(force=True)\n"
            )
            subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)
            page.goto(f"{base}/#/migrations")
            page.wait_for_selector("tr:has-text('killed-run') .bad:text-is('stopped')")
            assert "migrate --name killed-run" in page.inner_text("#page")
            context.close()
            # a user without rights on the cluster: no link, and the JSON says no
            context = browser.new_context(
                http_credentials={"username": ALICE[0], "password": ALICE[1]}
            )
            page = context.new_page()
            page.goto(f"{base}/#/migrations")
            page.wait_for_selector("#page[data-loaded='migrations']")
            assert page.is_hidden("#nav a[href='#/migrations']")
            assert NAME not in page.inner_text("#page")
            context.close()
        finally:
            browser.close()
            if migrate.poll() is None:
                os.kill(migrate.pid, signal.SIGKILL)
    assert errors == []
    assert call(gateway, "/console/api/migrations", ALICE)[0] == 403
    report_id = call(gateway, "/console/api/migrations")[1]["parity"][0]["id"]
    assert call(gateway, f"/console/api/parity/{report_id}", ALICE)[0] == 403
    status, html = call(gateway, f"/console/reports/parity/{report_id}.html")
    assert status == 200 and "value-lost" in html
    assert call(gateway, f"/console/reports/parity/{report_id}.html", ALICE)[0] == 403
