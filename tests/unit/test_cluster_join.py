"""Joining a cluster under client load (gateway/cluster/membership.py): requests that ask a
joining member what it serves must not void its heartbeats. Before, `serves()` fenced a
member whose lease was not yet fresh, which during a heartbeat's send marked that
heartbeat as sent by a fenced epoch: a restarted worker whose clients retried every few
milliseconds rejoined every second for 40 s in a kill -9 test run. A serving member whose
lease goes stale is still fenced by the first request that asks.

White-box, as test_cluster_handover.py: the race needs a request inside a heartbeat's
send; the backend here is a stand-in whose send lets such a request in."""

from __future__ import annotations

import asyncio
from typing import Any

from pulsar_gateway.gateway.cluster.membership import PulsarMembership
from pulsar_gateway.gateway.cluster.view import Member

KEY = "kafka/partition/orders/0"


def _member(name: str, node: int) -> Member:
    return Member(name, node, "127.0.0.1", 9000 + node, "127.0.0.1", 5600 + node, 9400 + node)


class _BusyBackend:
    """Stores every heartbeat, but a client request asks the member what it serves while
    each send is in flight (as on a joining worker its clients retry against)."""

    def __init__(self) -> None:
        self.membership: PulsarMembership | None = None
        self.sent = 0

    async def send(self, topic: str, messages: list[Any], batching: bool = True) -> Any:
        self.sent += 1
        assert self.membership is not None
        assert not self.membership.serves(KEY)  # not serving yet: the answer is no
        await asyncio.sleep(0)
        stored = (1, self.sent, -1)
        return stored, stored


def test_requests_during_a_joining_heartbeat_do_not_void_it() -> None:
    async def scenario() -> None:
        backend = _BusyBackend()
        membership = PulsarMembership(backend, "public/test", _member("a", 1), 1.0, 6.0)  # type: ignore[arg-type]
        backend.membership = membership
        for _ in range(3):
            assert await membership._beat() is not None
            assert membership._lease.fresh(membership._clock()), "the heartbeat was voided"
            assert not membership._rejoin
        assert backend.sent == 3 and membership.fenced == 0

    asyncio.run(scenario())


def test_a_serving_member_with_a_stale_lease_is_fenced_by_the_first_request() -> None:
    now = [100.0]
    membership = PulsarMembership(
        None,  # type: ignore[arg-type]
        "public/test",
        _member("a", 1),
        1.0,
        6.0,
        clock=lambda: now[0],
    )
    membership._lease.stored(now[0])
    membership._serving = True  # as after its join
    assert membership.serves(KEY)  # the only member owns every key
    now[0] += 5.5  # past lease - heartbeat: a pause (SIGSTOP) the member did not see
    assert not membership.serves(KEY)
    assert membership.fenced == 1 and membership._rejoin and not membership._serving
