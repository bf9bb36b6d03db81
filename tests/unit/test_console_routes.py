"""The console's routes without a gateway: its three files and nothing else from disk, the
JSON answers' errors, and an action's body checked before anything runs."""

from __future__ import annotations

import asyncio
import json

from pulsar_gateway.console.routes import Console, alarms
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.handlers.http_login import HttpCaller

AUTHORIZER = Authorizer()
ADMIN = HttpCaller("guest", AUTHORIZER.unrestricted("http", "127.0.0.1", "guest"))
ALICE = HttpCaller("alice", AUTHORIZER.bound("http", "127.0.0.1", "alice"))


def console() -> Console:
    return Console(
        lambda: {"ok": True},
        None,
        None,
        None,
        lambda: ["alice", "bob"],
        AUTHORIZER.rights_for,
        ["guest"],
    )


def answer(method: str, path: str, caller: HttpCaller = ADMIN, body: bytes = b"") -> tuple:
    return asyncio.run(console()(method, path, caller, body))


def test_only_the_consoles_own_files_are_served() -> None:
    status, kind, page = answer("GET", "/")
    assert status == 200 and kind.startswith("text/html") and b"console.js" in page
    assert answer("GET", "/console/static/console.js")[1].startswith("text/javascript")
    assert answer("GET", "/console/static/console.css")[0] == 200
    for path in ("/console/static/index.html", "/console/static/../routes.py", "/console/x"):
        assert answer("GET", path)[0] == 404, path


def test_reads_and_their_errors() -> None:
    status, _, body = answer("GET", "/console/api/me", ALICE)
    assert json.loads(body) == {
        "user": "alice",
        "administrator": False,
        "may_monitor": False,
        "kafka": False,
        "amqp": False,
        "topic_sizes": False,
    }
    assert answer("GET", "/console/api/topics")[0] == 404  # no Kafka listener
    assert answer("DELETE", "/console/api/me")[0] == 405
    users = json.loads(answer("GET", "/console/api/users", ALICE)[2])["users"]
    assert [u["user"] for u in users] == ["alice"]
    users = json.loads(answer("GET", "/console/api/users")[2])["users"]
    assert [u["user"] for u in users] == ["alice", "bob", "guest"]


def test_an_actions_body_is_checked_first() -> None:
    for body, reason in (
        (b"not json", "not JSON"),
        (b"[1]", "JSON object"),
        (b'{"action": "create_topic"}', "no action"),  # no Kafka listener here
        (b'{"action": "launch"}', "no action"),
    ):
        status, _, answered = answer("POST", "/console/api/actions", body=body)
        assert status == 400 and reason in json.loads(answered)["reason"], body


def test_alarms_say_what_to_look_at() -> None:
    assert alarms({"ok": True, "backend_reachable": True, "broker_restarts": 0}) == []
    assert alarms({"ok": False, "backend_reachable": False}) == [
        "the Pulsar backend is unreachable"
    ]
    found = alarms({"ok": True, "broker_restarts": 2, "cluster": {"enabled": True}})
    assert found == [
        "the embedded broker restarted 2 times",
        "this cluster member is not serving its share",
    ]
