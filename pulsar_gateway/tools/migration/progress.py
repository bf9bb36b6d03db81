"""A running migration's progress, published for the gateway's console.

The terminal shows a progress bar; the console (docs/console.md, "Migrations") reads the
same numbers from `migrations/<name>.json` in the gateway's data directory
(gateway/tool_reports.py), rewritten at most once a second while records are copied and
once more at the end. Without a data directory (migrate given `--pulsar-url`, or a
directory this account may not write) nothing is published and the copy goes on.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsar_gateway.gateway.tool_reports import migration_path, write_json

log = logging.getLogger("gateway.migrate")

WRITE_SECONDS = 1.0


@dataclass
class PartitionProgress:
    total: int = 0  # records left to copy when this run started
    done: int = 0
    error: str | None = None
    finished: bool = False


@dataclass
class MigrationProgress:
    name: str
    source: str
    target: str
    path: Path | None  # None: not published
    started: float = field(default_factory=time.time)
    state: str = "starting"  # starting, copying, groups, done, failed
    error: str | None = None
    partitions: dict[tuple[str, int], PartitionProgress] = field(default_factory=dict)
    groups: int = 0
    _written: float = 0.0

    @classmethod
    def for_gateway(cls, name: str, source: str, target: str, data_dir: str) -> MigrationProgress:
        path = migration_path(Path(data_dir), name) if data_dir else None
        return cls(name, source, target, path)

    def plan(self, totals: dict[tuple[str, int], int]) -> None:
        self.partitions = {tp: PartitionProgress(total=n) for tp, n in totals.items()}
        self.state = "copying"
        self.write(force=True)

    def advance(self, topic: str, partition: int, count: int) -> None:
        self.partitions[(topic, partition)].done += count
        self.write()

    def finish_partition(self, topic: str, partition: int, error: str | None) -> None:
        part = self.partitions[(topic, partition)]
        part.finished, part.error = True, error
        self.write()

    def end(self, state: str, error: str | None = None, groups: int = 0) -> None:
        self.state, self.error, self.groups = state, error, groups
        self.write(force=True)

    def to_json(self) -> dict[str, Any]:
        now = time.time()
        done = sum(p.done for p in self.partitions.values())
        elapsed = now - self.started
        return {
            "name": self.name,
            "source": self.source,
            "target": self.target,
            "pid": os.getpid(),
            "state": self.state,
            "error": self.error,
            "started": self.started,
            "updated": now,
            "total": sum(p.total for p in self.partitions.values()),
            "done": done,
            "records_per_second": round(done / elapsed, 1) if elapsed > 0 else 0.0,
            "groups": self.groups,
            "partitions": [
                {
                    "topic": topic,
                    "partition": partition,
                    "total": p.total,
                    "done": p.done,
                    "finished": p.finished,
                    "error": p.error,
                }
                for (topic, partition), p in sorted(self.partitions.items())
            ],
        }

    def write(self, force: bool = False) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if not force and now - self._written < WRITE_SECONDS:
            return
        self._written = now
        try:
            write_json(self.path.parent, self.path.name, self.to_json())
        except OSError as exc:
            log.warning("migration progress not published to %s: %s", self.path, exc)
            self.path = None
