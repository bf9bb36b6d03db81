"""One AMQP scenario script, run against RabbitMQ 3.10 and against the gateway:
the transcripts (deliveries and their order, redelivered flags, returns, confirm
outcomes, message counts, error reply codes and texts) must be equal.

Needs Debian's `rabbitmq-server` package (scripts/install-system-packages).
"""

from __future__ import annotations

import os
import uuid

import pytest

from harness.amqp_scenarios import SCENARIOS
from harness.cpu_hogs import burning_cpus
from harness.gateway_process import GatewayProcess
from harness.rabbitmq_process import RabbitMQProcess


@pytest.fixture(scope="module")
def rabbitmq(reference_rabbitmq: RabbitMQProcess) -> RabbitMQProcess:
    return reference_rabbitmq


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_same_transcript_as_rabbitmq(scenario, rabbitmq, gateway: GatewayProcess) -> None:
    prefix = f"d{uuid.uuid4().hex[:8]}"
    expected = scenario(rabbitmq.url, prefix)
    actual = scenario(gateway.amqp_url, prefix)
    assert actual == expected


# the scenarios whose answers depend on the store answering in time (counts, basic.get after
# confirms, purge, TTL), replayed while a busy process per core competes with the gateway
UNDER_LOAD = [
    s
    for s in SCENARIOS
    if s.__name__
    in {
        "counts_limits_and_tx",
        "publish_then_get_same_channel",
        "deliveries_before_confirms",
        "overflow_modes",
    }
]


@pytest.mark.parametrize("scenario", UNDER_LOAD, ids=lambda s: s.__name__)
def test_same_transcript_under_load(scenario, rabbitmq, gateway: GatewayProcess) -> None:
    prefix = f"l{uuid.uuid4().hex[:8]}"
    expected = scenario(rabbitmq.url, prefix)
    with burning_cpus(os.cpu_count() or 2):
        actual = scenario(gateway.amqp_url, prefix)
    assert actual == expected
