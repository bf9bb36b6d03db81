"""The compose file is valid (checked offline by docker-compose) and the Dockerfile installs
the package the way the README does."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from pulsar_gateway.gateway.config import ConfigError, load_settings

REPO = Path(__file__).resolve().parents[2]


def _compose_config(environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker-compose", "-f", str(REPO / "docker/compose.yaml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], **environ},
    )


def test_compose_file_is_valid(tmp_path: Path) -> None:
    secret = tmp_path / "admin-password.txt"
    result = _compose_config({"GATEWAY_ADMIN_PASSWORD_FILE": str(secret)})
    assert result.returncode == 0, result.stderr
    assert "apachepulsar/pulsar" in result.stdout
    assert "PULSAR_GATEWAY_PULSAR__SERVICE_URL: pulsar://pulsar:6650" in result.stdout


def test_compose_publishes_pulsar_and_metrics_on_loopback_only(tmp_path: Path) -> None:
    result = _compose_config({"GATEWAY_ADMIN_PASSWORD_FILE": str(tmp_path / "pw")})
    assert result.returncode == 0, result.stderr
    for port in ("6650", "8080", "9404"):
        assert f"127.0.0.1:{port}:{port}" in result.stdout
        assert f"published: {port}" not in result.stdout  # not on every interface
    assert f"file: {tmp_path / 'pw'}" in result.stdout  # the admin password as a secret


def test_compose_refuses_to_run_without_the_admin_password_file() -> None:
    result = _compose_config({})
    assert result.returncode != 0
    assert "GATEWAY_ADMIN_PASSWORD_FILE" in result.stderr


def _image_environment() -> dict[str, str]:
    """The Dockerfile's ENV settings, as the gateway in the image sees them."""
    text = (REPO / "docker/Dockerfile").read_text()
    block = re.search(r"^ENV (.*?)(?:\n\n|\n[A-Z]+ )", text, re.S | re.M)
    assert block is not None
    pairs = re.findall(r"(PULSAR_GATEWAY_\w+)=(\S+)", block.group(1))
    return dict(pairs)


def test_the_image_ships_with_sasl_on_and_a_bootstrap_user(tmp_path: Path) -> None:
    environ = _image_environment()
    assert environ["PULSAR_GATEWAY_KAFKA__HOST"] == "0.0.0.0"
    assert "SCRAM-SHA-256" in environ["PULSAR_GATEWAY_KAFKA__SASL_MECHANISMS"]
    assert environ["PULSAR_GATEWAY_GATEWAY__BOOTSTRAP_USER"] == "admin"
    assert environ["PULSAR_GATEWAY_GATEWAY__BOOTSTRAP_PASSWORD_FILE"].startswith("/run/secrets/")
    secret = tmp_path / "pw"
    secret.write_text("a long secret\n")
    environ["PULSAR_GATEWAY_GATEWAY__BOOTSTRAP_PASSWORD_FILE"] = str(secret)
    settings = load_settings(REPO / "conf/gateway.toml", environ=environ)  # passes the checks
    assert settings.kafka.authenticates and not settings.kafka.allow_anonymous
    # the same image without SASL would refuse to start on 0.0.0.0
    del environ["PULSAR_GATEWAY_KAFKA__SASL_MECHANISMS"]
    with pytest.raises(ConfigError, match="kafka.allow_anonymous"):
        load_settings(REPO / "conf/gateway.toml", environ=environ)


def test_dockerfile_copies_what_the_package_needs() -> None:
    text = (REPO / "docker/Dockerfile").read_text()
    for folder in ("pulsar_gateway", "conf"):
        assert f"COPY {folder} ./{folder}" in text
    assert "pip install --no-cache-dir ." in text
