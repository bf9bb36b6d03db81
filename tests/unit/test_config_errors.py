"""Config errors are one line naming the setting or the file (issue 33): a config file that
is not UTF-8 or is a directory, a non-finite number, an encrypted TLS key (refused, never
prompted for)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pulsar_gateway.gateway.backend.connection_security import (
    PulsarSecurity,
    PulsarSecurityError,
)
from pulsar_gateway.gateway.config import ConfigError, load_settings
from pulsar_gateway.security.tls import TlsConfigError, server_context

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_gateway.cli", "run", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # no terminal to prompt on
    )


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_bytes(b'[kafka]\nhost = "caf\xe9"\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(config, environ={})
    assert str(raised.value) == f"config file {config}: not UTF-8 text (byte 19)"
    done = _run("--config", str(config))
    assert done.returncode == 2
    expected = f"pulsar-gateway: config file {config}: not UTF-8 text (byte 19)"
    assert done.stderr.splitlines() == [expected]


def test_a_config_naming_a_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Is a directory"):
        load_settings(tmp_path, environ={})
    done = _run("--config", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"pulsar-gateway: config file {tmp_path}: Is a directory"]
    # the same through the environment
    with pytest.raises(ConfigError, match="Is a directory"):
        load_settings(environ={"PULSAR_GATEWAY_CONFIG": str(tmp_path)})


@pytest.mark.parametrize(
    "setting",
    [
        "kafka.frame_timeout_seconds",
        "kafka.connection_idle_seconds",
        "amqp.handshake_timeout_seconds",
        "gateway.worker_restart_window_seconds",
        "cluster.lease_seconds",
        "embedded.start_timeout_seconds",
    ],
)
@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "Infinity"])
def test_non_finite_numbers_are_refused_by_name(setting: str, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(REPO / "conf/gateway.toml", {setting: value}, environ={})
    (line,) = str(raised.value).splitlines()
    assert line.startswith(f"setting '{setting}': ")
    assert "finite" in line or "greater than" in line


def test_the_cli_says_one_line_per_bad_setting() -> None:
    done = _run("--set", "kafka.frame_timeout_seconds=inf", "--set", "kafka.port=x")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr
    assert any("'kafka.frame_timeout_seconds'" in line for line in lines)
    assert any("'kafka.port'" in line for line in lines)
    assert all(line.startswith("pulsar-gateway: setting '") for line in lines)


def _encrypted_key_pair(where: Path) -> tuple[Path, Path]:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-days", "1", "-subj", "/CN=localhost",
         "-keyout", "key.pem", "-out", "cert.pem", "-passout", "pass:secret"],
        cwd=where, check=True, capture_output=True,
    )  # fmt: skip
    return where / "cert.pem", where / "key.pem"


@pytest.mark.parametrize("section", ["kafka", "amqp"])
def test_an_encrypted_listener_key_is_refused_by_name(tmp_path: Path, section: str) -> None:
    cert, key = _encrypted_key_pair(tmp_path)
    with pytest.raises(TlsConfigError) as raised:
        server_context(section, str(cert), str(key))
    assert str(raised.value).startswith(f"setting '{section}.tls_key_file': the key is encrypted")


def test_an_encrypted_key_toward_pulsar_is_refused_by_name(tmp_path: Path) -> None:
    cert, key = _encrypted_key_pair(tmp_path)
    (tmp_path / "empty.toml").write_text("")
    settings = load_settings(
        tmp_path / "empty.toml",
        {
            "pulsar.service_url": "pulsar+ssl://pulsar.test:6651",
            "pulsar.tls_cert_file": str(cert),
            "pulsar.tls_key_file": str(key),
        },
        environ={},
    )
    with pytest.raises(PulsarSecurityError, match="'pulsar.tls_key_file': the key is encrypted"):
        PulsarSecurity.from_settings(settings.pulsar)


def test_a_gateway_with_an_encrypted_key_stops_with_one_line(tmp_path: Path) -> None:
    """Before, OpenSSL asked for the passphrase on the terminal with the event loop blocked;
    now the start-up stops at once, the setting named, before any broker starts."""
    cert, key = _encrypted_key_pair(tmp_path)
    done = _run(
        "--data-dir", str(tmp_path / "data"),
        "--set", f"kafka.tls_cert_file={cert}", "--set", f"kafka.tls_key_file={key}",
        "--set", "kafka.port=0", "--set", "metrics.port=0", "--set", "amqp.enabled=false",
    )  # fmt: skip
    assert done.returncode == 1
    failures = [line for line in done.stderr.splitlines() if "start-up failed" in line]
    assert len(failures) == 1, done.stderr
    assert "setting 'kafka.tls_key_file': the key is encrypted" in failures[0]
    assert "secret" not in done.stderr
    assert not (tmp_path / "data" / "pulsar" / "db.rocksdb").exists()


def test_pulsar_client_is_chosen_by_file_env_or_flag_and_a_wrong_one_is_named(
    tmp_path: Path,
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[pulsar]\nclient = "native"\n')
    assert load_settings(config, environ={}).pulsar.client == "native"
    environ = {"PULSAR_GATEWAY_PULSAR__CLIENT": "pulsar-client"}
    assert load_settings(config, environ=environ).pulsar.client == "pulsar-client"
    overrides = {"pulsar.client": "native"}
    assert load_settings(config, overrides, environ).pulsar.client == "native"
    with pytest.raises(ConfigError) as raised:
        load_settings(config, environ={"PULSAR_GATEWAY_PULSAR__CLIENT": "fast"})
    assert len(str(raised.value).splitlines()) == 1
    assert str(raised.value).startswith("setting 'pulsar.client': ")
    assert "fast" not in str(raised.value)
    started = _run("--config", str(config), "--pulsar-client", "wire")
    assert started.returncode != 0
    assert "setting 'pulsar.client'" in started.stderr
