"""`pulsar-gateway run` puts Python's small objects on the C allocator (issue 10's soak):
pymalloc keeps an arena while any object in it lives, so a busy period left the gateway
holding arenas of empty pools after its clients left; glibc's freed chunks coalesce and
the idle trim returns their pages. The process re-executes itself once, keeping its pid,
and leaves an allocator the user chose alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_process import GatewayProcess


def _environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = (item.decode(errors="replace").partition("=") for item in raw if item)
    return {key: value for key, _, value in pairs}


def test_the_gateway_runs_on_the_c_allocator(gateway: GatewayProcess) -> None:
    assert gateway.process is not None
    assert _environment(gateway.process.pid).get("PYTHONMALLOC") == "malloc"
    assert gateway.health() is not None  # the same pid that was started, serving


@pytest.fixture
def pymalloc_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatewayProcess]:
    monkeypatch.setenv("PYTHONMALLOC", "pymalloc")
    process = GatewayProcess(tmp_path / "gateway").start()
    try:
        yield process
    finally:
        process.stop()


def test_an_allocator_the_user_chose_is_kept(pymalloc_gateway: GatewayProcess) -> None:
    assert pymalloc_gateway.process is not None
    assert _environment(pymalloc_gateway.process.pid)["PYTHONMALLOC"] == "pymalloc"
    assert pymalloc_gateway.health() is not None
