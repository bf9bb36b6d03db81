"""The throughput cost of TLS and of SASL beside plaintext, in one run (issue 13).

Two gateways, each with a TLS listener beside its plaintext one (kafka.tls_port): the
first without SASL (PLAINTEXT and SSL), the second with SCRAM-SHA-256 required
(SASL_PLAINTEXT and SASL_SSL). confluent-kafka produces then fetches the same records
through each; SASL costs once per connection, TLS on every byte.

    .venv/bin/python -m bench.security_overhead [--records 100000] [--size 100]
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.sasl_handshakes import authenticate
from harness.certificates import make_certificates
from harness.gateway_process import REPO, GatewayProcess, free_port
from harness.waiting import wait_until

USER, PASSWORD = "bench", "bench-password"


def _logs_in(port: int) -> bool:
    """Whether the gateway has picked the user up from the users topic yet."""
    try:
        authenticate(port, "SCRAM-SHA-256")
    except AssertionError:
        return False
    return True


def produce(config: dict[str, Any], topic: str, records: int, size: int) -> float:
    producer = Producer({**config, "acks": "all", "linger.ms": 5, "batch.num.messages": 10000})
    payload = b"x" * size
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    return time.perf_counter() - start


def fetch(config: dict[str, Any], topic: str, records: int) -> float:
    consumer = Consumer(
        {**config, "group.id": f"b-{uuid.uuid4().hex[:6]}", "fetch.max.bytes": 52428800}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    count, start = 0, time.perf_counter()
    while count < records and time.perf_counter() - start < 300:
        count += sum(1 for m in consumer.consume(10000, 1) if not m.error())
    elapsed = time.perf_counter() - start
    consumer.close()
    if count < records:
        raise RuntimeError(f"fetched only {count} of {records}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as scratch:
        certs = make_certificates(Path(scratch))
        for sasl in (False, True):
            tls_port = free_port()
            extra = ["--set", f"kafka.tls_cert_file={certs['cert']}"]
            extra += [
                "--set",
                f"kafka.tls_key_file={certs['key']}",
                "--set",
                f"kafka.tls_port={tls_port}",
            ]
            if sasl:
                extra += ["--set", "kafka.sasl_mechanisms=SCRAM-SHA-256"]
                extra += ["--set", f"authorization.superusers={USER}"]
            gateway = GatewayProcess(Path(scratch) / f"gw-{sasl}", extra=extra).start()
            try:
                auth: dict[str, Any] = {}
                if sasl:
                    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", USER]
                    command += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
                    subprocess.run(command, input=PASSWORD + "\n", text=True, check=True, cwd=REPO)
                    wait_until(functools.partial(_logs_in, gateway.kafka_port), timeout=15)
                    auth = {"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": USER,
                            "sasl.password": PASSWORD}  # fmt: skip
                tls = {"security.protocol": "SASL_SSL" if sasl else "SSL",
                       "ssl.ca.location": str(certs["ca"]),
                       "bootstrap.servers": f"127.0.0.1:{tls_port}"}  # fmt: skip
                plain = {"security.protocol": "SASL_PLAINTEXT" if sasl else "PLAINTEXT",
                         "bootstrap.servers": gateway.bootstrap}  # fmt: skip
                for config in (plain, tls):
                    name = config["security.protocol"]
                    topic = f"sec-{name.lower()}-{uuid.uuid4().hex[:6]}"
                    wrote = produce({**config, **auth}, topic, args.records, args.size)
                    read = fetch({**config, **auth}, topic, args.records)
                    rows.append((name, args.records / wrote, args.records / read))
                    _, wrote_rate, read_rate = rows[-1]
                    print(
                        f"{name:15} produce {wrote_rate:9.0f} rec/s   fetch {read_rate:9.0f} rec/s"
                    )
            finally:
                gateway.stop()
    base = rows[0]
    for name, wrote, read in rows[1:]:
        print(
            f"{name:15} vs PLAINTEXT: produce {wrote / base[1]:.2f}x, fetch {read / base[2]:.2f}x"
        )


if __name__ == "__main__":
    main()
