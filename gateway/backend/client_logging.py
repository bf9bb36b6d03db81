"""Where pulsar-client's own log goes: a file, never a Python logger.

Handing pulsar-client a Python `logging.Logger` makes its C++ threads call into
Python (and take the GIL) for log decisions on every message: measured here, a
reader's read_next(0) fell from 84k to 11k messages/s, and the gateway's produce
path to under 4k records/s. Its warnings (and pulsar-lite's expected UnknownError
on empty topics) go to `pulsar-client.log` in the data directory instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar


def client_logger(path: Path | None) -> Any:
    if path is None:
        return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    path.parent.mkdir(parents=True, exist_ok=True)
    return pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(path))
