"""A cluster view over a membership the test sets: the real ownership function
(`owner_of`), without heartbeats, for handler tests on the in-memory storage."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulsar_gateway.gateway.cluster.view import Member, owner_of, sorted_members


def member(name: str, node: int, port: int = 9092) -> Member:
    return Member(name, node, f"{name}.test", port, f"{name}.test", 5672, 9404)


class FixedView:
    """`me` among `members`; `serving` False stands for a stale lease."""

    def __init__(self, me: Member, others: list[Member]) -> None:
        self._me = me
        self._members = sorted_members([me, *others])
        self.serving = True
        self._callbacks: list[Callable[[], None]] = []

    def set_members(self, others: list[Member], serving: bool = True) -> None:
        self._members = sorted_members([self._me, *others])
        self.serving = serving
        for callback in self._callbacks:
            callback()

    def me(self) -> Member:
        return self._me

    def members(self) -> list[Member]:
        return list(self._members)

    def owner(self, key: str) -> Member:
        return owner_of(key, self._members)

    def serves(self, key: str) -> bool:
        return self.serving and self.owner(key) == self._me

    def on_change(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def status(self) -> dict[str, Any]:
        return {"members": [m.member_id for m in self._members]}
