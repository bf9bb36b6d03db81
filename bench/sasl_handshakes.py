"""Kafka SASL authentication rate: SCRAM, PLAIN and OAUTHBEARER handshakes per second.

Two numbers: the gateway's own CPU per exchange (the SaslSession code, in process: what
one core could sustain), and complete authentications per second against a real gateway
process over plaintext TCP (connect, ApiVersions-free SaslHandshake v1, SaslAuthenticate
v2 until done, close), from `--clients` threads. The client's own PBKDF2 (4096 rounds) runs
in the bench process (hashlib's, patched into scramp's client: its pure-Python loop took
26 ms and measured only the client), so with 2 cores the end-to-end number is bounded by
both sides. OAUTHBEARER presents one RS256 JWT made up front (the client does no work),
so its rate is the gateway's own (a signature check per login); ratios are printed against
SCRAM-SHA-256 from the same run, and JSON plus an HTML report go to `--out`.

    .venv/bin/python -m bench.sasl_handshakes --seconds 5 --clients 2
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import jwt
import scramp
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.report import bar_chart, write_report
from harness.gateway_process import REPO, GatewayProcess
from harness.raw_kafka_socket import recv_frame
from pulsar_gateway.handlers.kafka.sasl import SaslSession
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security.credentials import make_record
from pulsar_gateway.security.oauthbearer import TokenValidator, load_validator

USER, PASSWORD = "bench", "bench-password"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
BEARER = (
    "n,,\x01auth=Bearer "
    + jwt.encode({"sub": USER, "exp": int(time.time()) + 7200}, KEY, algorithm="RS256")
    + "\x01\x01"
).encode()


def _public_key_file(where: Path) -> Path:
    path = where / "bench-public.pem"
    path.write_bytes(
        KEY.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


def _fast_hi(hf: object, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hf().name, password, salt, iterations)  # type: ignore[operator]


class _One:
    def __init__(self) -> None:
        self.record = make_record(PASSWORD)

    def lookup(self, name: str) -> dict | None:
        return self.record if name == USER else None


def server_cpu(mechanism: str, rounds: int, tokens: TokenValidator) -> float:
    """Seconds of gateway-side work per authentication (client work excluded)."""
    users = _One()
    spent = 0.0
    for _ in range(rounds):
        client = scramp.ScramClient([mechanism], USER, PASSWORD) if "SCRAM" in mechanism else None
        session = SaslSession([mechanism], users, None, tokens=tokens)
        started = time.perf_counter()
        session.handshake({"mechanism": mechanism})
        if mechanism == "OAUTHBEARER":
            answer = session.authenticate({"auth_bytes": BEARER})
            spent += time.perf_counter() - started
            assert session.authenticated == USER, answer
            continue
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
        if mechanism == "OAUTHBEARER":
            answer = call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": BEARER})
            assert answer["error_code"] == 0 and not answer["auth_bytes"], answer
            return
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
    parser.add_argument("--out", type=Path, default=Path("reports/sasl-handshakes"))
    args = parser.parse_args()
    scramp.core.hi = _fast_hi  # the client's side only: the gateway never calls hi
    mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"]
    results: dict = {"environment": {"cpus": os.cpu_count(), "clients": args.clients,
                                     "seconds": args.seconds}, "mechanisms": {}}  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        key_file = _public_key_file(Path(scratch))
        tokens = load_validator(str(key_file), "", ["RS256"])
        for mechanism in mechanisms:
            cost = server_cpu(mechanism, 300, tokens)
            results["mechanisms"][mechanism] = {"gateway_cpu_us": cost * 1e6}
            print(f"{mechanism}: gateway CPU {cost * 1e6:.0f} us per authentication "
                  f"(~{1 / cost:.0f}/s per core)")  # fmt: skip
        extra = ["--set", "kafka.sasl_mechanisms=" + ",".join(mechanisms)]
        extra += ["--set", f"kafka.oauthbearer_key_file={key_file}"]
        extra += ["--set", "kafka.oauthbearer_algorithms=RS256"]
        gateway = GatewayProcess(Path(scratch) / "gw", extra=extra).start()
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
                results["mechanisms"][mechanism]["end_to_end_per_s"] = rate
                print(f"{mechanism}: {rate:.0f} authentications/s end to end "
                      f"({args.clients} client threads, plaintext TCP)")  # fmt: skip
        finally:
            gateway.stop()
    found = results["mechanisms"]
    peer = found["SCRAM-SHA-256"]
    rows = []
    for mechanism, numbers in found.items():
        numbers["cpu_vs_scram_sha_256"] = numbers["gateway_cpu_us"] / peer["gateway_cpu_us"]
        numbers["rate_vs_scram_sha_256"] = numbers["end_to_end_per_s"] / peer["end_to_end_per_s"]
        rows.append({
            "mechanism": mechanism,
            "gateway CPU us/login": f"{numbers['gateway_cpu_us']:.0f}",
            "x SCRAM-SHA-256 CPU": f"{numbers['cpu_vs_scram_sha_256']:.2f}",
            "logins/s end to end": f"{numbers['end_to_end_per_s']:.0f}",
            "x SCRAM-SHA-256 rate": f"{numbers['rate_vs_scram_sha_256']:.2f}",
        })  # fmt: skip
        print(f"{mechanism}: CPU x{numbers['cpu_vs_scram_sha_256']:.2f}, "
              f"rate x{numbers['rate_vs_scram_sha_256']:.2f} of SCRAM-SHA-256")  # fmt: skip
    charts = [
        bar_chart("Gateway CPU per authentication (us)",
                  [(m, n["gateway_cpu_us"]) for m, n in found.items()], "us"),
        bar_chart("Authentications per second, end to end",
                  [(m, n["end_to_end_per_s"]) for m, n in found.items()], "/s"),
    ]  # fmt: skip
    json_path, html_path = write_report(
        args.out, "Kafka SASL authentications", results, charts, rows
    )
    print(f"report: {json_path} and {html_path}")


if __name__ == "__main__":
    main()
