"""The Kafka listener: frames in, API handlers, responses out in request order.

Kafka clients pipeline requests and expect responses in the order they sent the
requests, so each request runs as its own task while a writer task answers them
strictly in order. A bad frame closes only its own connection, with a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.context import BrokerIdentity, KafkaContext
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.port import KafkaStorage
from pulsar_gateway.handlers.kafka.requests import ConnectionClosing, answer
from pulsar_gateway.kafka_codec import protocol

log = logging.getLogger("gateway.kafka")

_SIZE = struct.Struct(">i")
MAX_PIPELINED = 64


class KafkaServer:
    name = "kafka"

    def __init__(self, settings: KafkaSection, storage: KafkaStorage) -> None:
        self.settings = settings
        self.storage = storage
        self.groups = GroupCoordinator(
            storage.offsets,
            min_session_ms=settings.group_min_session_timeout_ms,
            max_session_ms=settings.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
        )
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.context: KafkaContext | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.settings.host, self.settings.port, limit=1 << 20, backlog=1024
        )
        host, port = self.address
        advertised = self.settings.advertised_host or host
        identity = BrokerIdentity(
            self.settings.node_id,
            advertised,
            self.settings.advertised_port or port,
            self.settings.cluster_id,
        )
        self.context = KafkaContext(self.settings, self.storage, identity, self.groups)
        self.groups.start()

    async def stop(self) -> None:
        if self._server:
            self._server.close()
        await self.groups.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None and self.context is not None
        peer = writer.get_extra_info("peername")
        if len(self._connections) >= self.settings.max_connections:
            log.warning("refusing %s: %d connections open", peer, len(self._connections))
            writer.close()
            return
        self._connections.add(task)
        metrics.CONNECTIONS.labels("kafka").inc()
        metrics.CONNECTIONS_TOTAL.labels("kafka").inc()
        connection = _Connection(self.context, reader, writer, peer)
        try:
            await connection.serve()
        except asyncio.CancelledError:
            pass  # shutting down
        finally:
            metrics.CONNECTIONS.labels("kafka").dec()
            self._connections.discard(task)


class _Connection:
    def __init__(
        self,
        context: KafkaContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: Any,
    ) -> None:
        self.context = context
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.responses: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(
            MAX_PIPELINED
        )

    async def serve(self) -> None:
        writer_task = asyncio.create_task(self._write_responses())
        try:
            await self._read_requests()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except ConnectionClosing as reason:
            log.warning("closing Kafka connection from %s: %s", self.peer, reason)
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                self.responses.put_nowait(None)
            try:
                await asyncio.wait_for(writer_task, 30)
            except (TimeoutError, asyncio.CancelledError, Exception):
                writer_task.cancel()
            self.writer.close()

    async def _read_requests(self) -> None:
        max_frame = self.context.settings.max_frame_bytes
        while True:
            size = _SIZE.unpack(await self.reader.readexactly(4))[0]
            if size < 8 or size > max_frame:
                metrics.BAD_INPUT.labels("kafka", "frame_size").inc()
                raise ConnectionClosing(f"frame of {size} bytes (limit {max_frame})")
            frame = memoryview(await self.reader.readexactly(size))
            try:
                header = protocol.parse_request_header(frame)
            except protocol.KafkaDecodeError as exc:
                metrics.BAD_INPUT.labels("kafka", "header").inc()
                raise ConnectionClosing(f"bad request header: {exc}") from None
            task = asyncio.create_task(answer(self.context, header, frame))
            await self.responses.put(task)
            if task.done() and task.exception() is not None:
                raise ConnectionClosing(str(task.exception()))

    async def _write_responses(self) -> None:
        while True:
            task = await self.responses.get()
            if task is None:
                return
            try:
                response = await task
            except ConnectionClosing as reason:
                log.warning("closing Kafka connection from %s: %s", self.peer, reason)
                self.writer.close()
                return
            except Exception:
                log.exception("request from %s failed; closing its connection", self.peer)
                self.writer.close()
                return
            if response is not None:
                self.writer.write(response)
                if self.writer.transport.get_write_buffer_size() > 1 << 20:
                    await self.writer.drain()
