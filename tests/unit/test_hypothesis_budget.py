"""`make fuzz` reaches every property test: none sets a number of examples the deep profile
cannot scale (harness/hypothesis_budget.py), and CI's profile runs exactly the number asked."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import settings

from harness.hypothesis_budget import BASE_EXAMPLES, examples

TESTS = Path(__file__).resolve().parents[1]
LITERAL = re.compile(r"max_examples\s*=\s*\d")


def test_no_property_test_sets_a_number_of_examples_the_deep_profile_cannot_scale() -> None:
    fixed = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in sorted(TESTS.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if LITERAL.search(line)
    ]
    assert not fixed, f"use max_examples=examples(n) (harness/hypothesis_budget.py): {fixed}"


def test_ci_runs_the_number_a_test_asks_for() -> None:
    if settings().max_examples == BASE_EXAMPLES:  # CI's profile (not `make fuzz`)
        assert [examples(n) for n in (1, 30, 2000)] == [1, 30, 2000]
