"""A TLS listener that applies its connection limits before the TLS handshake.

`asyncio.start_server(ssl=...)` hands a connection to the listener only after its
handshake, so the per-address and total limits counted it only then: 3,000 silent sockets
from one address were held (limit 1,000), each waiting out its handshake, and floods used
up the process's descriptors (issue 33). Upgrading a plain stream afterwards
(`StreamWriter.start_tls`) races with the loop's first read of the ClientHello (uvloop
starts reading as soon as the connection is made). So a TLS listener here accepts the
sockets itself: `admit` decides on the raw socket (and closes it when refused, at no
handshake's cost), and only an admitted socket gets its TLS transport, built straight on
it (`loop.connect_accepted_socket`), within `handshake_seconds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from pulsar_gateway.gateway import metrics

# errors of accept() that mean "out of descriptors or memory": wait a little, as asyncio's
# own accept loop does, instead of spinning
_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

# What a listener decides on an accepted socket: something to hand to `serve` (e.g. the
# peer's address counted in its limits), or None when it refused (and closed) the socket.
Admit = Callable[[socket.socket, Any], Any]
Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Any], Awaitable[None]]
Release = Callable[[Any], None]


class TlsListener:
    """Listening sockets on ``host``:``port``, each with an accept loop (`open`)."""

    def __init__(
        self,
        protocol: str,
        tls: ssl.SSLContext,
        handshake_seconds: float,
        admit: Admit,
        serve: Serve,
        release: Release,
        limit: int,
        make_reader: Callable[[int], asyncio.StreamReader] | None = None,
    ) -> None:
        self.protocol = protocol
        self.tls = tls
        self.handshake_seconds = handshake_seconds
        self.admit = admit
        self.serve = serve
        self.release = release  # what `admit` counted, for a handshake that failed
        self.limit = limit
        # the connection's StreamReader, given its limit (None: asyncio's own)
        self.make_reader = make_reader
        self.sockets: list[socket.socket] = []
        self.log = logging.getLogger(f"gateway.{protocol}")
        # accept loops and handshakes under way (a served connection is its server's own)
        self._tasks: set[asyncio.Task[None]] = set()

    async def open(
        self, host: str, port: int, backlog: int = 1024, reuse_port: bool = False
    ) -> None:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(
            (info[0], info[1], info[2], info[3], info[4]) for info in infos
        ):
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(backlog)
                sock.setblocking(False)
            except OSError:
                sock.close()
                self.close()
                raise
            self.sockets.append(sock)
            self._spawn(self._accept_loop(sock))

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(listening)
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRORS:
                    raise
                self.log.warning("%s TLS listener cannot accept: %s", self.protocol, exc)
                await asyncio.sleep(0.5)
                continue
            conn.setblocking(False)
            admitted = self.admit(conn, peer)
            if admitted is not None:
                self._spawn(self._handshake(conn, peer, admitted))

    async def _handshake(self, conn: socket.socket, peer: Any, admitted: Any) -> None:
        """The TLS handshake, then `serve`, in this task (no longer counted as ours)."""
        loop = asyncio.get_running_loop()
        if self.make_reader is None:
            reader = asyncio.StreamReader(limit=self.limit)
        else:
            reader = self.make_reader(self.limit)
        stream = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: stream, conn, ssl=self.tls, ssl_handshake_timeout=self.handshake_seconds
            )
        except (ssl.SSLError, OSError, TimeoutError) as exc:
            metrics.BAD_INPUT.labels(self.protocol, "tls_handshake").inc()
            self.log.debug("TLS handshake from %s failed: %s", peer, exc)
            with contextlib.suppress(OSError):
                conn.close()
            self.release(admitted)
            return
        except BaseException:
            conn.close()
            self.release(admitted)
            raise
        writer = asyncio.StreamWriter(transport, stream, reader, loop)
        current = asyncio.current_task()
        if current is not None:
            self._tasks.discard(current)  # the server stops it with its connections
        await self.serve(reader, writer, admitted)
