"""A scripted Pulsar broker on a real socket, for the protocol paths the embedded broker
never takes: lookup redirects and proxies, authentication challenges, refusals, receipts
out of order, send errors, hostile frames, a broker that stops answering.

It speaks through the wire client's own frame codec and answers what a test does not
script the way a plain broker would (CONNECTED, lookups naming itself, producers, receipts
numbered in order, subscribes). Everything it receives is kept in `received`. Tests of
ordinary behaviour use the real embedded broker instead (tests/integration/test_wire_*).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from pulsar_gateway.gateway.backend.wire import commands as c
from pulsar_gateway.gateway.backend.wire.frames import Frame, FrameReader, simple_frame
from pulsar_gateway.gateway.backend.wire.messages import MessageIdData

Handler = Callable[["BrokerSide", Frame], bool]


class BrokerSide:
    """One client connection as the scripted broker sees it."""

    def __init__(self, broker: ScriptedBroker, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.writer = writer

    def send(self, command: c.Command) -> None:
        self.writer.write(simple_frame(command))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    def close(self) -> None:
        self.writer.close()


class ScriptedBroker:
    def __init__(self, max_message_size: int | None = None) -> None:
        self.max_message_size = max_message_size
        self.received: list[Frame] = []
        self.connections: list[BrokerSide] = []
        # a handler returns True when it answered the frame itself
        self.handlers: list[Handler] = []
        self.lookup_answer: Callable[[c.Lookup], c.LookupResponse] | None = None
        self.silent = False  # read, answer nothing (a stalled broker)
        self.next_entry = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    async def start(self) -> ScriptedBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for side in self.connections:
            side.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def of_type(self, kind: type) -> list[Any]:
        return [frame.command for frame in self.received if type(frame.command) is kind]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        side = BrokerSide(self, writer)
        self.connections.append(side)
        frames = FrameReader(max_frame_size=64 << 20)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    self.received.append(frame)
                    if self.silent:
                        continue
                    if any(handler(side, frame) for handler in self.handlers):
                        continue
                    self._answer(side, frame)
        writer.close()

    def _answer(self, side: BrokerSide, frame: Frame) -> None:
        command = frame.command
        if isinstance(command, c.Connect):
            side.send(c.Connected("scripted", 19, max_message_size=self.max_message_size))
        elif isinstance(command, c.Ping):
            side.send(c.Pong())
        elif isinstance(command, c.Lookup):
            if self.lookup_answer is not None:
                side.send(self.lookup_answer(command))
            else:
                side.send(
                    c.LookupResponse(self.url, None, c.LookupType.CONNECT, command.request_id)
                )
        elif isinstance(command, c.PartitionedMetadata):
            side.send(c.PartitionedMetadataResponse(0, command.request_id, 0))
        elif isinstance(command, c.Producer):
            side.send(c.ProducerSuccess(command.request_id, command.producer_name or "scripted"))
        elif isinstance(command, c.Send):
            self.receipt(side, command)
        elif isinstance(command, c.Subscribe | c.Unsubscribe | c.CloseProducer | c.CloseConsumer):
            side.send(c.Success(command.request_id))

    def receipt(self, side: BrokerSide, send: c.Send) -> None:
        side.send(
            c.SendReceipt(send.producer_id, send.sequence_id, MessageIdData(1, self.next_entry))
        )
        self.next_entry += 1
