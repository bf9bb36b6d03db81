"""The harness starts a gateway again on fresh ports when a port it picked free was taken
before the gateway bound it (tests run in parallel; this failed a group test's start)."""

from __future__ import annotations

import socket

from harness.gateway_process import GatewayProcess


def test_a_port_taken_before_the_gateway_binds_it_is_picked_again(tmp_path) -> None:
    gateway = GatewayProcess(tmp_path / "gateway")
    taken = gateway.kafka_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        gateway.start()
        try:
            assert gateway.kafka_port != taken
            assert gateway.health() is not None
            assert "address already in use" in gateway.log_path.read_text()
        finally:
            assert gateway.stop() == 0
