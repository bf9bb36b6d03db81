"""The one seam to Pulsar: producers, readers and grouped send completions.

Sends use the callback API with ONE callback per group of messages: Pulsar
acknowledges one producer's messages in order and a failure fails everything
queued behind it, so the last message's outcome stands for the group
(tests/integration/test_backend.py checks this against the embedded broker).
A Python callback per message would cap a process near 18k msg/s; grouped, about 90k
(docs/backend.md, "Per-message Python callbacks", "Group completions per loop wake-up").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _pulsar
import pulsar
import pulsar.asyncio as pulsar_asyncio

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.backend.client_logging import client_logger
from pulsar_gateway.gateway.backend.client_messages import build_message, is_big, message_key
from pulsar_gateway.gateway.backend.connection_security import NO_SECURITY, PulsarSecurity
from pulsar_gateway.gateway.backend.loop_bridge import to_loop
from pulsar_gateway.gateway.backend.native_reader import NativeReaderStream
from pulsar_gateway.gateway.backend.native_writer import (
    NATIVE,
    PULSAR_CLIENT,
    ClientChoice,
    NativeSender,
    StoredEntry,
    stored_entries,
)
from pulsar_gateway.gateway.backend.reader_factory import create_reader
from pulsar_gateway.gateway.backend.reader_stream import EARLIEST, ReaderStream
from pulsar_gateway.gateway.backend.topic_writer import TopicWriter
from pulsar_gateway.gateway.backend.wire import Client as WireClient
from pulsar_gateway.gateway.errors import StorageError
from pulsar_gateway.gateway.messages import MessageKey, OutMessage, ProducedBatch
from pulsar_gateway.gateway.waiting import result_within

log = logging.getLogger("gateway.backend")

# What `open_log_reader` gives: the same contract through pulsar-client or the wire client.
LogReader = ReaderStream | NativeReaderStream

# The reachability probe: one question every interval; no answer within the timeout: down.
PROBE_INTERVAL_SECONDS = 1.0
PROBE_TIMEOUT_SECONDS = 2.0


class BackendError(StorageError):
    """A Pulsar operation failed; handlers see it as the ports' `StorageError`."""


class PulsarBackend:
    def __init__(
        self,
        service_url: str,
        operation_timeout_seconds: int = 10,
        max_in_flight: int = 50000,
        idle_close_seconds: float = 60.0,
        send_timeout_ms: int = 30000,
        client_log: Path | None = None,
        security: PulsarSecurity = NO_SECURITY,
        client: ClientChoice = PULSAR_CLIENT,
    ) -> None:
        self.service_url = service_url
        # `native`: batched sends (Kafka's `pulsar` format) go through the gateway's own wire
        # client, one entry per record batch (native_writer.py), and so do Kafka partition
        # reads (`open_log_reader`, native_reader.py); everything else stays on pulsar-client
        self.client_choice = client
        self._native: NativeSender | None = None
        self.security = security  # TLS and authentication toward an external Pulsar
        self.client_log = client_log
        self.send_timeout_ms = send_timeout_ms
        self.operation_timeout_seconds = operation_timeout_seconds
        self.max_in_flight = max_in_flight
        self.idle_close_seconds = idle_close_seconds
        self._client: pulsar_asyncio.Client | None = None
        self._writers: dict[str, TopicWriter] = {}
        self._in_flight = 0
        self._capacity = asyncio.Condition()
        self._reaper: asyncio.Task[None] | None = None
        self._prober: asyncio.Task[None] | None = None
        self._probe_topic: str | None = None  # the first topic used: one known to exist
        self.reachable = True
        self.readers_open = 0

    async def start(self) -> None:
        self._client = pulsar_asyncio.Client(
            self.service_url,
            operation_timeout_seconds=self.operation_timeout_seconds,
            logger=client_logger(self.client_log),
            io_threads=1,
            **self.security.client_options(),
        )
        if self.client_choice == NATIVE:
            self._native = NativeSender(
                self.service_url,
                self.security,
                float(self.operation_timeout_seconds),
                self.send_timeout_ms / 1000,
                self.max_in_flight + 1000,
            )
            await self._native.start()
        self._reaper = asyncio.create_task(self._reap_idle())
        self._prober = asyncio.create_task(self._watch_reachability())

    @property
    def client(self) -> pulsar_asyncio.Client:
        if self._client is None:
            raise BackendError("backend not started")
        return self._client

    @property
    def wire_client(self) -> WireClient | None:
        """The gateway's own wire client when `pulsar.client = "native"`, else None."""
        return None if self._native is None else self._native.client

    async def close(self) -> None:
        if self._reaper:
            self._reaper.cancel()
        if self._prober:
            self._prober.cancel()
        for writer in list(self._writers.values()):
            await self._close_writer(writer)
        self._writers.clear()
        if self._native is not None:
            await self._native.close()
            self._native = None
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    # ---- producing -------------------------------------------------------------------------

    async def _producer(self, writer: TopicWriter, kind: str) -> Any:
        current = getattr(writer, kind)
        if current is not None:
            return current
        try:
            producer = await self.client.create_producer(
                writer.topic,
                # unique, so a resend filter never mistakes a new producer for an old one; the
                # writer's id first, so a tailer tells one writer's batches apart
                # (resend_filter.writer_of)
                producer_name=f"gw-{writer.id}.{kind}",
                batching_enabled=kind == "batching",
                chunking_enabled=kind == "chunking",
                batching_max_publish_delay_ms=1,
                batching_max_messages=1000,
                batching_max_allowed_size_in_bytes=1024 * 1024,
                max_pending_messages=self.max_in_flight + 1000,
                block_if_queue_full=False,
                send_timeout_millis=self.send_timeout_ms,
            )
        except Exception as exc:
            raise BackendError(f"cannot open producer on {writer.topic}: {exc}") from exc
        raw = producer._producer
        setattr(writer, kind, raw)
        return raw

    async def _acquire(self, count: int) -> None:
        if self._in_flight + count <= self.max_in_flight or self._in_flight == 0:
            self._in_flight += count
            return
        async with self._capacity:
            await self._capacity.wait_for(
                lambda: self._in_flight + count <= self.max_in_flight or self._in_flight == 0
            )
            self._in_flight += count

    def _release(self, count: int) -> None:
        self._in_flight -= count

        async def notify() -> None:
            async with self._capacity:
                self._capacity.notify_all()

        asyncio.ensure_future(notify())

    def _group_future(self) -> tuple[asyncio.Future[Any], Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(result: Any, mid: Any) -> None:
            def complete() -> None:
                if future.done():
                    return
                if result == _pulsar.Result.Ok:
                    future.set_result(message_key(mid))
                else:
                    future.set_exception(BackendError(f"send failed: {result}"))

            to_loop(loop, complete)

        return future, done

    def send(
        self,
        topic: str,
        messages: Sequence[OutMessage],
        batching: bool = True,
        whole: bool = False,
        produced: ProducedBatch | None = None,
    ) -> asyncio.Future[tuple[MessageKey, MessageKey]]:
        """Append messages in order; the returned future gives the ids of the first and the
        last once all are stored.

        The messages' place in the topic is fixed when this is called, not when the future
        is awaited: sends to one topic are stored in the order of the calls (what one Kafka
        connection's order rests on, docs/offsets.md), however long each waits for room.

        `batching=False` writes one entry per message, without the batching delay:
        for queues whose messages are acknowledged one by one (AMQP), where a batch
        is redelivered whole after a reconnect (batch index acks are off:
        docs/backend.md, "Batch index acks lose messages")
        and a client waiting for each confirm would wait out the delay every time.
        `whole`: the messages are one Kafka record batch; every one but the last is stamped
        as having more to follow, so that a tailer numbers them together (docs/offsets.md,
        "A batch is numbered whole").
        `produced`: the Kafka record batch the messages are, one record each; through the
        wire client an entry holding all of them lets the tailer number it as one
        (written_entries.py).
        """
        if not messages:
            raise ValueError("nothing to send")
        writer, previous, queued = self._writer_turn(topic)
        if batching and self._native is not None:
            return asyncio.ensure_future(
                self._send_native(writer, previous, queued, messages, whole, produced)
            )
        return asyncio.ensure_future(
            self._send(writer, previous, queued, messages, batching, whole)
        )

    def send_queue_messages(
        self,
        topic: str,
        messages: list[OutMessage],
        stored: Callable[[list[StoredEntry]], None] | None = None,
    ) -> asyncio.Future[tuple[MessageKey, MessageKey]]:
        """AMQP queue messages. Through pulsar-client (`pulsar.client = "pulsar-client"`),
        one entry per message (`send` with `batching=False`): its consumers acknowledge
        message by message, and pulsar-lite loses the rest of a batch acknowledged in part
        (docs/backend.md, "Batch index acks lose messages"). Through the wire client, the
        messages of a call as batched entries, built in one pass: the gateway's wire
        queue consumer acknowledges an entry only once every message of it is
        (native_queue_consumer.py), so no batch index ack is ever sent; an entry, not a
        message, then costs the SEND, the receipt, the MESSAGE and the broker's work.
        `stored`: told, once every entry is stored, where each batched entry went and which
        messages it holds (`StoredEntry`; the wire client only)."""
        if self._native is None:
            return self.send(topic, messages, batching=False)
        if not messages:
            raise ValueError("nothing to send")
        writer, previous, queued = self._writer_turn(topic)
        return asyncio.ensure_future(
            self._send_native(
                writer, previous, queued, messages, False, None, noted=False, stored=stored
            )
        )

    def _writer_turn(
        self, topic: str
    ) -> tuple[TopicWriter, asyncio.Future[None] | None, asyncio.Future[None]]:
        """The topic's writer, the send before this one, and this one's turn."""
        self._probe_topic = self._probe_topic or topic
        writer = self._writers.get(topic)
        if writer is None:
            writer = self._writers[topic] = TopicWriter(topic)
        writer.last_used = time.monotonic()
        previous = writer.queued
        queued: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        writer.queued = queued
        return writer, previous, queued

    async def _send(
        self,
        writer: TopicWriter,
        previous: asyncio.Future[None] | None,
        queued: asyncio.Future[None],
        messages: Sequence[OutMessage],
        batching: bool,
        whole: bool,
    ) -> tuple[MessageKey, MessageKey]:
        """`send`'s work, once every earlier send to the topic has queued its messages
        (`previous`); `queued` is set once this one has, however it ends."""
        acquired = False
        try:
            first_future: asyncio.Future[Any] | None = None
            last_future: asyncio.Future[Any] | None = None
            try:
                if previous is not None and not previous.done():
                    # first come first served: waiting for send capacity in line keeps the
                    # partition's order even when a later, smaller request would fit sooner
                    await asyncio.wait((previous,))
                await self._acquire(len(messages))
                acquired = True
                start = 0
                last_index = len(messages) - 1
                while start < len(messages):
                    big = is_big(messages[start])
                    end = start + 1
                    opens_ledger = batching and not big and not writer.ledger_opened
                    while not opens_ledger and end < len(messages) and is_big(messages[end]) == big:
                        end += 1
                    if opens_ledger:
                        kind = "single"
                    else:
                        kind = "chunking" if big else ("batching" if batching else "single")
                    producer = await self._producer(writer, kind)
                    if writer.last_kind != kind and writer.last_group is not None:
                        # keep partition order across the two producers
                        await asyncio.shield(writer.last_group)
                    writer.last_kind = kind
                    for index in range(start, end):
                        callback = None
                        if index == 0:
                            first_future, callback = self._group_future()
                        if index == last_index or index == end - 1:
                            if index != 0:
                                last_future, callback = self._group_future()
                            else:
                                last_future = first_future
                        writer.sequence += 1
                        more = whole and index != last_index
                        producer.send_async(
                            build_message(messages[index], writer.sequence, more), callback
                        )
                    writer.last_group = last_future
                    start = end
                    if opens_ledger and start < len(messages):
                        # the lone message must be stored before any batch may follow it
                        assert last_future is not None, "set for the group's last message"
                        await asyncio.shield(last_future)
                        writer.ledger_opened = True
            finally:
                if not queued.done():
                    queued.set_result(None)
            assert first_future is not None and last_future is not None
            first = await first_future
            last = await last_future
            writer.ledger_opened = True
            return first, last
        except BackendError:
            writer.ledger_opened = False  # a failed send may mean a restarted broker
            raise
        except Exception as exc:
            writer.ledger_opened = False
            raise BackendError(f"send to {writer.topic} failed: {exc}") from exc
        finally:
            if acquired:
                self._release(len(messages))

    async def _send_native(
        self,
        writer: TopicWriter,
        previous: asyncio.Future[None] | None,
        queued: asyncio.Future[None],
        messages: Sequence[OutMessage],
        whole: bool,
        produced: ProducedBatch | None = None,
        noted: bool = True,
        stored: Callable[[list[StoredEntry]], None] | None = None,
    ) -> tuple[MessageKey, MessageKey]:
        """`_send` through the wire client: the messages as whole batched entries (`noted`:
        see `NativeSender.send`; `stored`: see `send_queue_messages`)."""
        native = self._native
        assert native is not None
        acquired = False
        try:
            try:
                if previous is not None and not previous.done():
                    await asyncio.wait((previous,))
                await self._acquire(len(messages))
                acquired = True
                first_stamp = writer.sequence + 1  # the stamps run on from here
                futures, sent = await native.send(writer, messages, whole, produced, noted)
                writer.last_group = futures[-1]
            finally:
                if not queued.done():
                    queued.set_result(None)
            keys = await native.receipts(futures, sent)
            writer.ledger_opened = True
            if stored is not None:
                try:
                    stored(stored_entries(futures, sent, first_stamp))
                except Exception:  # the messages are stored: a send never fails for this
                    log.exception("send to %s: noting its stored entries failed", writer.topic)
            return keys
        except Exception as exc:
            writer.ledger_opened = False  # a failed send may mean a restarted broker
            if isinstance(exc, BackendError):
                raise
            raise BackendError(f"send to {writer.topic} failed: {exc}") from exc
        finally:
            if acquired:
                self._release(len(messages))

    # ---- reading ---------------------------------------------------------------------------

    async def _raw_reader(self, topic: str, start: MessageKey, receiver_queue_size: int) -> Any:
        self._probe_topic = self._probe_topic or topic
        if start == EARLIEST:
            start_id = pulsar.MessageId.earliest
        else:
            # At the start of `start`'s entry, never inside a batch: pulsar-lite reports a
            # topic's last message without its batch index, so a reader placed inside the
            # last batched entry is told nothing is left (docs/backend.md, "A reader inside
            # the last batch"). The stream drops the batch's messages before `start`.
            start_id = pulsar.MessageId(-1, start[0], start[1], -1)
        try:
            # not the library's create_reader: it keeps every reader alive (reader_factory.py)
            return await create_reader(
                self.client,
                topic,
                start_id,
                receiver_queue_size=receiver_queue_size,
                start_message_id_inclusive=True,
            )
        except Exception as exc:
            raise BackendError(f"cannot open reader on {topic}: {exc}") from exc

    async def open_reader(
        self, topic: str, start: MessageKey = EARLIEST, receiver_queue_size: int = 1000
    ) -> ReaderStream:
        """A reader positioned AT `start` (inclusive), or at the earliest message."""
        raw = await self._raw_reader(topic, start, receiver_queue_size)

        async def reopen(at: MessageKey) -> Any:
            return await self._raw_reader(topic, at, receiver_queue_size)

        return self._counted(ReaderStream(raw, start, reopen))

    def _counted(self, stream: Any) -> Any:
        """`stream`, counted in `readers_open` until its first close."""
        self.readers_open += 1
        original_close = stream.close

        async def close() -> None:
            if not stream.closed:
                self.readers_open -= 1
            await original_close()

        stream.close = close
        return stream

    async def open_log_reader(
        self,
        topic: str,
        start: MessageKey = EARLIEST,
        receiver_queue_size: int = 1000,
        as_one: bool = False,
        window_bytes: int | None = None,
    ) -> LogReader:
        """`open_reader` for a Kafka partition log: through the wire client when
        `pulsar.client = "native"` (native_reader.py), else the same. `as_one`: an entry
        this gateway wrote from a whole produced Kafka batch comes as one item standing for
        all its messages (the partition's tailer: docs/offsets.md). `window_bytes`: the
        reader asks pulsar-lite for as many entries at once as this holds (native only;
        None: a fixed number, `wire.Consumer`)."""
        if self._native is None:
            return await self.open_reader(topic, start, receiver_queue_size)
        self._probe_topic = self._probe_topic or topic
        stream = NativeReaderStream(
            self._native.client,
            topic,
            start,
            receiver_queue_size,
            self._native.written,
            as_one,
            window_bytes,
        )
        await stream.open()
        return self._counted(stream)

    async def is_empty(self, topic: str) -> bool:
        """pulsar-lite raises UnknownError for an empty topic: that means empty."""
        raw = await create_reader(self.client, topic, pulsar.MessageId.earliest)
        reader = pulsar_asyncio.Reader(raw, pulsar.schema.BytesSchema())
        try:
            return not await reader.has_message_available()
        except pulsar_asyncio.PulsarException as exc:
            if exc.error() == _pulsar.Result.UnknownError:
                return True
            raise
        finally:
            with contextlib.suppress(Exception):
                await reader.close()

    # ---- reachability ----------------------------------------------------------------------

    async def _watch_reachability(self) -> None:
        """Keep `reachable` (and `gateway_backend_up`) true while the broker answers.

        A stalled broker (SIGSTOP, a long pause) keeps its TCP connections up, so the
        client's connection state says nothing, and sends and reads simply wait. So the
        broker is asked something cheap every PROBE_INTERVAL_SECONDS: the partition count of
        a topic the gateway uses, the lookup every client makes, which the broker answers
        from memory. No answer within PROBE_TIMEOUT_SECONDS marks it down; the question is
        not asked again while one is outstanding, and its late answer marks it up at once.
        """
        pending: asyncio.Future[Any] | None = None
        while True:
            topic = self._probe_topic
            if topic is None or self._client is None:
                await asyncio.sleep(PROBE_INTERVAL_SECONDS)
                continue
            try:
                if pending is None:
                    pending = self._partitions_lookup(topic)
                result = await result_within(pending, PROBE_TIMEOUT_SECONDS)
            except TimeoutError:
                self._set_reachable(False, "no answer")
                continue
            except Exception as exc:  # noqa: BLE001 - a probe that cannot be asked: down
                result = exc
            pending = None
            self._set_reachable(result == _pulsar.Result.Ok, str(result))
            await asyncio.sleep(PROBE_INTERVAL_SECONDS)

    def _partitions_lookup(self, topic: str) -> asyncio.Future[Any]:
        """The broker's answer (a `Result`) to a partition-count lookup of `topic`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(result: Any, _partitions: Any) -> None:
            to_loop(loop, lambda: None if future.done() else future.set_result(result))

        self.client._client.get_topic_partitions_async(topic, done)
        return future

    def _set_reachable(self, reachable: bool, why: str) -> None:
        if reachable != self.reachable:
            if reachable:
                log.warning("Pulsar backend %s answers again", self.service_url)
            else:
                log.error("Pulsar backend %s unreachable: %s", self.service_url, why)
        if not reachable:
            # a broker that comes back may open new ledgers (docs/backend.md, "A batch must
            # not open a ledger")
            for writer in self._writers.values():
                writer.ledger_opened = False
        self.reachable = reachable
        metrics.BACKEND_UP.set(1 if reachable else 0)

    # ---- housekeeping ----------------------------------------------------------------------

    async def _close_writer(self, writer: TopicWriter) -> None:
        if writer.native is not None:
            native, writer.native = writer.native, None
            writer.native_sequence = max(writer.native_sequence, native.next_sequence)
            with contextlib.suppress(Exception):
                await native.close(timeout=5.0)
        for kind in ("batching", "chunking", "single"):
            producer = getattr(writer, kind)
            if producer is not None:
                setattr(writer, kind, None)
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(producer.close)

    async def close_topic(self, topic: str) -> None:
        """Close the topic's producers now rather than after `idle_close_seconds`: its topic
        was deleted (a send still in flight fails as any send to a closed producer does)."""
        writer = self._writers.pop(topic, None)
        if writer is not None:
            await self._close_writer(writer)

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(min(10.0, self.idle_close_seconds / 2))
            now = time.monotonic()
            for topic, writer in list(self._writers.items()):
                if now - writer.last_used > self.idle_close_seconds and (
                    writer.queued is None or writer.queued.done()
                ):
                    if writer.last_group is None or writer.last_group.done():
                        del self._writers[topic]
                        await self._close_writer(writer)

    @property
    def producers_open(self) -> int:
        return sum(
            (w.batching is not None)
            + (w.chunking is not None)
            + (w.single is not None)
            + (w.native is not None)
            for w in self._writers.values()
        )
