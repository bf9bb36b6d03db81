"""Where pulsar-client's own log goes: a file, never a Python logger.

Handing pulsar-client a Python `logging.Logger` makes its C++ threads call into
Python (and take the GIL) for log decisions on every message: measured here, a
reader's read_next(0) fell from 84k to 11k messages/s, and the gateway's produce
path to under 4k records/s. Its warnings (and pulsar-lite's expected UnknownError
on empty topics) go to `pulsar-client.log` in the data directory instead; tools
without one (migrate, parity and its Spark workers) use the temp directory, so a
user never reads a harmless ERROR line on their terminal.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pulsar

TOOLS_LOG = Path(tempfile.gettempdir()) / "pulsar-gateway" / "pulsar-client.log"


def client_logger(path: Path | None) -> Any:
    path = path or TOOLS_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    return pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(path))
