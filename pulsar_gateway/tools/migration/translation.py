"""Source offset -> target offset, per migrated partition, kept in the metadata store.

A migration copies each source partition in order, so the mapping is a few runs of
consecutive offsets: (source start, target start, length). Source offsets may have
gaps (compaction, transaction markers); the target's are dense. The record also says
where copying resumes: `next_source` and the `next_target` it will land on.

Keys: `migration/<name>/topics/<topic>/<partition>` and `migration/<name>/groups/<group>`,
with names percent-quoted so that one migration is one folder of the store.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

PREFIX = "migration/"


def _q(text: str) -> str:
    return quote(text, safe="")


def partition_key(name: str, topic: str, partition: int) -> str:
    return f"{PREFIX}{_q(name)}/topics/{_q(topic)}/{partition}"


def group_key(name: str, group: str) -> str:
    return f"{PREFIX}{_q(name)}/groups/{_q(group)}"


@dataclass
class PartitionTranslation:
    """What has been copied of one partition, as runs of consecutive offsets."""

    next_source: int
    next_target: int
    runs: list[tuple[int, int, int]] = field(default_factory=list)  # (source, target, length)

    @property
    def copied(self) -> int:
        return sum(length for _, _, length in self.runs)

    def add(self, source: int, target: int) -> None:
        """One more record copied: `source` went to `target` (both past the last one)."""
        if source < self.next_source or target != self.next_target:
            raise ValueError(
                f"out of order: source {source} (next {self.next_source}), "
                f"target {target} (next {self.next_target})"
            )
        if self.runs:
            start, target_start, length = self.runs[-1]
            if start + length == source and target_start + length == target:
                self.runs[-1] = (start, target_start, length + 1)
                self.next_source, self.next_target = source + 1, target + 1
                return
        self.runs.append((source, target, 1))
        self.next_source, self.next_target = source + 1, target + 1

    def add_range(self, sources: list[int], first_target: int) -> None:
        for index, source in enumerate(sources):
            self.add(source, first_target + index)

    def add_run(self, sources: Sequence[int], first_target: int) -> None:
        """Like add_range; a `range` of sources (a batch passed on whole) in one step."""
        if not isinstance(sources, range) or sources.step != 1 or not sources:
            self.add_range(list(sources), first_target)
            return
        self.add(sources[0], first_target)
        start, target, length = self.runs[-1]
        rest = len(sources) - 1
        self.runs[-1] = (start, target, length + rest)
        self.next_source += rest
        self.next_target += rest

    def target_of(self, source: int) -> int | None:
        """Where the record at source offset `source` went; None if it was not copied."""
        position = bisect.bisect_right(self.runs, (source, float("inf"), 0)) - 1
        if position < 0:
            return None
        start, target, length = self.runs[position]
        return target + (source - start) if source < start + length else None

    def next_target_for(self, committed: int) -> int:
        """A consumer position on the source (next offset to read) as one on the target:
        the target offset of the first copied record at or after it."""
        for start, target, length in self.runs:
            if committed < start:
                return target
            if committed < start + length:
                return target + (committed - start)
        return self.next_target

    def to_json(self) -> dict[str, Any]:
        return {
            "next_source": self.next_source,
            "next_target": self.next_target,
            "runs": [list(run) for run in self.runs],
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> PartitionTranslation:
        return cls(
            int(value["next_source"]),
            int(value["next_target"]),
            [(int(a), int(b), int(c)) for a, b, c in value.get("runs", [])],
        )
