"""The compiled twins (docs/compiled.md): the build makes them, the gateway runs them, and a
twin built from another version of its module's source is never run."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsar_gateway.gateway.compiled_twins import (
    COMPILED_MODULES,
    STAMP,
    compiled_twin,
    is_twin,
    source_digest,
)
from pulsar_gateway.storage.kafka import read_batches, whole_entry


def test_make_compiled_every_module_and_the_gateway_runs_the_twins() -> None:
    """`make` compiled read_batches (scripts/compile_modules.py): a fetch after a restart
    runs the compiled `kafka_batch`. Fails when the build could not compile (no C compiler
    or Python headers: the gateway then runs interpreted, slower)."""
    assert COMPILED_MODULES == ("pulsar_gateway.storage.kafka.read_batches",)
    assert whole_entry.COMPILED, "make compiles read_batches: run it (needs gcc)"
    twin = compiled_twin(read_batches)
    assert is_twin(twin) and whole_entry.kafka_batch is twin.kafka_batch
    assert ".so" in Path(twin.__file__ or "").name  # machine code, not a copy of the source


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Path]:
    """A package of its own on the import path, for a module and a twin of it."""
    root = tmp_path / "twins_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    yield root
    sys.path.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("twins_pkg")]:
        del sys.modules[name]


def _module_and_twin(package: Path, stamp: str | None) -> tuple[object, object]:
    import importlib

    (package / "hot.py").write_text("def f() -> str:\n    return 'source'\n")
    digest = source_digest(package / "hot.py")
    twin = "def f() -> str:\n    return 'twin'\n"
    if stamp is not None:
        twin += f"{STAMP} = {stamp.format(digest=digest)!r}\n"
    (package / "hot_compiled.py").write_text(twin)
    module = importlib.import_module("twins_pkg.hot")
    return module, compiled_twin(module)


def test_a_twin_of_the_current_source_is_chosen(package: Path) -> None:
    module, chosen = _module_and_twin(package, "{digest}")
    assert chosen is not module and chosen.f() == "twin"  # type: ignore[attr-defined]


def test_a_twin_of_another_source_is_not_run(
    package: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A module edited after the build: its twin is older code, the module runs."""
    module, chosen = _module_and_twin(package, "0{digest}")
    assert chosen is module and chosen.f() == "source"  # type: ignore[attr-defined]
    assert "compiled from another version" in caplog.text


def test_a_twin_without_a_stamp_is_not_run(package: Path) -> None:
    module, chosen = _module_and_twin(package, None)
    assert chosen is module


def test_no_twin_runs_the_module(package: Path) -> None:
    import importlib

    (package / "cold.py").write_text("X = 1\n")
    module = importlib.import_module("twins_pkg.cold")
    assert compiled_twin(module) is module and not is_twin(module)
