"""docs/security.md's threat model names a test for each row: every one named must exist, so
the table and the suite cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_every_row_names_tests_that_exist() -> None:
    table = _section((REPO / "docs/security.md").read_text(), "Threat model")
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 10, "the table is gone"
    for row in rows[1:]:  # the header names no test
        named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", row.rsplit("|", 2)[-2])
        assert named, f"a row names no test: {row[:80]}"
        for path, name in named:
            source = (REPO / path).read_text()
            assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name} does not exist"
