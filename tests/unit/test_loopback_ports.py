"""Ports picked for child processes, and which ports a process itself listens on."""

from __future__ import annotations

import os
import socket

from pulsar_gateway.gateway.loopback_ports import LOWEST_PICKED_PORT, ephemeral_start, free_ports
from pulsar_gateway.gateway.process_sockets import listening_ports


def test_ports_are_different_free_and_below_the_ephemeral_range() -> None:
    ports = free_ports(20)
    assert len(set(ports)) == 20
    if ephemeral_start() > LOWEST_PICKED_PORT:
        assert all(LOWEST_PICKED_PORT <= port < ephemeral_start() for port in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_an_unreadable_range_falls_back_to_linuxs_default(tmp_path) -> None:
    assert ephemeral_start(str(tmp_path / "missing")) == 32768
    (tmp_path / "bad").write_text("not numbers")
    assert ephemeral_start(str(tmp_path / "bad")) == 32768


def test_only_the_listening_sockets_of_the_process_itself_count() -> None:
    """The embedded broker is ready when it owns its port (this machine, CI: Linux)."""
    with socket.socket() as listening, socket.socket() as bound_only:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        bound_only.bind(("127.0.0.1", 0))
        port = listening.getsockname()[1]
        ours = listening_ports(os.getpid())
        theirs = listening_ports(os.getppid())
        assert ours is not None and theirs is not None
        assert port in ours and bound_only.getsockname()[1] not in ours
        assert port not in theirs  # another process: the same machine's table, not its files
    assert port not in (listening_ports(os.getpid()) or set())
