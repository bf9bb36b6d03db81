"""The test harness (harness/) is the one thing tests and benches share: a bench that
imported a test module, or a harness module that did, would tie the benches to the tests
tree again (issue 34), and the product imports neither. Read from the sources, line by line,
so an import inside a function counts too."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _importers(folder: str, package: str) -> list[str]:
    statement = re.compile(rf"^\s*(from|import)\s+{package}(\.|\s)", re.MULTILINE)
    return [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / folder).rglob("*.py"))
        if statement.search(path.read_text(encoding="utf-8"))
    ]


def test_benches_import_the_harness_not_the_tests() -> None:
    assert _importers("bench", "tests") == []
    assert _importers("bench", "harness")  # the check above looks at the right files


def test_the_harness_imports_no_test_module() -> None:
    assert _importers("harness", "tests") == []


def test_the_product_imports_neither() -> None:
    assert _importers("pulsar_gateway", "tests") == []
    assert _importers("pulsar_gateway", "harness") == []
