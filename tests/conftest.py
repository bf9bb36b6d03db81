"""Shared fixtures: one real gateway process (embedded Pulsar) for the integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.gateway_process import GatewayProcess


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # the broker logs subscriptions, acks and consumers at info: tests wait on them
    settings = ["--set", "kafka.default_partitions=1", "--set", "embedded.log_level=info"]
    process = GatewayProcess(tmp_path_factory.mktemp("gateway"), extra=settings)
    process.start()
    yield process
    code = process.stop()
    assert code == 0, f"gateway exited {code}:\n{process.log_tail()}"


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"
