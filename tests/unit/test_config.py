"""Settings: file, environment and flags, and start-up refusing a bad value by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pulsar_gateway.gateway.config import ConfigError, Settings, load_settings

REPO = Path(__file__).resolve().parents[2]


def test_shipped_file_lists_every_setting_with_its_default() -> None:
    import tomllib

    shipped = tomllib.loads((REPO / "conf/gateway.toml").read_text())
    defaults = Settings().model_dump(mode="json")
    assert shipped == defaults


def test_environment_then_flags_override_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "g.toml"
    conf.write_text("[kafka]\nport = 9100\ndefault_partitions = 2\n")
    env = {"PULSAR_GATEWAY_KAFKA__PORT": "9200", "PULSAR_GATEWAY_KAFKA__TENANT": "acme"}
    settings = load_settings(conf, {"kafka.port": "9300"}, environ=env)
    assert settings.kafka.port == 9300
    assert settings.kafka.tenant == "acme"
    assert settings.kafka.default_partitions == 2


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"kafka.port": "ninety"}, "kafka.port"),
        ({"kafka.port": "70000"}, "kafka.port"),
        ({"pulsar.service_url": "http://x"}, "pulsar.service_url"),
        ({"kafka.namespace": "a/b"}, "kafka.namespace"),
        ({"kafka.no_such_setting": "1"}, "kafka.no_such_setting"),
        ({"gateway.log_level": "loud"}, "gateway.log_level"),
        ({"embedded.restart_window_seconds": "0"}, "embedded.restart_window_seconds"),
        ({"cluster.node_id": "1024"}, "cluster.node_id"),
        ({"cluster.enabled": "true", "kafka.node_id": "5000"}, "kafka.node_id"),
        ({"cluster.lease_seconds": "2"}, "cluster"),
        ({"cluster.heartbeat_seconds": "0"}, "cluster.heartbeat_seconds"),
        ({"cluster.member_id": "host a"}, "cluster.member_id"),
        ({"cluster.advertised_amqp_host": "0.0.0.0"}, "cluster.advertised_amqp_host"),
    ],
)
def test_bad_values_name_the_setting(override: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_settings(REPO / "conf/gateway.toml", override, environ={})


SECRET = "Hunter2-s3cr3t"


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"amqp.users": SECRET}, "amqp.users"),
        ({"amqp.users": {"guest": SECRET, "bob": 7}}, "amqp.users.bob"),
        ({"pulsar.service_url": f"http://admin:{SECRET}@pulsar:6650"}, "pulsar.service_url"),
        ({"pulsar.admin_url": f"ftp://admin:{SECRET}@pulsar"}, "pulsar.admin_url"),
        ({"kafka.port": SECRET}, "kafka.port"),
        ({"gateway.log_level": SECRET}, "gateway.log_level"),
        ({"kafka.namespace": f"a/{SECRET}"}, "kafka.namespace"),
        ({"embedded.restart_window_seconds": SECRET}, "embedded.restart_window_seconds"),
        ({"cluster.member_id": f"a {SECRET}"}, "cluster.member_id"),
    ],
)
def test_bad_values_are_named_but_never_shown(override: dict, named: str) -> None:
    """A bad value may be a password: the error names the setting and the rule only."""
    with pytest.raises(ConfigError) as raised:
        load_settings(REPO / "conf/gateway.toml", override, environ={})
    assert f"'{named}'" in str(raised.value)
    assert SECRET not in str(raised.value)


def test_bad_environment_value_is_not_shown() -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(REPO / "conf/gateway.toml", environ={"PULSAR_GATEWAY_AMQP__USERS": SECRET})
    assert "amqp.users" in str(raised.value)
    assert SECRET not in str(raised.value)


def test_cli_names_bad_settings_without_their_values() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pulsar_gateway.cli",
            "run",
            "--set",
            f"pulsar.service_url=http://admin:{SECRET}@pulsar",
            "--set",
            f"amqp.users={SECRET}",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 2
    assert "pulsar.service_url" in result.stderr and "amqp.users" in result.stderr
    assert SECRET not in result.stderr + result.stdout
    # a --set without "=" cannot tell a name from a value: it is not echoed either
    result = subprocess.run(
        [sys.executable, "-m", "pulsar_gateway.cli", "run", "--set", SECRET],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 2
    assert "SECTION.KEY=VALUE" in result.stderr and SECRET not in result.stderr


def test_cli_refuses_to_start_with_a_bad_value() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pulsar_gateway.cli", "run", "--kafka-port", "abc"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 2
    assert "kafka.port" in result.stderr


def test_help_explains_how_to_run() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pulsar_gateway.cli", "run", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 0
    for words in ("--pulsar-url", "--kafka-port", "PULSAR_GATEWAY_", "conf/gateway.toml"):
        assert words in result.stdout
