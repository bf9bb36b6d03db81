"""A queue's Shared consumer through the gateway's own wire client (`wire/`), for
`pulsar.client = "native"`: the contract of `queue_consumers.QueueConsumer` over a
`wire.Consumer`.

Through pulsar-client every message received costs a `receive` and half a dozen accessor
calls into the C++ client, and every ack a call and a `MessageId` kept alive (docs/backend.md,
"What pulsar-client costs per message from Python"). The wire consumer hands out whole
entries already decoded in the event loop; an AMQP queue's entries hold one message each
(`PulsarBackend.send_queue_messages`), so a message is one entry and one tuple of ids.

Through the wire client the gateway writes a queue's publishes as batched entries
(`PulsarBackend.send_queue_messages`); a plain Pulsar producer may too. A batched entry is
split into its messages, each handed out on its own, and the entry is acknowledged only
once every message of it is: no batch index ack is ever sent (pulsar-lite loses the rest of
a batch acknowledged in part: docs/backend.md, "Batch index acks lose messages"). Which
messages of such an entry were acknowledged is kept (`partial_acks.QueueAcks`, one per
queue subscription, shared by the queue's consumers of this process and written to the
metadata store by the AMQP store, so a restarted gateway or the next owner of a vhost has
it too), and when the broker sends the entry again (a reconnect, a consumer closed with
messages unacknowledged, a restart) those are dropped, and an entry acknowledged whole
whose ACK was lost is acknowledged again; so is a message this consumer still holds
(received, neither acked nor given back) dropped, as `QueueConsumer` drops it
(docs/backend.md, "AMQP queue messages in batched entries").
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from pulsar_gateway.gateway.backend.partial_acks import PartialBatches, QueueAcks
from pulsar_gateway.gateway.backend.pulsar_backend import BackendError
from pulsar_gateway.gateway.backend.queue_message import ReceivedMessage
from pulsar_gateway.gateway.backend.wire import Consumer as WireConsumer
from pulsar_gateway.gateway.backend.wire import ConsumerClosed, PulsarError, ReceivedEntry
from pulsar_gateway.gateway.backend.wire.batch import MessageTails, PropertyPairs
from pulsar_gateway.gateway.messages import MessageKey

log = logging.getLogger("gateway.queues")

# (ledger id, entry id, messages in the entry) -> the entry's first stamp and its messages
# as the publishing side kept them, or None, forgotten either way
# (`NativeQueueConsumer.known`; a count of -1 only forgets them)
KnownEntries = Callable[[int, int, int], tuple[int, Sequence[object]] | None]


class NativeQueueConsumer:
    """One Shared wire consumer on a queue's durable subscription (see the module)."""

    def __init__(
        self,
        consumer: WireConsumer,
        topic: str,
        subscription: str,
        partial: PartialBatches | None = None,
    ) -> None:
        self._consumer = consumer
        self.topic = topic
        self.subscription = subscription
        self._held: dict[MessageKey, ReceivedEntry] = {}
        partial = partial if partial is not None else PartialBatches()
        self.acks: QueueAcks = partial.of(topic, subscription)
        self._spill: deque[ReceivedMessage] = deque()  # split off a batch past a fetch's limit
        # a queue's entries repeat their messages' properties: decoded once (batch.split_batch)
        self._pairs: PropertyPairs = {}
        self._tails: MessageTails = {}
        # the messages of an entry as the publishing side kept them, taken (and forgotten)
        # by entry id and message count: None when unknown, then the entry is split as usual
        self.known: KnownEntries | None = None
        self.closed = False

    @property
    def held(self) -> int:
        """Messages received and neither acked nor negatively acked yet."""
        return len(self._held)

    async def fetch(self, limit: int = 500, timeout: float | None = None) -> list[ReceivedMessage]:
        """Up to `limit` messages, waiting up to
        `timeout` seconds (None: forever) for one."""
        out: list[ReceivedMessage] = []
        if self.closed:
            return out
        while self._spill and len(out) < limit:
            out.append(self._spill.popleft())
        if out:
            return out
        try:
            # bounded in messages too: what a batch leaves over waits in `_spill`, outside
            # the consumer's flow control, so at most one entry's worth
            entries = await self._consumer.receive_many(limit, timeout, max_messages=limit)
        except ConsumerClosed as exc:
            if self.closed:
                return out
            raise BackendError(f"receive failed: {exc}") from exc
        held = self._held
        for entry in entries:
            metadata = entry.metadata
            ledger, entry_id = entry.id.ledger_id, entry.id.entry_id
            publish_time = metadata.publish_time or 0
            producer = metadata.producer_name or ""
            redeliveries = entry.redelivery_count
            if metadata.num_messages_in_batch is None:
                key = (ledger, entry_id, -1)
                if key in held:
                    continue  # a replay of a message this consumer still holds
                held[key] = entry
                payload = b"" if metadata.null_value else entry.data()
                out.append(
                    ReceivedMessage(
                        key,
                        payload,
                        metadata.properties_dict(),
                        publish_time,
                        redeliveries,
                        producer,
                    )
                )
                continue
            messages: list[ReceivedMessage] = []
            acked = self.acks.get(ledger, entry_id)
            if acked is not None and self.acks.done(ledger, entry_id):
                # acknowledged whole before, its ACK lost on the way (a restart): again
                if not self.closed:
                    with contextlib.suppress(ConsumerClosed):
                        self._consumer.ack([entry])
                continue
            known = self.known
            if known is not None:
                # a redelivered entry is decoded (a doubt, however unlikely): only forgotten
                count = -1 if redeliveries else metadata.num_messages_in_batch
                built = known(ledger, entry_id, count)
                if built is not None:
                    self._add_built(out, messages, entry, built, acked, limit)
                    continue
            for message in entry.messages(pairs=self._pairs, tails=self._tails):
                key = (ledger, entry_id, message.batch_index)
                if key in held or (acked is not None and message.batch_index in acked):
                    continue
                held[key] = entry
                messages.append(
                    ReceivedMessage(
                        key,
                        message.payload or b"",
                        message.properties,
                        publish_time,
                        redeliveries,
                        producer,
                    )
                )
            room = max(0, limit - len(out))
            out += messages[:room]
            self._spill.extend(messages[room:])
        return out

    def _add_built(
        self,
        out: list[ReceivedMessage],
        messages: list[ReceivedMessage],
        entry: ReceivedEntry,
        built: tuple[int, Sequence[object]],
        acked: set[int] | None,
        limit: int,
    ) -> None:
        """`fetch`'s work for an entry whose messages `known` had: the same messages,
        each with the object `known` gave instead of its payload and properties."""
        held = self._held
        metadata = entry.metadata
        ledger, entry_id = entry.id.ledger_id, entry.id.entry_id
        publish_time = metadata.publish_time or 0
        producer = metadata.producer_name or ""
        stamp, objects = built
        none: dict[str, str] = {}  # no properties: the given object has them
        for index, message in enumerate(objects):
            key = (ledger, entry_id, index)
            if key in held or (acked is not None and index in acked):
                continue
            held[key] = entry
            messages.append(
                ReceivedMessage(key, b"", none, publish_time, 0, producer, message, stamp + index)
            )
        room = max(0, limit - len(out))
        out += messages[:room]
        self._spill.extend(messages[room:])

    def _release(self, ids: Iterable[MessageKey], acknowledged: bool) -> list[ReceivedEntry]:
        """Forget these messages; the entries now to acknowledge (or give back) whole."""
        done: list[ReceivedEntry] = []
        for key in ids:
            entry = self._held.pop(key, None)
            if entry is None:
                continue
            if key[2] < 0 or not acknowledged:
                done.append(entry)
            elif self.acks.add(key[0], key[1], key[2], entry.num_messages):
                done.append(entry)
        return done

    def acknowledge(self, ids: Iterable[MessageKey]) -> None:
        """Done with these messages: the subscription never delivers them again."""
        done = self._release(ids, True)
        if done and not self.closed:
            try:
                self._consumer.ack(done)
            except ConsumerClosed:
                pass  # unacknowledged: the subscription delivers them again

    def flush_acks(self) -> None:
        """Send the acknowledgements of entries done now, rather than within the grouping
        delay: before their record drops them (`partial_acks.QueueAcks.records`)."""
        if not self.closed:
            self._consumer.flush_acks()

    def negative_acknowledge(self, ids: Iterable[MessageKey]) -> None:
        """Give these back now: the broker redelivers them (to any consumer) with their
        redelivery count raised (a batched entry comes back whole: its messages
        acknowledged or still held here are dropped then)."""
        done = {id(entry): entry for entry in self._release(ids, False)}.values()
        if done and not self.closed:
            self._consumer.redeliver(list(done))

    def _mark_closed(self) -> bool:
        if self.closed:
            return False
        self.closed = True
        self._held.clear()
        self._spill.clear()
        return True

    async def close(self) -> None:
        """Close; what was received and not acknowledged is redelivered by Pulsar."""
        if self._mark_closed():
            await self._consumer.close()

    async def unsubscribe(self) -> None:
        """Delete the subscription itself (its cursor and backlog go with it)."""
        if not self._mark_closed():
            return
        try:
            await self._consumer.unsubscribe()
        except PulsarError as exc:
            raise BackendError(f"unsubscribing {self.subscription} failed: {exc}") from exc
        finally:
            await self._consumer.close()
