"""The test harness takes a gateway as started only when its own /health answers: a port
picked free by two tests at once was answered by the other test's gateway (cc46)."""

from __future__ import annotations

from pathlib import Path

from harness.gateway_process import answers_for


def test_only_a_gateway_of_the_data_dir_or_one_of_its_workers_is_taken_as_started(
    tmp_path: Path,
) -> None:
    ours = tmp_path / "gw"
    assert answers_for({"ok": True, "data_dir": str(ours)}, ours)
    assert answers_for({"ok": True, "data_dir": str(ours / "workers" / "1")}, ours)
    assert not answers_for({"ok": True, "data_dir": str(tmp_path / "gw2")}, ours)
    assert not answers_for({"ok": True, "data_dir": str(tmp_path / "other")}, ours)
    assert not answers_for({"ok": True}, ours)  # not a gateway's answer
