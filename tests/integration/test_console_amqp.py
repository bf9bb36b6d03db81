"""The console's AMQP rates and channels on a real gateway with pika clients: each queue's
counters (`message_stats`: publish, deliver_get, ack) count what the clients did, the
queues page turns them into rates by itself while it is open, and the channels page (and
`/api/channels`) shows each channel's prefetch, unacked messages, consumers and mode; a
user sees only its own connections' channels."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pika
import pytest

from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until
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

QUEUE = f"work-{uuid.uuid4().hex[:6]}"
PREFETCH = 7


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("console-amqp"))
    process.start()
    users(process, "add", "alice", password=PASSWORD)
    users(process, "grant", "alice", "--namespace", "public/team-a", "-o", "all")
    yield process
    assert process.stop() == 0, process.log_tail()


def stats(gateway: GatewayProcess) -> dict[str, int]:
    status, queue = call(gateway, f"/api/queues/%2F/{QUEUE}")
    assert status == 200, queue
    return queue["message_stats"]


def test_queue_counters_channels_and_rates_in_the_console(gateway: GatewayProcess) -> None:
    from playwright.sync_api import sync_playwright

    connection = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    publisher = connection.channel()
    publisher.confirm_delivery()
    publisher.queue_declare(QUEUE)
    for i in range(20):
        publisher.basic_publish("", QUEUE, f"job {i}".encode())
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=PREFETCH)
    got: list[int] = []
    consumer.basic_consume(QUEUE, lambda ch, method, props, body: got.append(method.delivery_tag))
    wait_until(
        lambda: connection.process_data_events(0.1) or len(got) >= PREFETCH,
        message="a prefetch's worth delivered",
    )
    for tag in got[:3]:
        consumer.basic_ack(tag)
    expected = {"publish": 20, "deliver_get": PREFETCH + 3, "ack": 3}  # 3 acked: 3 more sent
    wait_until(
        lambda: connection.process_data_events(0.1) or stats(gateway) == expected,
        message=f"counters {expected}",
    )
    wait_until(lambda: connection.process_data_events(0.1) or len(got) == PREFETCH + 3)

    rows = call(gateway, "/api/channels")[1]
    by_number = {r["number"]: r for r in rows}
    assert by_number[1]["confirm"] is True and by_number[1]["consumer_count"] == 0
    mine = by_number[2]
    assert (mine["prefetch_count"], mine["messages_unacknowledged"], mine["consumer_count"]) == (
        PREFETCH,
        PREFETCH,
        1,
    )
    name = mine["connection_details"]["name"]
    assert call(gateway, f"/api/connections/{quote(name, safe='')}/channels")[1] == rows
    assert call(gateway, "/api/channels", ALICE) == (200, [])  # not her connection

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
            page.goto(f"{base}/#/channels")
            page.wait_for_selector("#page[data-loaded='channels']")
            text = page.inner_text("#page")
            assert name in text and "confirm" in text
            row = page.inner_text(f"tr:has(td:text-is('{name}')):has(td:text-is('2'))")
            assert f"\t{PREFETCH}\t" in row, row
            page.screenshot(path=str(SCREENSHOTS / "channels.png"), full_page=True)
            page.goto(f"{base}/#/queues")
            page.wait_for_selector("#page[data-loaded='queues']")
            publish_rate = f"tr:has-text('{QUEUE}') td.rate-publish"
            assert page.inner_text(publish_rate) == "–"  # one reading: no rate yet

            def publishing_shows() -> bool:
                for i in range(10):
                    publisher.basic_publish("", QUEUE, f"more {i}".encode())
                return page.inner_text(publish_rate) not in ("–", "0.00")

            wait_until(publishing_shows, timeout=30, interval=0.5, message="a publish rate")
            page.screenshot(path=str(SCREENSHOTS / "queues-rates.png"), full_page=True)
            context.close()
        finally:
            browser.close()
    connection.close()
    assert errors == []
