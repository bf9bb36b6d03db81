"""The console keeps docs/architecture.md's import rules: it reads through what the
composition root hands it and never reaches storage, the backend or pulsar-client; the core
never imports it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pulsar_gateway"
FORBIDDEN = (
    "pulsar",
    "_pulsar",
    "pulsar_gateway.storage",
    "pulsar_gateway.gateway.backend",
    "pulsar_gateway.gateway.cluster.membership",
    "pulsar_gateway.tools",
)


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_console_imports_no_storage_backend_or_client() -> None:
    modules = sorted((PACKAGE / "console").glob("*.py"))
    assert modules
    for module in modules:
        for name in imported(module):
            assert not any(name == f or name.startswith(f + ".") for f in FORBIDDEN), (
                module.name,
                name,
            )


def test_the_core_does_not_import_the_console() -> None:
    for module in (PACKAGE / "gateway").rglob("*.py"):
        assert not any(n.startswith("pulsar_gateway.console") for n in imported(module)), module
