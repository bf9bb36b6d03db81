"""The process-wide part of the AMQP broker layer: every open vhost, over one store.

`AmqpBroker` loads a vhost's topology once, on the first connection to it,
and hands out connection ids (the owners of exclusive queues, the middle of
server-made consumer tags). What one connection's methods do is in
connection_broker.py; what one vhost holds is in vhost_state.py.
"""

from __future__ import annotations

import asyncio
import itertools

from pulsar_gateway.handlers.amqp.broker_model import BrokerStore
from pulsar_gateway.handlers.amqp.vhost_state import VhostState

READER_IDLE_SECONDS = 30.0  # close a queue's Pulsar consumer after this long unread


class AmqpBroker:
    """Process-wide AMQP state over one store."""

    def __init__(
        self, store: BrokerStore, reader_idle_seconds: float = READER_IDLE_SECONDS
    ) -> None:
        self.store = store
        self.reader_idle_seconds = reader_idle_seconds
        self.vhosts: dict[str, VhostState] = {}
        self._opening: dict[str, asyncio.Task[VhostState]] = {}
        self._connection_ids = itertools.count(1)

    def new_connection_id(self) -> str:
        """A connection id unique in this process."""
        return f"{next(self._connection_ids)}"

    async def open_vhost(self, name: str, create: bool) -> VhostState:
        """The vhost's state, loaded once even when connections open it together."""
        state = self.vhosts.get(name)
        if state is not None:
            return state
        task = self._opening.get(name)
        if task is None:
            task = self._opening[name] = asyncio.ensure_future(self._load(name, create))
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._opening.pop(name, None)

    async def _load(self, name: str, create: bool) -> VhostState:
        if create:
            await self.store.create_vhost(name)
        topology = await self.store.load_topology(name)
        state = VhostState(self.store, name, topology, self.reader_idle_seconds)
        self.vhosts[name] = state
        return state

    async def release(self, name: str) -> None:
        """Forget a vhost this process no longer serves (docs/cluster.md, "AMQP on one
        port"): its queues' Pulsar consumers close, so what they had fetched and not
        delivered or not acked goes back to Pulsar for the new owner at once, and its
        topology is loaded afresh if it comes back (the owner meanwhile may have changed
        it)."""
        state = self.vhosts.pop(name, None)
        if state is not None:
            await state.close()

    async def close(self) -> None:
        for state in list(self.vhosts.values()):
            await state.close()
