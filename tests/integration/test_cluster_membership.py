"""PulsarMembership on a real broker (docs/cluster.md): members see each other, a member
whose own lease is stale fences itself at once and rejoins under a new epoch, and keys
gained from a departed member are served only after the metadata catch-up."""

from __future__ import annotations

import asyncio
import time
import uuid

from harness.waiting import async_wait_until
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.cluster.membership import PulsarMembership
from pulsar_gateway.gateway.cluster.view import Member, group_key

HEARTBEAT, LEASE = 0.3, 1.8


def member(name: str, node: int) -> Member:
    return Member(name, node, "127.0.0.1", 9000 + node, "127.0.0.1", 5600 + node, 9400 + node)


class Clock:
    """The monotonic clock, moved forward on demand: a pause without stopping the loop."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.skipped


def test_members_see_each_other_fence_on_a_stale_lease_and_rejoin(broker_url: str) -> None:
    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = f"public/cluster-{uuid.uuid4().hex[:8]}"
        clock = Clock()
        a = PulsarMembership(backend, namespace, member("a", 1), HEARTBEAT, LEASE, clock)
        b = PulsarMembership(backend, namespace, member("b", 2), HEARTBEAT, LEASE)
        changes: list[bool] = []
        a.on_change(lambda: changes.append(a.serving))
        try:
            await asyncio.gather(a.start(), b.start())
            await async_wait_until(
                lambda: len(a.members()) == 2 and len(b.members()) == 2, 10, message="a and b"
            )
            keys = [group_key(f"g{i}") for i in range(50)]
            assert all(a.serves(k) != b.serves(k) for k in keys), "one server per key"
            epoch = a.status()["epoch"]
            clock.skipped += LEASE  # as if a had been paused for a lease
            assert not any(a.serves(k) for k in keys)  # at once, before anything else runs
            assert a.status()["fenced"] == 1 and changes[-1] is False
            await a.wait_serving(10)
            assert a.status()["epoch"] > epoch
            assert any(a.serves(k) for k in keys)
            assert all(a.serves(k) != b.serves(k) for k in keys)
        finally:
            await asyncio.gather(a.stop(), b.stop())
            await backend.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_keys_of_a_departed_member_wait_for_the_catch_up(broker_url: str) -> None:
    """b joins while a serves (a's catch-up for that change hangs), then b leaves: a takes
    b's keys only once a catch-up that started after both changes is done."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        namespace = f"public/cluster-{uuid.uuid4().hex[:8]}"
        a = PulsarMembership(backend, namespace, member("a", 1), HEARTBEAT, LEASE)
        b = PulsarMembership(backend, namespace, member("b", 2), HEARTBEAT, LEASE)
        released = asyncio.Event()

        async def catch_up() -> None:
            if a.serving:  # the join's own catch-up passes; later ones wait for the test
                await released.wait()

        a.set_catch_up(catch_up)
        try:
            await a.start()
            await b.start()
            await async_wait_until(lambda: len(a.members()) == 2, 10, message="a to see b")
            keys = [group_key(f"g{i}") for i in range(50)]
            mine = {k for k in keys if a.owner(k) == a.me()}
            theirs = set(keys) - mine
            assert mine and theirs
            assert not any(a.serves(k) for k in theirs)
            await b.stop()  # leaves: a takes everything, once caught up
            await async_wait_until(lambda: len(a.members()) == 1, 10, message="b to leave")
            assert all(a.serves(k) for k in mine)
            assert not any(a.serves(k) for k in theirs), "b's keys served before catch-up"
            released.set()
            await async_wait_until(
                lambda: all(a.serves(k) for k in keys), 10, message="a to serve b's keys"
            )
        finally:
            await a.stop()
            await backend.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))
