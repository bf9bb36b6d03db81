"""What the tools run beside a gateway leave in its data directory for the console to show.

`pulsar-gateway migrate` and `parity` run as separate processes, found the gateway through
its `/health` and the link file in its data directory (gateway/link_file.py), so they can
write there too (the gateway's own account, the 0700 directory):

- `migrations/<name>.json`: a running migration's progress, rewritten about once a second
  and once more when it ends (its state then `done` or `failed`), with the tool's process
  id, so that a reader can tell a run that was killed from one still going.
- `parity/<stamp>-<name>.json` and `.html`: a copy of each parity report, the newest
  MAX_PARITY_REPORTS kept.

The gateway only reads these (console/tool_reports.py); nothing here is trusted beyond
being JSON: the console shows it to administrators only. Files are written aside and
renamed into place, so a reader sees a whole file or the one before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

MIGRATIONS = "migrations"
PARITY = "parity"
MAX_PARITY_REPORTS = 100
# a report's id: the file name without its suffix, as parity_stem makes it
REPORT_ID = re.compile(r"^[0-9]{8}T[0-9]{6}(?:\.[0-9]{3})?Z-[A-Za-z0-9%._-]{1,200}$")


def file_name(name: str) -> str:
    """A migration's or report's name as one file name: percent-quoted, no path in it."""
    return quote(name, safe="")[:200].replace(".", "%2E") or "unnamed"


def write_json(directory: Path, name: str, data: Any) -> Path:
    """`data` as `directory/name`, readable by this account only, replaced whole."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / name
    aside = directory / f".{name}.{os.getpid()}"
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(data, file)
    os.replace(aside, path)
    return path


def migration_path(data_dir: Path, name: str) -> Path:
    return data_dir / MIGRATIONS / f"{file_name(name)}.json"


def parity_stem(data_dir: Path, stamp: str, name: str) -> Path:
    """Where a parity report's copy goes, without suffix; `stamp` as %Y%m%dT%H%M%S.fffZ,
    so that names sort by time."""
    return data_dir / PARITY / f"{stamp}-{file_name(name)}"


def keep_newest(directory: Path, count: int = MAX_PARITY_REPORTS) -> None:
    """Remove all but the newest `count` reports (by name: they start with their time)."""
    stems = sorted({p.stem for p in directory.glob("*.json") if REPORT_ID.match(p.stem)})
    for stem in stems[:-count] if count else stems:
        for suffix in (".json", ".html"):
            with contextlib.suppress(FileNotFoundError):
                (directory / f"{stem}{suffix}").unlink()
