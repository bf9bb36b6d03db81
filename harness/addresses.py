"""An address of this machine that is not loopback: a connection to it from here has a
non-loopback peer, as a client on another host would (loopback-only rules, bind checks)."""

from __future__ import annotations

import ipaddress
import socket


def outside_address() -> str:
    """The IPv4 address this machine sends from toward the outside (no packet is sent: a UDP
    socket's connect only picks the route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("203.0.113.1", 9))  # TEST-NET-3: never answered, only routed
        address = str(probe.getsockname()[0])
    assert not ipaddress.ip_address(address).is_loopback, "this machine has no outside address"
    return address
