"""Hand a pulsar-client callback (on a client thread) to the event loop.

A callback that arrives after the loop has closed must not raise back into the
client's C++ thread: pybind11 turns that into std::terminate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


def to_loop(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # loop closed: nobody is waiting any more
        pass
