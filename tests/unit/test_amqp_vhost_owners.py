"""Two AMQP listeners as two cluster members over one in-memory store (docs/cluster.md,
"AMQP on one port"): a connection accepted by the member that does not own its vhost is
served by the owner through the hand-off, and a member that stops serving a vhost closes
its connections with 320 and releases the vhost."""

from __future__ import annotations

import asyncio

import aiormq
import pytest

from harness.amqp_memory_store import MemoryStore
from harness.cluster_view import FixedView
from harness.waiting import async_wait_until
from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.cluster.view import Member, vhost_key
from pulsar_gateway.gateway.config import AmqpSection
from pulsar_gateway.gateway.loopback_ports import free_ports
from pulsar_gateway.handlers.amqp.server import AmqpServer
from pulsar_gateway.handlers.amqp.vhost_owners import VhostOwners


def _member(name: str, node: int, member_port: int) -> Member:
    return Member(name, node, "127.0.0.1", 9092 + node, "127.0.0.1", member_port, 9404 + node)


def _handed_off() -> float:
    return (
        metrics.REGISTRY.get_sample_value("gateway_amqp_handoffs_total", {"outcome": "handed_off"})
        or 0.0
    )


def test_a_connection_reaches_its_vhost_owner_and_is_closed_when_the_vhost_moves() -> None:
    async def scenario() -> None:
        ports = dict(zip("ab", free_ports(2), strict=True))
        a, b = _member("a", 0, ports["a"]), _member("b", 1, ports["b"])
        views = {"a": FixedView(a, [b]), "b": FixedView(b, [a])}
        store = MemoryStore()
        servers = {
            name: AmqpServer(
                AmqpSection(port=0, cluster_port=ports[name]),
                store,
                owners=VhostOwners(views[name], 0.5),
            )
            for name in ("a", "b")
        }
        for server in servers.values():
            await server.start()
        try:
            vhost = next(f"v{i}" for i in range(1000) if views["a"].owner(vhost_key(f"v{i}")) == b)
            before = _handed_off()
            url = f"amqp://guest:guest@127.0.0.1:{servers['a'].address[1]}/{vhost}"
            connection = await aiormq.connect(url)
            channel = await connection.channel()
            await channel.queue_declare("q")
            await channel.basic_publish(b"hello", routing_key="q")
            got = await channel.basic_get("q", no_ack=True)
            assert got.body == b"hello"
            assert _handed_off() == before + 1
            # served by the owner: only it loaded the vhost
            assert vhost in servers["b"].broker.vhosts
            assert vhost not in servers["a"].broker.vhosts

            views["b"].set_members([a], serving=False)  # b's lease ran out
            with pytest.raises(aiormq.exceptions.ConnectionClosed) as closed:
                await asyncio.wait_for(connection.closing, 10)
            assert closed.value.args[0] == 320
            await async_wait_until(
                lambda: vhost not in servers["b"].broker.vhosts, 10, 0.01, "b to release"
            )
        finally:
            for server in servers.values():
                await server.stop()

    asyncio.run(scenario())
