"""The gateway's order on a channel that consumes what it publishes, byte-level: every
publish's basic.deliver goes out before the basic.ack confirming it, pipelined or not.
RabbitMQ usually does the same but not always (RabbitMQ 3.10 may let an ack overtake its
delivery, depending on how its processes are scheduled), so the differential scenario
deliveries_before_confirms compares only the delivery order and the confirmed set."""

from __future__ import annotations

import uuid

import pytest

from harness.amqp_frame_trace import confirm_after_delivery, publish_and_consume_trace
from harness.gateway_process import GatewayProcess


@pytest.mark.parametrize("no_ack", [True, False])
def test_each_delivery_precedes_its_confirm(gateway: GatewayProcess, no_ack: bool) -> None:
    queue = f"order-{uuid.uuid4().hex[:8]}"
    bodies = [f"m{i}".encode() for i in range(20)]
    facts = confirm_after_delivery(
        publish_and_consume_trace(gateway.amqp_url, queue, bodies, no_ack)
    )
    assert facts[0] == ("delivered", bodies)
    assert facts[1:] == [("ack", seq, True) for seq in range(1, 21)]
