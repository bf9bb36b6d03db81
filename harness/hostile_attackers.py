"""The attacks of issue 33, run together from a process of their own against one gateway.

`python -m harness.hostile_attackers '<json plan>'` builds every request first, prints
`ready`, runs each attack in its own threads for `seconds`, closes everything and prints one
JSON line of what happened (connections opened, closed by the gateway, answers read). A
process of its own, so that the attackers compete with the well-behaved clients for the
machine's cores as a real attacker on the host would, not for the test process's GIL.

Each attack comes from a loopback address of its own (127.0.0.2, ...): the gateway's
per-address limits then apply to the attacker, not to the well-behaved clients on 127.0.0.1.

- `never_read`: connections with a small receive window that pipeline requests (many
  ApiVersions, Fetches of 4 MiB from a topic of their own, a 1 MB Produce refused) and never
  read the answers (issue 33's "budgets that never come back"); reopened when closed.
- `slow_frames`: a frame's size prefix and header, then a byte now and then (before login
  with SASL on: "lockout before login"; without SASL: a slow big frame); reopened.
- `huge_metadata`: a Metadata naming 99,999 topics, again as soon as it is answered
  ("one request freezes the event loop").
- `tls_flood`: silent sockets on the TLS listeners, twice the per-address limit, reopened
  as the gateway closes them ("limits at accept").
- `amqp_slow_frame`: an AMQP connection (guest, logged in) that begins a 100 KiB frame and
  then sends a byte now and then ("timeouts on half-sent frames"); reopened.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from harness.raw_amqp_socket import open_connection
from harness.raw_kafka_socket import recv_frame
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.kafka_codec.record_batch import encode_batch

TCP_ESTABLISHED = 1
SINK = "hostile-sink"  # the never-reading connections' own topic, filled before
NO_TOPIC = "not a topic!"  # an invalid name: a Produce to it is answered without storing
RECEIVE_WINDOW = 4096  # what a never-reading connection's kernel takes before it pushes back
HUGE_TOPICS = 99_999


def metadata(names: int, prefix: str) -> bytes:
    body = {"topics": [{"name": f"{prefix}{i}"} for i in range(names)]}
    body["allow_auto_topic_creation"] = False  # type: ignore[assignment]
    return protocol.encode_request(ApiKey.METADATA, 9, 1, "hostile", body)


def produce(topic: str, size: int) -> bytes:
    records = encode_batch(0, [(0, 1000, None, b"x" * size, [])])
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    return protocol.encode_request(ApiKey.PRODUCE, 9, 1, "hostile", body)


def fetch(topic: str) -> bytes:
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 4 << 20}
    body = {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 4 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "topics": [{"topic": topic, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return protocol.encode_request(ApiKey.FETCH, 12, 1, "hostile", body)


class Attacks:
    """Every attack of the plan, its threads and its counts."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.stop = threading.Event()
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        versions = protocol.encode_request(ApiKey.API_VERSIONS, 0, 1, "hostile", {})
        mix = plan.get("never_read_mix", {"api_versions": 100, "produce": 1, "fetch": 4})
        self.never_read_burst = (
            versions * mix["api_versions"]
            + produce(NO_TOPIC, 1_000_000) * mix["produce"]  # refused, once read whole
            + fetch(SINK) * mix["fetch"]
        )
        self.huge = metadata(HUGE_TOPICS, "t")

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n

    def connect(
        self, port: int, source: str, authenticate: bool, receive_window: int = 0
    ) -> socket.socket:
        sock = socket.socket()
        if receive_window:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_window)
        sock.settimeout(10)
        try:
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        with self.lock:
            self.sockets.append(sock)
        if authenticate and self.plan.get("user"):
            log_in(sock, self.plan["user"], self.plan["password"])
        return sock

    def forget(self, sock: socket.socket) -> None:
        with self.lock:
            if sock in self.sockets:
                self.sockets.remove(sock)
        sock.close()

    # --- the attacks ---------------------------------------------------------------------

    def never_read(self, source: str) -> None:
        while not self.stop.is_set():
            try:
                sock = self.connect(
                    self.plan["kafka_port"],
                    source,
                    authenticate=True,
                    receive_window=RECEIVE_WINDOW,
                )
            except OSError:
                self.count("never_read_refused")
                self.stop.wait(0.05)
                continue
            self.count("never_read_opened")
            sock.settimeout(0.2)
            try:
                while not self.stop.is_set():
                    sock.sendall(self.never_read_burst)
                    self.count("never_read_bursts")
            except TimeoutError:
                pass  # the gateway stopped reading us: hold on without reading anything
            except OSError:
                pass
            # after the attack too, for a while: the gateway stops a connection once its
            # answers have filled the socket and then gone unread for frame_timeout_seconds
            # (once the attack is over, stop.wait returns at once: a plain sleep then, or
            # ten threads spinning on getsockopt took the gateway's cores for seconds and
            # every well-behaved client stalled 1-3 s "just after the attack")
            linger_until = float("inf")
            while _established(sock) and time.monotonic() < linger_until:
                if not self.stop.wait(0.05):
                    continue
                if linger_until == float("inf"):
                    linger_until = time.monotonic() + self.plan["never_read_linger_seconds"]
                time.sleep(0.05)
            if not _established(sock):
                self.count("never_read_closed_by_gateway")
            self.forget(sock)

    def slow_frame(self, source: str) -> None:
        claim = struct.pack(">ihhi", self.plan["slow_frame_bytes"], ApiKey.API_VERSIONS, 0, 7)

        def opened() -> socket.socket:
            sock = self.connect(self.plan["kafka_port"], source, authenticate=False)
            sock.sendall(claim)
            return sock

        self._trickle("slow", opened)

    def amqp_slow_frame(self, source: str) -> None:
        claim = struct.pack(">BHI", 1, 0, 100 * 1024)  # a method frame's header, 100 KiB

        def opened() -> socket.socket:
            sock = open_connection(self.plan["amqp_port"], source=source)
            sock.sendall(claim)
            with self.lock:
                self.sockets.append(sock)
            return sock

        self._trickle("amqp_slow", opened)

    def _trickle(self, label: str, opened: Callable[[], socket.socket]) -> None:
        """Open a connection that has begun a frame (`opened`), then send it a byte every
        0.25 s until the gateway closes it; again until the attack ends."""
        while not self.stop.is_set():
            try:
                sock = opened()
            except (OSError, AssertionError):
                self.count(f"{label}_refused")
                self.stop.wait(0.05)
                continue
            self.count(f"{label}_opened")
            try:
                while not self.stop.wait(0.25) and _established(sock):
                    sock.sendall(b"\x00")
            except OSError:
                pass
            if not self.stop.is_set():
                self.count(f"{label}_closed_by_gateway")
            self.forget(sock)

    def huge_metadata(self, source: str) -> None:
        sock = self.connect(self.plan["kafka_port"], source, authenticate=True)
        sock.settimeout(60)
        while not self.stop.is_set():
            sock.sendall(self.huge)
            self.count("huge_metadata_sent")
            recv_frame(sock)
            self.count("huge_metadata_answered")
        self.forget(sock)

    def tls_flood(self, port: int, source: str) -> None:
        held: list[socket.socket] = []
        while not self.stop.is_set():
            for sock in [s for s in held if not _established(s)]:
                held.remove(sock)
                self.forget(sock)
                self.count("tls_closed_by_gateway")
            while len(held) < self.plan["tls_flood_sockets"] and not self.stop.is_set():
                try:
                    held.append(self.connect(port, source, authenticate=False))
                    self.count("tls_opened")
                except OSError:
                    self.count("tls_refused")
                    break
            self.stop.wait(0.05)

    def fill_sink(self) -> None:
        """Four records of 1 MB in the never-reading connections' topic (with SASL their
        user may not write: their Fetches are refused, small)."""
        if self.plan.get("user"):
            return
        sock = self.connect(self.plan["kafka_port"], "127.0.0.2", authenticate=False)
        sock.settimeout(30)
        for _ in range(4):
            sock.sendall(produce(SINK, 1_000_000))
            answer = protocol.decode_response(ApiKey.PRODUCE, 9, memoryview(recv_frame(sock)))
            error = answer["responses"][0]["partition_responses"][0]["error_code"]
            assert error == 0, answer
        self.forget(sock)

    def run(self) -> dict[str, Any]:
        plan = self.plan
        self.fill_sink()
        jobs: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        jobs += [(self.never_read, ("127.0.0.2",))] * plan["never_read_connections"]
        jobs += [(self.slow_frame, ("127.0.0.4",))] * plan["slow_frame_connections"]
        jobs += [(self.huge_metadata, ("127.0.0.5",))] * plan["huge_metadata_connections"]
        jobs += [(self.tls_flood, (port, "127.0.0.3")) for port in plan["tls_ports"]]
        jobs += [(self.amqp_slow_frame, ("127.0.0.6",))] * plan.get(
            "amqp_slow_frame_connections", 0
        )
        errors: list[str] = []

        def guarded(job: Callable[..., None], args: tuple[Any, ...]) -> None:
            try:
                job(*args)
            except Exception as exc:  # reported, not raised: the other attacks go on
                if not self.stop.is_set():
                    errors.append(f"{job.__name__}: {exc!r}")

        threads = [threading.Thread(target=guarded, args=job, daemon=True) for job in jobs]
        print("ready", flush=True)
        started = time.monotonic()
        for thread in threads:
            thread.start()
        self.stop.wait(plan["seconds"])
        self.stop.set()
        for thread in threads[: plan["never_read_connections"]]:
            thread.join(plan["never_read_linger_seconds"] + 10)
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked on it
                sock.close()
        for thread in threads:
            thread.join(10)
        return {"seconds": time.monotonic() - started, "errors": errors, **self.counts}


def _established(sock: socket.socket) -> bool:
    """Whether the gateway has not closed the connection, without reading from it."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)
    except OSError:
        return False
    return info[0] == TCP_ESTABLISHED


def _call(sock: socket.socket, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    sock.sendall(protocol.encode_request(api, version, 1, "hostile", body))
    return protocol.decode_response(api, version, memoryview(recv_frame(sock)))


def log_in(sock: socket.socket, user: str, password: str) -> None:
    """SASL PLAIN: the attacker is a user with no rights at all."""
    shake = _call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert shake["error_code"] == 0, shake
    token = f"\x00{user}\x00{password}".encode()
    answer = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
    assert answer["error_code"] == 0, answer


if __name__ == "__main__":
    result = Attacks(json.loads(sys.argv[1])).run()
    print(json.dumps(result), flush=True)
