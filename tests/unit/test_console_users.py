"""The console's users view on an in-memory users store (our own port): what an
administrator may change and how, what a user may not, and the rights model's rules
answered as 400s."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from pulsar_gateway.console.kafka_view import ConsoleError
from pulsar_gateway.console.users_view import UsersView
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.handlers.http_login import HttpCaller
from pulsar_gateway.security.credentials import make_record
from pulsar_gateway.security.rights import Rights

AUTHORIZER = Authorizer()
ADMIN = HttpCaller("guest", AUTHORIZER.unrestricted("http", "127.0.0.1", "guest"))
ALICE = HttpCaller("alice", AUTHORIZER.bound("http", "127.0.0.1", "alice"))


class MemoryAccounts:
    """The users store's operations the console uses, in memory."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {}
        self.rights: dict[str, Rights] = {}

    def lookup(self, name: str) -> Mapping[str, Any] | None:
        return self.users.get(name)

    def rights_of(self, user: str) -> Rights:
        return self.rights.get(user, Rights())

    async def set_password(self, name: str, password: str) -> None:
        if "," in name:
            raise ValueError("a user name must be non-empty, without ',' or '='")
        self.users[name] = make_record(password, iterations=4096)

    async def remove(self, name: str) -> bool:
        return self.users.pop(name, None) is not None

    async def set_rights(self, user: str, rights: Rights) -> None:
        self.rights[user] = rights


def view() -> tuple[UsersView, MemoryAccounts]:
    accounts = MemoryAccounts()
    return UsersView(
        lambda: list(accounts.users), accounts.rights_of, ["guest"], accounts
    ), accounts


def run(action: Any, caller: Any, **request: Any) -> Any:
    return asyncio.run(action(caller, request))


def refused(status: int, action: Any, caller: Any, **request: Any) -> str:
    with pytest.raises(ConsoleError) as caught:
        run(action, caller, **request)
    assert caught.value.status == status, caught.value.reason
    return caught.value.reason


def test_an_administrator_adds_a_user_grants_and_revokes() -> None:
    users, accounts = view()
    assert run(users.create_user, ADMIN, user="carol", password="pw") == {"created": "carol"}
    assert "carol" in accounts.users
    refused(409, users.create_user, ADMIN, user="carol", password="pw")
    done = run(
        users.grant,
        ADMIN,
        user="carol",
        resource="namespace",
        pattern="public/team-a",
        operations=["read", "write"],
    )
    # a namespace grant is the convenience: PREFIXED topic rules (security/rights.py)
    assert done["acls"] == [
        {
            "resource": "topic",
            "pattern": "prefixed",
            "name": "public/team-a/",
            "operation": operation,  # describe implied, not stored
            "permission": "allow",
            "host": "*",
        }
        for operation in ("read", "write")
    ]
    assert accounts.rights_of("carol").allows("topic", "public/team-a/orders", "read")
    run(users.grant, ADMIN, user="carol", resource="superuser")
    assert accounts.rights_of("carol").superuser
    run(users.revoke, ADMIN, user="carol", resource="superuser")
    run(users.revoke, ADMIN, user="carol", rule=done["acls"][0])  # one rule, as listed
    assert not accounts.rights_of("carol").allows("topic", "public/team-a/orders", "read")
    assert accounts.rights_of("carol").allows("topic", "public/team-a/orders", "write")
    refused(400, users.revoke, ADMIN, user="carol", rule={"resource": "topic"})
    run(users.revoke, ADMIN, user="carol", resource="namespace", pattern="public/team-a")
    assert accounts.rights_of("carol").empty
    listed = users.listing(ADMIN)
    assert listed["editable"] is True and [u["user"] for u in listed["users"]] == ["carol", "guest"]
    before = accounts.users["carol"]
    run(users.set_password, ADMIN, user="carol", password="new")
    assert accounts.users["carol"] != before
    run(users.grant, ADMIN, user="carol", resource="group", pattern="g*", operations=["read"])
    assert run(users.remove_user, ADMIN, user="carol") == {"removed": "carol"}
    assert "carol" not in accounts.users and accounts.rights_of("carol").empty


def test_the_rules_and_who_may() -> None:
    users, accounts = view()
    run(users.create_user, ADMIN, user="dave", password="pw")
    for action in (users.create_user, users.set_password, users.grant, users.remove_user):
        refused(403, action, ALICE, user="dave", password="x", resource="superuser")
    assert users.listing(ALICE)["editable"] is False
    refused(400, users.create_user, ADMIN, user="a,b", password="pw")
    refused(400, users.create_user, ADMIN, user="erin", password="")
    refused(404, users.set_password, ADMIN, user="nobody", password="pw")
    refused(404, users.remove_user, ADMIN, user="nobody")
    refused(409, users.set_password, ADMIN, user="guest", password="pw")  # amqp.users
    refused(409, users.remove_user, ADMIN, user="guest")
    reason = refused(
        400,
        users.grant,
        ADMIN,
        user="dave",
        resource="namespace",
        pattern="bad",
        operations=["read"],
    )
    assert "tenant/namespace" in reason
    refused(
        400, users.grant, ADMIN, user="dave", resource="group", pattern="g", operations=["write"]
    )
    refused(400, users.grant, ADMIN, user="dave", resource="moon", pattern="x", operations=["read"])
    refused(400, users.grant, ADMIN, user="dave", resource="cluster", operations="read")
    assert accounts.rights_of("dave").empty
    read_only = UsersView(list, accounts.rights_of, [], None)
    refused(409, read_only.create_user, ADMIN, user="x", password="pw")
    assert read_only.listing(ADMIN)["editable"] is False
