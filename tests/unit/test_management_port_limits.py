"""The management port holds up against hostile sockets as the client listeners do (issue
33, "limits at accept"; docs/security.md, "Threat model").

The port serves /health to orchestrators: once, any number of silent sockets could be held
on it (each for its 5 s head deadline, then again), a request's head could be as long as
asyncio's 64 KiB buffer before anything was answered, and a client that did not read an
answer held its connection for ever. Now: `metrics.max_connections_per_ip` (and in all
`metrics.max_connections`), a head of at most MAX_HEAD_BYTES (431 beyond), a head within
its deadline and an answer taken within ANSWER_SECONDS, or the connection is dropped.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from functools import partial
from pathlib import Path

from harness.certificates import make_certificates
from harness.waiting import async_wait_until
from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.tls_accept import TlsListener
from pulsar_gateway.security.tls import server_context

PER_IP = 4


async def _server() -> metrics.MetricsServer:
    server = metrics.MetricsServer(
        "127.0.0.1", 0, lambda: {"ok": True}, max_connections_per_ip=PER_IP
    )
    server.head_seconds = 0.5
    await server.start()
    return server


async def _get(port: int, path: str = "/health", head: bytes = b"") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode() + head + b"\r\n")
    try:
        async with asyncio.timeout(5):
            return await reader.read()
    finally:
        writer.close()


def _refused(setting: str) -> float:
    return metrics.CONNECTIONS_REFUSED.labels("http", setting)._value.get()


async def _closed_at_once(port: int, source: str) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    try:
        async with asyncio.timeout(0.4):  # under the head deadline: refused, not timed out
            return await reader.read() == b""
    except TimeoutError:
        return False
    finally:
        writer.close()


def test_one_address_holds_few_sockets_and_health_still_answers() -> None:
    async def scenario() -> None:
        server = await _server()
        try:
            before = _refused("max_connections_per_ip")
            held = [
                await asyncio.open_connection("127.0.0.1", server.port, local_addr=("127.0.0.2", 0))
                for _ in range(PER_IP)
            ]
            await async_wait_until(
                lambda: server._open.get("127.0.0.2") == PER_IP, 5, message="held sockets"
            )
            assert await _closed_at_once(server.port, "127.0.0.2"), "one socket too many stayed"
            assert _refused("max_connections_per_ip") == before + 1
            assert (await _get(server.port)).startswith(b"HTTP/1.1 200")
            for _, writer in held:
                writer.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_a_long_head_is_refused_and_a_half_sent_one_dropped() -> None:
    async def scenario() -> None:
        server = await _server()
        try:
            padding = b"X-Padding: " + b"p" * metrics.MAX_HEAD_BYTES + b"\r\n"
            answer = await _get(server.port, head=padding)
            assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: ")  # and nothing more
            async with asyncio.timeout(5):
                assert await reader.read() == b""  # dropped after the head deadline
            writer.close()
            assert not server._open, server._open
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_an_answer_left_unread_is_dropped(monkeypatch) -> None:
    monkeypatch.setattr(metrics, "ANSWER_SECONDS", 0.5)

    async def scenario() -> None:
        server = metrics.MetricsServer(
            "127.0.0.1", 0, lambda: {"ok": True, "padding": "p" * (16 << 20)}
        )
        await server.start()
        try:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # and read nothing
            await async_wait_until(lambda: server._open, 5, message="the connection taken")
            await async_wait_until(lambda: not server._open, 10, message="the reader dropped")
            sock.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_https_when_the_port_has_a_certificate(tmp_path: Path) -> None:
    """metrics.tls_cert_file/tls_key_file: HTTPS only (Basic credentials no longer cross
    the network in clear); a handshake that never comes is dropped at the head deadline."""
    files = make_certificates(tmp_path)
    tls = server_context("metrics", str(files["cert"]), str(files["key"]))

    async def scenario() -> None:
        server = metrics.MetricsServer(
            "127.0.0.1", 0, lambda: {"ok": True}, tls=partial(TlsListener, "http", tls)
        )
        server.head_seconds = 0.5
        await server.start()
        try:
            client = ssl.create_default_context(cafile=str(files["ca"]))
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=client, server_hostname="localhost"
            )
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            async with asyncio.timeout(5):
                assert (await reader.read()).startswith(b"HTTP/1.1 200")
            writer.close()
            plain = await _get(server.port)  # plain HTTP: no answer, the socket closed
            assert not plain.startswith(b"HTTP/1.1 200"), plain[:40]
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            async with asyncio.timeout(5):
                assert await reader.read() == b""  # no ClientHello: dropped at the deadline
            writer.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_https_limits_hold_before_and_after_the_handshake(tmp_path: Path) -> None:
    """With TLS, a socket is counted at accept: silent sockets (no ClientHello) beyond
    `max_connections_per_ip` are closed at once instead of each waiting out its handshake
    (asyncio's own TLS server counted a connection only after it), and one that completes
    its handshake and then holds the socket, or trickles its head, still counts and is
    dropped at the head deadline."""
    files = make_certificates(tmp_path)
    tls = server_context("metrics", str(files["cert"]), str(files["key"]))
    client = ssl.create_default_context(cafile=str(files["ca"]))

    async def tls_open(source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            "127.0.0.1",
            server.port,
            ssl=client,
            server_hostname="localhost",
            local_addr=(source, 0),
        )

    server = metrics.MetricsServer(
        "127.0.0.1",
        0,
        lambda: {"ok": True},
        max_connections_per_ip=PER_IP,
        tls=partial(TlsListener, "http", tls),
    )

    async def scenario() -> None:
        server.head_seconds = 1.0
        await server.start()
        try:
            before = _refused("max_connections_per_ip")
            silent = [
                await asyncio.open_connection("127.0.0.1", server.port, local_addr=("127.0.0.3", 0))
                for _ in range(PER_IP)
            ]
            await async_wait_until(
                lambda: server._open.get("127.0.0.3") == PER_IP, 5, message="silent sockets"
            )
            assert await _closed_at_once(server.port, "127.0.0.3"), "a silent socket too many"
            assert _refused("max_connections_per_ip") == before + 1
            for _, writer in silent:
                writer.close()
            await async_wait_until(lambda: not server._open, 5, message="the silent ones gone")

            # handshakes done, then nothing, or a head a byte at a time: counted, dropped
            started = asyncio.get_running_loop().time()
            holders = [await tls_open("127.0.0.4") for _ in range(PER_IP - 1)]
            trickler = await tls_open("127.0.0.4")
            assert server._open.get("127.0.0.4") == PER_IP
            assert await _closed_at_once(server.port, "127.0.0.4"), "one past the limit stayed"
            head = b"GET /health HTTP/1.1\r\nHost: x\r\n"
            reader, writer = trickler
            closed = False
            for byte in head:
                writer.write(bytes([byte]))
                try:
                    async with asyncio.timeout(0.1):
                        closed = await reader.read() == b""
                except TimeoutError:
                    continue
                except ConnectionError:
                    closed = True
                break
            for reader, _ in holders:
                async with asyncio.timeout(5):
                    assert await reader.read() == b""  # dropped at the head deadline
            took = asyncio.get_running_loop().time() - started
            assert closed and took < 4, f"held {took:.1f} s (head deadline 1 s)"
            await async_wait_until(lambda: not server._open, 5, message="all released")
            for _, writer in [*holders, trickler]:
                writer.close()
            answer = await tls_open("127.0.0.4")
            answer[1].write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            async with asyncio.timeout(5):
                assert (await answer[0].read()).startswith(b"HTTP/1.1 200")
            answer[1].close()
        finally:
            await server.stop()

    asyncio.run(scenario())
