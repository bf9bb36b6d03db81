"""Shared fixtures: one real gateway process (embedded Pulsar) for the integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.gateway_process import GatewayProcess

# what asyncio logs of work a process lost track of: a task destroyed while pending, or one
# whose failure nobody read
LOST_TASK = ("Task was destroyed but it is pending", "exception was never retrieved")


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # the broker logs subscriptions, acks and consumers at info: tests wait on them
    settings = ["--set", "kafka.default_partitions=1", "--set", "embedded.log_level=info"]
    process = GatewayProcess(tmp_path_factory.mktemp("gateway"), extra=settings)
    process.start()
    yield process
    code = process.stop()
    assert code == 0, f"gateway exited {code}:\n{process.log_tail()}"
    # asyncio only logs a lost task (LOST_TASK): the log is where a run shows one
    text = process.log_path.read_text(errors="replace")
    lost = [line for line in text.splitlines() if any(sign in line for sign in LOST_TASK)]
    assert not lost, lost[:5]


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"
