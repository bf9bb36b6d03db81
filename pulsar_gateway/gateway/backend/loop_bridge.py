"""Hand a pulsar-client callback (on a client thread) to the event loop.

A callback that arrives after the loop has closed must not raise back into the
client's C++ thread: pybind11 turns that into std::terminate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import _pulsar


def to_loop(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # loop closed: nobody is waiting any more
        pass


def message_future(
    loop: asyncio.AbstractEventLoop, failure: Callable[[Any], Exception]
) -> tuple[asyncio.Future[Any], Callable[[Any, Any], None]]:
    """A future and the `(result, message)` callback that settles it, for pulsar-client's
    receive_async and read_next_async; `failure(result)` builds the error for a bad result."""
    future: asyncio.Future[Any] = loop.create_future()

    def complete(result: Any, msg: Any) -> None:
        if future.done():
            return
        if result == _pulsar.Result.Ok:
            future.set_result(msg)
        else:
            future.set_exception(failure(result))

    def done(result: Any, msg: Any) -> None:
        to_loop(loop, complete, result, msg)

    return future, done
