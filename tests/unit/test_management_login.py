"""The management port's login (handlers/http_login.py) and the server's rules around it
(gateway/metrics.py): `metrics.require_login`, `metrics.host` checked, HTTP Basic against
the users store and the bootstrap table with the caller's address, unknown users refused
in a wrong password's time."""

from __future__ import annotations

import asyncio
import base64
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pulsar_gateway.gateway.config import ConfigError, load_settings
from pulsar_gateway.gateway.metrics import MetricsServer
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.handlers.http_login import HttpLogins
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.credentials import make_record
from pulsar_gateway.security.logins import PasswordLogins
from pulsar_gateway.security.rights import Rights, RightsTable
from tests.unit.test_login_timing import assert_alike

REPO = Path(__file__).resolve().parents[2]


class Directory:
    def __init__(self, **passwords: str) -> None:
        self.records = {name: make_record(pw) for name, pw in passwords.items()}

    def lookup(self, name: str) -> Mapping[str, Any] | None:
        return self.records.get(name)


def _logins() -> HttpLogins:
    table = RightsTable(
        {
            "mon": model.grant(Rights(), model.CLUSTER, "", ["describe"]),
            "alice": model.grant(Rights(), model.NAMESPACE, "public/team-a", ["read"]),
        }
    )
    users = Directory(alice="alice-pw", mon="mon-pw", root="root-pw")
    return HttpLogins(
        PasswordLogins(users, {"guest": "guest"}), Authorizer(table, superusers=["root"])
    )


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_who_logs_in_and_what_they_may_see() -> None:
    async def scenario() -> None:
        logins = _logins()
        alice = await logins(_basic("alice", "alice-pw"), "192.0.2.9")
        assert alice is not None and not alice.administrator and not alice.may_monitor
        assert alice.may_see_namespace("public/team-a")
        assert not alice.may_see_namespace("public/default")
        mon = await logins(_basic("mon", "mon-pw"), "192.0.2.9")
        assert mon is not None and mon.may_monitor and not mon.administrator
        root = await logins(_basic("root", "root-pw"), "192.0.2.9")
        assert root is not None and root.administrator and root.may_monitor
        guest = await logins(_basic("guest", "guest"), "127.0.0.1")
        assert guest is not None and guest.administrator  # the operator's, as on AMQP
        assert await logins(_basic("guest", "guest"), "192.0.2.9") is None  # loopback only
        assert await logins(_basic("guest", "guest"), "::ffff:192.0.2.9") is None
        for bad in (None, "", "Bearer x", "Basic !!", _basic("alice", "nope"), "Basic Og=="):
            assert await logins(bad, "127.0.0.1") is None

    asyncio.run(scenario())


def test_an_unknown_user_costs_a_wrong_password() -> None:
    logins = _logins()
    check = logins.logins.check
    assert_alike(
        lambda: check("alice", "wrong", "127.0.0.1"), lambda: check("nobody", "wrong", "127.0.0.1")
    )


def test_require_login_puts_metrics_behind_the_login() -> None:
    async def scenario() -> None:
        server = MetricsServer(
            "127.0.0.1", 0, lambda: {"ok": True}, login=_logins(), require_login=True
        )
        await server.start()

        def status(path: str, authorization: str | None = None) -> int:
            request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}")
            if authorization:
                request.add_header("Authorization", authorization)
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return response.status
            except urllib.error.HTTPError as refused:
                return refused.code

        try:
            seen = await asyncio.to_thread(
                lambda: [
                    status("/health"),
                    status("/metrics"),
                    status("/metrics", _basic("alice", "alice-pw")),
                    status("/metrics", _basic("mon", "mon-pw")),
                    status("/metrics/", _basic("root", "root-pw")),
                    status("/cluster", _basic("root", "root-pw")),  # not wired: none here
                    status("/elsewhere"),
                ]
            )
        finally:
            await server.stop()
        assert seen == [200, 401, 403, 200, 200, 404, 404]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "host", ["", " ", "http://0.0.0.0", "0.0.0.0:9404", "a b", "host,other", "999.1.1.1"]
)
def test_metrics_host_must_be_an_address(host: str) -> None:
    with pytest.raises(ConfigError, match=r"setting 'metrics\.host'"):
        load_settings(REPO / "conf/gateway.toml", {"metrics.host": host}, environ={})


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "0.0.0.0", "localhost", "gw.example"])
def test_metrics_host_takes_addresses_and_names(host: str) -> None:
    assert load_settings(REPO / "conf/gateway.toml", {"metrics.host": host}, environ={})
