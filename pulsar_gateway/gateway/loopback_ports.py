"""Loopback ports picked free for the processes the gateway (and its tests) start.

A port is picked below the kernel's ephemeral range where it can be. A port found by
binding to port 0 comes from that range, and until the child process binds it, any
socket bound to port 0 or any outgoing connection may be given it: the embedded broker
then exits on "address already in use" (seen once in a full test run, where hundreds of
connections open and close). Below the range only another process picking the same way
can take it, and the starters of child processes pick again when that happens
(`EmbeddedBroker.start`, the test harness's `GatewayProcess.start`).
"""

from __future__ import annotations

import random
import socket

# the lowest port picked: below it are the well-known and commonly configured services
LOWEST_PICKED_PORT = 20000


def ephemeral_start(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unknown)."""
    try:
        with open(path) as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """One port of `host`, free now (`free_ports`)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different ports of `host`, each free now. Each is held bound until all are
    picked, so that no two are the same; any free port at all where none below the
    ephemeral range is found in a few hundred tries."""
    highest = ephemeral_start() - 1
    held: list[socket.socket] = []
    try:
        for _ in range(200 + count):
            if len(held) == count or highest < LOWEST_PICKED_PORT:
                break
            sock = socket.socket()
            try:
                sock.bind((host, random.randint(LOWEST_PICKED_PORT, highest)))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        while len(held) < count:
            sock = socket.socket()
            sock.bind((host, 0))
            held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()
