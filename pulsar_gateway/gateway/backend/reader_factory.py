"""Open a pulsar-client reader from asyncio without leaking it.

`pulsar.asyncio.Client.create_reader` hands the C++ client a callback that holds the
asyncio future, and the future, once done, holds the new reader; the C++ reader keeps its
creation callback for its whole life. That is a reference cycle through C++, which Python's
garbage collector cannot see: every reader ever created stayed in memory after it was
closed, about 21 KiB each with the default receiver queue (measured: 600 readers opened and
closed grew a process by 12.6 MiB and kept 600 futures; docs/architecture.md, "Memory").
A partition log opens a reader each time it opens, so topics deleted and created again, or
partitions closed when idle and opened again, grew the gateway without bound.

Here the callback holds the future in a box that it empties when it fires, so nothing the
C++ side keeps leads back to the reader. Same configuration and errors as the library's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import _pulsar
import pulsar
import pulsar.asyncio as pulsar_asyncio


class _Settle:
    """The creation callback: completes its future once, then holds nothing."""

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self.box: list[asyncio.Future[Any]] = [future]

    def __call__(self, value: Any) -> None:
        if not self.box:
            return
        future = self.box.pop()
        future.get_loop().call_soon_threadsafe(_complete, future, value)


def _complete(future: asyncio.Future[Any], value: Any) -> None:
    if future.done():
        return
    if isinstance(value, _pulsar.Error):
        future.set_exception(pulsar_asyncio.PulsarException(value.error, value.message))
    else:
        future.set_result(value)


async def create_reader(
    client: pulsar_asyncio.Client,
    topic: str,
    start: pulsar.MessageId,
    receiver_queue_size: int = 1000,
    start_message_id_inclusive: bool = False,
) -> Any:
    """A `_pulsar.Reader` on `topic` from `start` (bytes schema), as the library's
    `create_reader(...)._reader` would be."""
    schema = pulsar.schema.BytesSchema()
    conf = _pulsar.ReaderConfiguration()
    conf.receiver_queue_size(receiver_queue_size)
    conf.schema(schema.schema_info())
    conf.start_message_id_inclusive(start_message_id_inclusive)
    start_id = start._msg_id if isinstance(start, pulsar.MessageId) else start
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    client._client.create_reader_async_v2(topic, start_id, conf, _Settle(future))
    reader = await future
    schema.attach_client(client._client)
    return reader
