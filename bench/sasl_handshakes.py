"""Kafka SASL authentication rate: SCRAM (and PLAIN) handshakes per second.

Two numbers: the gateway's own CPU per exchange (the SaslSession code, in process: what
one core could sustain), and complete authentications per second against a real gateway
process over plaintext TCP (connect, ApiVersions-free SaslHandshake v1, SaslAuthenticate
v2 until done, close), from `--clients` threads. The client's own PBKDF2 (4096 rounds) runs
in the bench process (hashlib's, patched into scramp's client: its pure-Python loop took
26 ms and measured only the client), so with 2 cores the end-to-end number is bounded by
both sides.

    .venv/bin/python -m bench.sasl_handshakes --seconds 5 --clients 2
"""

from __future__ import annotations

import argparse
import hashlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import scramp

from pulsar_gateway.handlers.kafka.sasl import SaslSession
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security.credentials import make_record
from tests.support.gateway_process import REPO, GatewayProcess
from tests.support.raw_kafka_socket import recv_frame

USER, PASSWORD = "bench", "bench-password"


def _fast_hi(hf: object, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hf().name, password, salt, iterations)  # type: ignore[operator]


class _One:
    def __init__(self) -> None:
        self.record = make_record(PASSWORD)

    def lookup(self, name: str) -> dict | None:
        return self.record if name == USER else None


def server_cpu(mechanism: str, rounds: int) -> float:
    """Seconds of gateway-side work per authentication (client work excluded)."""
    users = _One()
    spent = 0.0
    for _ in range(rounds):
        client = scramp.ScramClient([mechanism], USER, PASSWORD) if "SCRAM" in mechanism else None
        session = SaslSession([mechanism], users, None)
        started = time.perf_counter()
        session.handshake({"mechanism": mechanism})
        if client is None:
            session.authenticate({"auth_bytes": f"\x00{USER}\x00{PASSWORD}".encode()})
            spent += time.perf_counter() - started
            continue
        first = session.authenticate({"auth_bytes": client.get_client_first().encode()})
        spent += time.perf_counter() - started
        client.set_server_first(first["auth_bytes"].decode())
        final_message = client.get_client_final().encode()
        started = time.perf_counter()
        final = session.authenticate({"auth_bytes": final_message})
        spent += time.perf_counter() - started
        assert session.authenticated == USER, final
    return spent / rounds


def authenticate(port: int, mechanism: str) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:

        def call(key: int, version: int, body: dict) -> dict:
            sock.sendall(protocol.encode_request(key, version, 1, "bench", body))
            return protocol.decode_response(key, version, recv_frame(sock))

        assert call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
        if mechanism == "PLAIN":
            token = f"\x00{USER}\x00{PASSWORD}".encode()
            assert call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})["error_code"] == 0
            return
        client = scramp.ScramClient([mechanism], USER, PASSWORD)
        first = call(
            ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_first().encode()}
        )
        client.set_server_first(first["auth_bytes"].decode())
        final = call(
            ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_final().encode()}
        )
        assert final["error_code"] == ErrorCode.NONE, final
        client.set_server_final(final["auth_bytes"].decode())


def end_to_end(port: int, mechanism: str, seconds: float, clients: int) -> float:
    counts = [0] * clients
    deadline = time.monotonic() + seconds

    def run(i: int) -> None:
        while time.monotonic() < deadline:
            authenticate(port, mechanism)
            counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    scramp.core.hi = _fast_hi  # the client's side only: the gateway never calls hi
    mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
    for mechanism in mechanisms:
        cost = server_cpu(mechanism, 300)
        print(f"{mechanism}: gateway CPU {cost * 1e6:.0f} us per authentication "
              f"(~{1 / cost:.0f}/s per core)")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        extra = ["--set", "kafka.sasl_mechanisms=" + ",".join(mechanisms)]
        gateway = GatewayProcess(Path(scratch), extra=extra).start()
        try:
            command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", USER]
            command += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
            subprocess.run(command, input=PASSWORD + "\n", text=True, check=True, cwd=REPO)
            deadline = time.monotonic() + 15
            while True:  # the running gateway picks the user up from Pulsar
                try:
                    authenticate(gateway.kafka_port, "PLAIN")
                    break
                except AssertionError:
                    if time.monotonic() > deadline:
                        raise
            for mechanism in mechanisms:
                rate = end_to_end(gateway.kafka_port, mechanism, args.seconds, args.clients)
                print(f"{mechanism}: {rate:.0f} authentications/s end to end "
                      f"({args.clients} client threads, plaintext TCP)")  # fmt: skip
        finally:
            gateway.stop()


if __name__ == "__main__":
    main()
