"""The supervisor's decisions (docs/cluster.md, "Workers on one host"): each worker's own
settings, how they reach it, the restart back-off and crash window, `gateway.workers`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pulsar_gateway.gateway.config import ConfigError, load_settings
from pulsar_gateway.supervisor import (
    MAX_BACKOFF_SECONDS,
    Supervisor,
    Worker,
    environment_for,
    resolve_workers,
    worker_settings,
)

SHIPPED = Path(__file__).resolve().parents[2] / "conf" / "gateway.toml"


def settings_with(**dotted: object):  # type: ignore[no-untyped-def]
    return load_settings(SHIPPED, dotted, environ={})


def test_each_worker_gets_its_own_ports_node_and_member_id() -> None:
    settings = settings_with(**{"kafka.port": 9092, "metrics.port": 9404, "kafka.node_id": 10})
    second = worker_settings(settings, 1, "pulsar://127.0.0.1:6650")
    assert second["kafka.port"] == "9093"
    assert second["metrics.port"] == "9405"
    assert second["cluster.node_id"] == "11"
    assert second["cluster.enabled"] == "true"
    assert second["amqp.reuse_port"] == "true"
    assert second["gateway.workers"] == "1"  # a worker never supervises
    assert second["pulsar.service_url"] == "pulsar://127.0.0.1:6650"
    assert second["cluster.member_id"].endswith("/1")
    assert "amqp.port" not in second  # every worker shares the public AMQP port


def test_a_configured_member_id_and_node_id_are_the_base() -> None:
    settings = settings_with(
        **{
            "cluster.member_id": "host-a",
            "cluster.node_id": 100,
            "kafka.port": 0,
            "metrics.port": 0,
            "kafka.advertised_port": 19092,
            "amqp.cluster_port": 25672,
        }
    )
    third = worker_settings(settings, 2, "")
    assert third["cluster.member_id"] == "host-a/2"
    assert third["cluster.node_id"] == "102"
    assert third["kafka.port"] == "0" and third["metrics.port"] == "0"  # 0 stays "any"
    assert third["kafka.advertised_port"] == "19094"
    assert third["amqp.cluster_port"] == "25674"
    assert "pulsar.service_url" not in third  # an external Pulsar comes from the settings


def test_values_reach_the_worker_through_its_environment_not_its_command_line() -> None:
    env = environment_for(
        {"PATH": "/bin"},
        {"kafka.port": "9093", "pulsar.service_url": "pulsar://p:6650", "pulsar.auth_token": "s"},
        Path("conf/x.toml"),
    )
    assert env["PULSAR_GATEWAY_KAFKA__PORT"] == "9093"
    assert env["PULSAR_GATEWAY_PULSAR__AUTH_TOKEN"] == "s"
    assert env["PULSAR_GATEWAY_CONFIG"] == str(Path("conf/x.toml").absolute())
    assert env["PATH"] == "/bin"
    # and the worker reads them back as the same settings
    loaded = load_settings(None, None, environ={**env, "PULSAR_GATEWAY_CONFIG": str(SHIPPED)})
    assert loaded.kafka.port == 9093


def test_backoff_doubles_and_is_capped() -> None:
    supervisor = Supervisor(settings_with(), 2, {}, None)
    delays = [supervisor.backoff(n) for n in range(1, 10)]
    assert delays[0] == 0.5 and delays[1] == 1.0 and delays[2] == 2.0
    assert max(delays) == MAX_BACKOFF_SECONDS
    assert delays == sorted(delays)


def test_exits_count_within_the_window_only() -> None:
    now = [0.0]
    supervisor = Supervisor(
        settings_with(**{"gateway.worker_restart_window_seconds": 10}),
        2,
        {},
        None,
        clock=lambda: now[0],
    )
    worker = Worker(0, {})
    assert supervisor.count_exit(worker) == 1
    now[0] = 5.0
    assert supervisor.count_exit(worker) == 2
    now[0] = 14.0  # the first exit left the window
    assert supervisor.count_exit(worker) == 2
    now[0] = 100.0
    assert supervisor.count_exit(worker) == 1


def test_workers_setting() -> None:
    assert settings_with().gateway.workers == 1
    assert settings_with(**{"gateway.workers": "3"}).gateway.workers == 3
    auto = settings_with(**{"gateway.workers": "auto"}).gateway.workers
    assert auto == "auto"
    assert resolve_workers(auto) == len(os.sched_getaffinity(0))
    assert resolve_workers(4) == 4
    for bad in ("0", "-1", "many", "2.5", "1025"):
        with pytest.raises(ConfigError) as error:
            settings_with(**{"gateway.workers": bad})
        assert "gateway.workers" in str(error.value)
        assert "1 to 1024, or auto" in str(error.value)
