"""One AMQP scenario script, run against RabbitMQ 3.10 and against the gateway:
the transcripts (deliveries and their order, redelivered flags, returns, confirm
outcomes, message counts, error reply codes and texts) must be equal.

Needs Debian's `rabbitmq-server` package (scripts/install-system-packages).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.amqp_scenarios import SCENARIOS
from tests.support.gateway_process import GatewayProcess
from tests.support.rabbitmq_process import RabbitMQProcess, available


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQProcess]:
    # the reference is part of the suite: missing, it fails (make test installs it)
    assert available(), "rabbitmq-server is not installed: run ./scripts/install-system-packages"
    node = RabbitMQProcess(tmp_path_factory.mktemp("rabbitmq")).start()
    yield node
    node.stop()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_same_transcript_as_rabbitmq(scenario, rabbitmq, gateway: GatewayProcess) -> None:
    prefix = f"d{uuid.uuid4().hex[:8]}"
    expected = scenario(rabbitmq.url, prefix)
    actual = scenario(gateway.amqp_url, prefix)
    assert actual == expected
