"""An in-memory `BrokerStore`: the AMQP broker layer's port without Pulsar.

Tests use it to drive the broker layer into states a real backend makes hard
to provoke on demand: `gate` holds every publish until it is set, `fail`
makes publishes raise as a lost backend would, `lose_acks` drops acks on the
floor as a killed broker loses the ones pulsar-client had not sent yet, and
`restart_broker` makes every reader hand out again everything still stored,
with a redelivery count of 0 (a restarted pulsar-lite counts from scratch), and
`parked` holds messages back from every reader until one is nudged, as pulsar-lite's
Shared dispatcher parks a message whose consumer died (docs/backend.md), and
`dispatch_delay` hands each message to readers only that many seconds after it was
stored, as a loaded broker and machine do.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Collection, Hashable, Iterable

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.handlers.amqp.topology import Binding, Exchange, Queue, Topology


class MemoryReader:
    """A queue's reader: hands out what is stored and not yet fetched by it."""

    def __init__(self, store: MemoryStore, queue: str) -> None:
        self.store, self.queue = store, queue
        self.held: set[Hashable] = set()

    async def fetch(self, limit: int, timeout: float | None) -> list[StoredDelivery]:
        """As the Pulsar reader: what is there at once, else the first that comes within
        `timeout` (looked for every 50 ms; None: one look, as the engine loops anyway)."""
        deadline = asyncio.get_running_loop().time() + (timeout or 0.05)
        while True:
            messages = self.store.messages[self.queue]
            out = [
                StoredDelivery(self.queue, key, msg)
                for key, msg in messages.items()
                if key not in self.held
                and key not in self.store.parked
                and self.store.dispatchable(key)
            ][:limit]
            left = deadline - asyncio.get_running_loop().time()
            if out or left <= 0:
                break
            await asyncio.sleep(min(0.05, left))
        self.held.update(d.message_id for d in out)
        return out

    def ack(self, message_ids: Iterable[Hashable]) -> None:
        ids = list(message_ids)
        self.store.acks.extend(ids)
        if self.store.lose_acks:
            return
        for key in ids:
            self.store.messages[self.queue].pop(key, None)

    async def nudge(self) -> None:
        """A subscription event: parked messages are dispatched again."""
        self.store.nudges.append(asyncio.get_running_loop().time())
        self.store.parked.clear()

    async def close(self) -> None:
        self.held.clear()
        if self in self.store.readers:
            self.store.readers.remove(self)


class MemoryStreamCursor:
    """A stream's log read from a position (inclusive) on; nothing is ever removed."""

    def __init__(self, store: MemoryStore, queue: str, start: Hashable | None) -> None:
        self.store, self.queue = store, queue
        self.after: Hashable | None = None
        self.start = start

    async def read(self, limit: int, timeout: float | None) -> list[StoredDelivery]:
        deadline = asyncio.get_running_loop().time() + (timeout if timeout is not None else 3600)
        while True:
            log = self.store.messages.get(self.queue, {})
            out = [
                StoredDelivery(self.queue, key, msg)
                for key, msg in log.items()
                if (self.after is None or key > self.after)  # type: ignore[operator]
                and (self.start is None or key >= self.start)  # type: ignore[operator]
            ][:limit]
            if out or asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.01)
        if out:
            self.after = out[-1].message_id
        return out

    async def close(self) -> None: ...


class MemoryStore:
    """Queues as dicts of messages; topology records are not kept (nothing restarts)."""

    def __init__(self) -> None:
        self.messages: dict[str, dict[Hashable, AmqpMessage]] = {}
        self.gate = asyncio.Event()
        self.gate.set()
        # held: a publish is stored (readers see it) but its answer waits, as the gateway's
        # own Pulsar client may hand a consumer an entry before the producer's receipt
        self.receipt_gate = asyncio.Event()
        self.receipt_gate.set()
        self.fail = False
        self.ids = itertools.count()
        self.lose_acks = False
        self.parked: set[Hashable] = set()
        self.nudges: list[float] = []  # when each reader's nudge came
        self.acks: list[Hashable] = []  # every id acked, lost or not, in order
        self.readers: list[MemoryReader] = []
        self.dispatch_delay = 0.0
        self._stored_at: dict[Hashable, float] = {}

    def dispatchable(self, key: Hashable) -> bool:
        if not self.dispatch_delay:
            return True
        now = asyncio.get_running_loop().time()
        return now - self._stored_at.get(key, 0.0) >= self.dispatch_delay

    def restart_broker(self) -> None:
        """Forget what each reader was handed: it all comes again, counted as new."""
        self.lose_acks = False
        for reader in self.readers:
            reader.held.clear()

    async def create_vhost(self, vhost: str) -> None: ...

    async def load_topology(self, vhost: str) -> Topology:
        return Topology(vhost)

    async def save_exchange(self, vhost: str, exchange: Exchange) -> None: ...

    async def remove_exchange(self, vhost: str, name: str) -> None: ...

    async def save_queue(self, vhost: str, queue: Queue) -> None:
        self.messages[queue.name] = {}

    async def remove_queue(self, vhost: str, name: str) -> None:
        self.messages.pop(name, None)

    async def save_binding(self, vhost: str, binding: Binding) -> None: ...

    async def remove_binding(self, vhost: str, binding: Binding) -> None: ...

    async def publish(self, vhost: str, queues: Collection[str], message: AmqpMessage) -> None:
        await self.gate.wait()
        if self.fail:
            raise ConnectionError("backend down")
        for queue in queues:
            key = (next(self.ids),)
            self.messages.setdefault(queue, {})[key] = message
            self._stored_at[key] = asyncio.get_running_loop().time()
        await self.receipt_gate.wait()

    async def open_queue(self, vhost: str, queue: str) -> MemoryReader:
        reader = MemoryReader(self, queue)
        self.readers.append(reader)
        return reader

    async def open_stream(
        self, vhost: str, queue: str, start: Hashable | None
    ) -> MemoryStreamCursor:
        return MemoryStreamCursor(self, queue, start)

    def load_count(self, vhost: str, queue: str) -> int:
        return 0

    async def save_count(self, vhost: str, queue: str, count: int) -> None: ...
