"""A member's hand-over after a membership change (gateway/cluster/membership.py): keys
gained from a departed member wait for a metadata catch-up that began after the LATEST
change. A hand-over superseded by a newer change must not end the wait, even when its
cancel is lost: on Python 3.11 `asyncio.wait_for` returns its inner result and forgets a
cancel that lands in the same loop turn, so the superseded hand-over runs on to its end.

White-box on purpose: the race needs the catch-up's end and the next change in one loop
turn, which heartbeats through a broker cannot arrange. The backend is never touched by
the methods driven here."""

from __future__ import annotations

import asyncio
from typing import Any

from harness.waiting import async_wait_until
from pulsar_gateway.gateway.cluster.leases import Heartbeat
from pulsar_gateway.gateway.cluster.membership import PulsarMembership
from pulsar_gateway.gateway.cluster.view import Member


def _member(name: str, node: int) -> Member:
    return Member(name, node, "127.0.0.1", 9000 + node, "127.0.0.1", 5600 + node, 9400 + node)


def _serving_member() -> PulsarMembership:
    membership = PulsarMembership(None, "public/test", _member("a", 1), 1.0, 10.0)  # type: ignore[arg-type]
    membership._serving = True  # as after its join: only the hand-over is under test
    return membership


def test_a_superseded_hand_over_whose_cancel_is_lost_keeps_the_newer_wait() -> None:
    async def scenario() -> None:
        membership = _serving_member()
        catch_ups: list[asyncio.Future[None]] = []

        async def catch_up() -> None:
            future = asyncio.get_running_loop().create_future()
            catch_ups.append(future)
            await future

        membership.set_catch_up(catch_up)
        b, c = _member("b", 2), _member("c", 3)
        membership._peers.seen(Heartbeat(b, 1), 0.0)
        membership._membership_changed()  # b joined: hand-over 1 waits for catch-up 1
        await async_wait_until(lambda: len(catch_ups) == 1, 5, 0)
        assert membership._previous
        first = membership._handover
        assert first is not None

        def catch_up_ends_as_c_joins(*_: Any) -> None:
            catch_ups[0].set_result(None)
            membership._peers.seen(Heartbeat(c, 1), 0.0)
            membership._membership_changed()  # cancels hand-over 1, starts hand-over 2

        asyncio.get_running_loop().call_soon(catch_up_ends_as_c_joins)
        await async_wait_until(lambda: len(catch_ups) == 2 and first.done(), 5, 0)
        assert membership._previous, "a superseded hand-over ended the newer one's wait"
        catch_ups[1].set_result(None)
        # the current hand-over's catch-up ends the wait
        await async_wait_until(lambda: membership._previous == [], 5, 0)

    asyncio.run(scenario())
