"""Where a running gateway's Pulsar is, for the tools run beside it (migrate, parity, users).

`/health` used to name the Pulsar service URL to anyone who asked: with the embedded broker,
which checks no credentials, that handed every local account the whole store (users and
rights included). Now the gateway writes it to `gateway-link.json` in its data directory
(0700, the file 0600): the tools read it there when run by the gateway's own account, and
`/health` names only the directory (docs/security.md, "The embedded broker"). With the
embedded broker on a random port, this file is the way to find it.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

LINK_FILE = "gateway-link.json"


@dataclass(frozen=True)
class LinkRecord:
    service_url: str
    metadata_namespace: str
    kafka_tenant: str
    kafka_namespace: str
    users_key_file: str = ""  # the users store's signing key ("" when unsigned)


def write_link(data_dir: Path, record: LinkRecord) -> Path:
    """Write the record for the tools, readable by this account only; its path."""
    directory = data_dir.absolute()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / LINK_FILE
    aside = directory / f".{LINK_FILE}.{os.getpid()}"
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        json.dump(asdict(record), file)
    os.replace(aside, path)  # whole or not at all, for a tool reading it now
    return path


def remove_link(data_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (data_dir.absolute() / LINK_FILE).unlink()


def read_link(data_dir: Path) -> LinkRecord:
    """The record a gateway wrote in `data_dir`; OSError when it cannot be read (none there,
    or another account's), ValueError when it is not one."""
    data = json.loads((data_dir / LINK_FILE).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("service_url"), str):
        raise ValueError(f"{data_dir / LINK_FILE} is not a gateway link file")
    fields = {name: str(data.get(name, "")) for name in LinkRecord.__dataclass_fields__}
    return LinkRecord(**fields)
