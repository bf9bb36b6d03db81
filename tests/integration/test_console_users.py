"""Users and rights edited from the console of a real gateway: an administrator adds a
user, who then logs in to the console and over AMQP with that password; a grant lets it
see a tenant's topic, a revoke takes it back; all through the page's dialogs in headless
Chromium, and the same as JSON. A user who is no administrator sees a read-only page and
is refused every change."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

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
    act,
    call,
    produce,
    users,
)

TEAM_TOPIC = "public/team-a/ledger"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("console-users"))
    process.start()
    users(process, "add", "alice", password=PASSWORD)
    users(process, "grant", "alice", "--namespace", "public/team-a", "-o", "describe")
    produce(process, TEAM_TOPIC, 2)
    yield process
    assert process.stop() == 0, process.log_tail()


def topics_of(gateway: GatewayProcess, login: tuple[str, str]) -> list[str] | int:
    status, listed = call(gateway, "/console/api/topics", login)
    return [t["name"] for t in listed] if status == 200 else status


def test_users_and_rights_as_json(gateway: GatewayProcess) -> None:
    carol = (f"carol-{uuid.uuid4().hex[:4]}", "carol's pw")
    assert act(gateway, ALICE, action="create_user", user=carol[0], password=carol[1])[0] == 403
    assert act(gateway, action="create_user", user=carol[0], password=carol[1]) == (
        200,
        {"created": carol[0]},
    )
    # the password works for the console, and with a grant for AMQP too
    assert topics_of(gateway, carol) == []
    grant = {"user": carol[0], "resource": "namespace", "pattern": "public/team-a"}
    assert act(gateway, action="grant", operations=["describe"], **grant)[0] == 200
    wait_until(lambda: topics_of(gateway, carol) == [TEAM_TOPIC], message="the grant applied")
    url = f"amqp://{carol[0]}:carol%27s%20pw@127.0.0.1:{gateway.amqp_port}/team-a"
    pika.BlockingConnection(pika.URLParameters(url)).close()
    assert act(gateway, action="revoke", operations=[], **grant)[0] == 200
    wait_until(lambda: topics_of(gateway, carol) == [], message="the revoke applied")
    assert act(gateway, action="set_password", user=carol[0], password="another")[0] == 200
    wait_until(lambda: topics_of(gateway, carol) == 401, message="the old password refused")
    assert topics_of(gateway, (carol[0], "another")) == []
    status, refused = act(gateway, action="grant", operations=["fly"], **grant)
    assert status == 400 and "fly" in refused["reason"]
    assert act(gateway, action="remove_user", user=carol[0]) == (200, {"removed": carol[0]})
    wait_until(lambda: topics_of(gateway, (carol[0], "another")) == 401, message="removed")
    assert act(gateway, action="remove_user", user="guest")[0] == 409  # amqp.users


def test_users_page_edits_through_dialogs(gateway: GatewayProcess) -> None:
    from playwright.sync_api import sync_playwright

    dave = f"dave-{uuid.uuid4().hex[:4]}"
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
            page.goto(f"{base}/#/users")
            page.wait_for_selector("#page[data-loaded='users']")
            page.click("button[data-action='create_user']")
            page.fill("#f-user", dave)
            page.fill("#f-password", "dave pw")
            page.fill("#f-again", "dave pw")
            page.click("#confirm-ok")
            page.wait_for_selector(f"#page td:text-is('{dave}')", timeout=10_000)
            assert topics_of(gateway, (dave, "dave pw")) == []
            page.click(f"button[data-action='grant'][data-user='{dave}']")
            page.select_option("#f-resource", "namespace")
            page.fill("#f-pattern", "public/team-a")
            page.fill("#f-operations", "read")
            page.click("#confirm-ok")
            # the namespace grant is one PREFIXED topic rule (read): its Revoke button
            grant = f"button[data-action='revoke'][data-user='{dave}'][data-rname='public/team-a/']"
            page.wait_for_selector(grant, timeout=10_000)
            wait_until(lambda: topics_of(gateway, (dave, "dave pw")) == [TEAM_TOPIC])
            page.screenshot(path=str(SCREENSHOTS / "users-admin.png"), full_page=True)
            page.click(grant)
            page.click("#confirm-cancel")  # a cancelled dialog changes nothing
            assert topics_of(gateway, (dave, "dave pw")) == [TEAM_TOPIC]
            page.click(grant)
            page.click("#confirm-ok")
            page.wait_for_selector(grant, state="detached", timeout=10_000)
            wait_until(lambda: topics_of(gateway, (dave, "dave pw")) == [])
            # a new password, once mistyped (refused in the page), then twice the same
            page.click(f"button[data-action='set_password'][data-user='{dave}']")
            page.fill("#f-password", "new pw")
            page.fill("#f-again", "other pw")
            page.click("#confirm-ok")
            page.wait_for_selector("#toast.error:has-text('the passwords differ')")
            page.click(f"button[data-action='set_password'][data-user='{dave}']")
            page.fill("#f-password", "new pw")
            page.fill("#f-again", "new pw")
            page.click("#confirm-ok")
            page.wait_for_selector("#toast:has-text('password_set')", timeout=10_000)
            wait_until(lambda: topics_of(gateway, (dave, "new pw")) == [], message="new pw")
            assert topics_of(gateway, (dave, "dave pw")) == 401
            page.click(f"button[data-action='remove_user'][data-user='{dave}']")
            page.click("#confirm-ok")
            page.wait_for_selector(f"#page td:text-is('{dave}')", state="detached", timeout=10_000)
            wait_until(lambda: topics_of(gateway, (dave, "new pw")) == 401, message="removed")
            context.close()
            # alice: no administrator, a read-only page with herself only
            context = browser.new_context(
                http_credentials={"username": ALICE[0], "password": ALICE[1]}
            )
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"{base}/#/users")
            page.wait_for_selector("#page[data-loaded='users']")
            assert page.query_selector("#page button") is None
            assert "Read-only" in page.inner_text("#page") and dave not in page.inner_text("#page")
            page.screenshot(path=str(SCREENSHOTS / "alice-users-read-only.png"), full_page=True)
            context.close()
        finally:
            browser.close()
    assert errors == []
