"""One AMQP scenario script, run against RabbitMQ 3.10 and against the gateway:
the transcripts (deliveries and their order, redelivered flags, returns, confirm
outcomes, message counts, error reply codes and texts) must be equal.

Needs Debian's `rabbitmq-server` package (scripts/install-system-packages).
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.amqp_scenarios import SCENARIOS
from tests.support.gateway_process import GatewayProcess
from tests.support.rabbitmq_process import RabbitMQProcess


@pytest.fixture(scope="module")
def rabbitmq(reference_rabbitmq: RabbitMQProcess) -> RabbitMQProcess:
    return reference_rabbitmq


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_same_transcript_as_rabbitmq(scenario, rabbitmq, gateway: GatewayProcess) -> None:
    prefix = f"d{uuid.uuid4().hex[:8]}"
    expected = scenario(rabbitmq.url, prefix)
    actual = scenario(gateway.amqp_url, prefix)
    assert actual == expected
