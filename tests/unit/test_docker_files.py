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


def test_compose_publishes_what_clients_need_and_no_more(tmp_path: Path) -> None:
    """Kafka and AMQP for clients; the metrics port on the host's loopback only; Pulsar's
    ports (standalone checks no credentials) not at all (issue 33)."""
    result = _compose_config({"GATEWAY_ADMIN_PASSWORD_FILE": str(tmp_path / "pw")})
    assert result.returncode == 0, result.stderr
    assert _published(result.stdout) == {
        ("", "9092"), ("", "5672"), ("127.0.0.1", "9404"),
    }  # fmt: skip
    assert f"file: {tmp_path / 'pw'}" in result.stdout  # the admin password as a secret


def _published(config_output: str) -> set[tuple[str, str]]:
    """(host address, published port) of every port `docker-compose config` lists, in its
    long form (`host_ip:`, `published:`) or its short one ("ip:port:port")."""
    found: set[tuple[str, str]] = set()
    host = ""
    for line in config_output.splitlines():
        text = line.strip().strip("-").strip().strip("'\"")
        if text.startswith("host_ip:"):
            host = text.split(":", 1)[1].strip()
        elif text.startswith("published:"):
            found.add((host, text.split(":", 1)[1].strip().strip("'\"")))
            host = ""
        elif re.fullmatch(r"(\d+\.\d+\.\d+\.\d+:)?\d+:\d+(/tcp)?", text):
            parts = text.split(":")
            found.add((parts[0], parts[1]) if len(parts) == 3 else ("", parts[0]))
    return found


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
    # the metrics port listens beyond loopback in the container: /metrics asks for a login
    assert environ["PULSAR_GATEWAY_METRICS__REQUIRE_LOGIN"] == "true"
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


def _services_environment(config_output: str) -> dict[str, dict[str, str]]:
    """Each service's environment from `docker-compose config` (YAML, two-space indents;
    read without a YAML library: service names at 2, `environment:` at 4, pairs at 6)."""
    services: dict[str, dict[str, str]] = {}
    service, in_env = "", False
    for line in config_output.splitlines():
        indent = len(line) - len(line.lstrip())
        if indent == 2 and line.rstrip().endswith(":"):
            service, in_env = line.strip()[:-1], False
        elif indent == 4:
            in_env = line.strip() == "environment:"
        elif indent == 6 and in_env and ": " in line:
            key, value = line.strip().split(": ", 1)
            services.setdefault(service, {})[key] = value.strip("'\"")
    return services


def test_cluster_compose_runs_three_distinct_members_that_pass_the_settings_checks(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "pw"
    secret.write_text("a long secret\n")
    result = subprocess.run(
        ["docker-compose", "-f", str(REPO / "docker/compose-cluster.yaml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "GATEWAY_ADMIN_PASSWORD_FILE": str(secret)},
    )
    assert result.returncode == 0, result.stderr
    services = _services_environment(result.stdout)
    gateways = sorted(name for name in services if name.startswith("gateway-"))
    assert gateways == ["gateway-1", "gateway-2", "gateway-3"]
    members, nodes, kafka_ports = set(), set(), set()
    for name in gateways:
        environ = {
            **_image_environment(),
            **services[name],
            "PULSAR_GATEWAY_GATEWAY__BOOTSTRAP_PASSWORD_FILE": str(secret),
        }
        settings = load_settings(REPO / "conf/gateway.toml", environ=environ)
        assert settings.cluster.enabled
        assert settings.pulsar.service_url == "pulsar://pulsar:6650"
        # the other members reach this one by its service name, never a wildcard
        assert settings.cluster.advertised_amqp_host == name
        assert settings.cluster.advertised_amqp_port == settings.amqp.cluster_port == 25672
        members.add(settings.cluster.member_id)
        nodes.add(settings.cluster_node_id)
        kafka_ports.add(settings.kafka.advertised_port)
    assert len(members) == len(nodes) == len(kafka_ports) == 3
    # Kafka and AMQP for clients, metrics on loopback, nothing of Pulsar's or the
    # member-to-member AMQP port (inside the compose network)
    assert _published(result.stdout) == {
        *(("", str(port)) for port in (9092, 9093, 9094, 5672, 5673, 5674)),
        *(("127.0.0.1", str(port)) for port in (9404, 9405, 9406)),
    }
