"""Shared fixtures: one real gateway process (embedded Pulsar) for the integration tests, and
an embedded broker of its own for each test module that talks to Pulsar directly."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import pytest

from harness.cpu_hogs import burning_cpus
from harness.gateway_process import GatewayProcess
from harness.hypothesis_budget import load_profile
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker

# CI's budget of examples per property test, or `make fuzz`'s deep one (HYPOTHESIS_PROFILE=deep);
# loaded before any test module is imported, so `examples(n)` in their @settings sees it
load_profile()

# what asyncio logs of work a process lost track of: a task destroyed while pending, or one
# whose failure nobody read
LOST_TASK = ("Task was destroyed but it is pending", "exception was never retrieved")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-hogs",
        type=int,
        default=0,
        help="run this many busy-looping processes beside the tests (races hide on an "
        "idle machine: `make stress` runs a subset with one per core)",
    )


@pytest.fixture(scope="session", autouse=True)
def cpu_hogs(request: pytest.FixtureRequest) -> Iterator[None]:
    """The hogs asked for in all, shared out among pytest-xdist's test processes."""
    wanted = request.config.getoption("--cpu-hogs")
    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    with burning_cpus(wanted // processes + (worker < wanted % processes)):
        yield


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
    lines = text.splitlines()
    lost = [at for at, line in enumerate(lines) if any(sign in line for sign in LOST_TASK)]
    # with the lines after each (the future and its error): the log is gone after the run
    assert not lost, "\n".join("\n".join(lines[at : at + 4]) for at in lost[:5])


@pytest.fixture(scope="module")
def broker_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service URL of a pulsar-lite broker started for the test module, on a loop of its
    own (each test runs its scenario on a fresh one with `asyncio.run`)."""
    loop = asyncio.new_event_loop()
    broker = EmbeddedBroker(tmp_path_factory.mktemp("broker"))
    loop.run_until_complete(broker.start())
    yield broker.service_url
    loop.run_until_complete(broker.stop())
    loop.close()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"
