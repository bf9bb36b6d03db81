"""The README's migration commands, end to end, in a venv holding only `.[parity]`
(`make parity-smoke` builds one and runs this in it): an extra must work installed alone,
not only beside the test dependencies that `make test` installs.

Two gateways from this venv play the old Kafka cluster and the new gateway (the source can
be any Kafka-protocol cluster; a gateway needs nothing beyond this venv). The source gets a
topic of two partitions and a committed group, then `pulsar-gateway migrate` and
`pulsar-gateway parity` run as the README shows; parity must say PARITY and exit 0. Then a
record written only to the target must make parity exit 1 and name it. Exit 0 when all of
that held. Standalone on purpose: nothing of tests/ or harness/ is installed here.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from pulsar_gateway.gateway.loopback_ports import free_ports

BIN = Path(sys.executable).parent
TOPIC = "orders-smoke"
RECORDS = 600


class Gateway:
    def __init__(self, root: Path, name: str) -> None:
        self.kafka, self.amqp, self.http = free_ports(3)
        self.data = root / name
        self.log = (root / f"{name}.log").open("w")
        self.process = subprocess.Popen(
            [
                str(BIN / "pulsar-gateway"),
                "run",
                "--kafka-port",
                str(self.kafka),
                "--amqp-port",
                str(self.amqp),
                "--metrics-port",
                str(self.http),
                "--data-dir",
                str(self.data),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka}"

    @property
    def health(self) -> str:
        return f"http://127.0.0.1:{self.http}"

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"gateway {self.data.name} exited {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.health}/health", timeout=2) as answer:
                    if json.load(answer).get("ok"):
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"gateway {self.data.name} not ready in {timeout} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def fill(source: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": source})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": source, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(
            TOPIC, key=b"k%d" % (i % 7), value=b"v%d" % i, headers=[("h", b"x")], partition=i % 2
        )
    if producer.flush(60):
        raise SystemExit("the source did not take every record")
    consumer = Consumer({"bootstrap.servers": source, "group.id": "g-smoke"})
    done = [TopicPartition(TOPIC, 0, 100), TopicPartition(TOPIC, 1, 200)]
    consumer.commit(offsets=done, asynchronous=False)
    consumer.close()


def cli(*args: str) -> tuple[int, str]:
    """Exit status and all it wrote (rich writes its tables to stderr, so both)."""
    command = [str(BIN / "pulsar-gateway"), *args]
    print("$", " ".join(command), flush=True)
    result = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900
    )
    print(result.stdout[-4000:], flush=True)
    return result.returncode, " ".join(result.stdout.split())  # rich wraps long lines


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="parity-smoke-"))
    source, target = Gateway(root, "source"), Gateway(root, "target")
    try:
        source.wait_ready()
        target.wait_ready()
        fill(source.bootstrap)
        common = ["--source", source.bootstrap, "--target", target.bootstrap]
        common += ["--topic-regex", "orders-.*", "--gateway-health", target.health]
        code, said = cli("migrate", *common)
        if code != 0 or "group g-smoke" not in said:
            raise SystemExit(f"migrate exited {code}")
        report = ["--report", str(root / "reports" / "parity")]
        code, said = cli("parity", *common, *report)
        if code != 0 or "NO PARITY" in said or "PARITY in" not in said:
            raise SystemExit(f"parity of a faithful copy exited {code}")
        from confluent_kafka import Producer

        extra = Producer({"bootstrap.servers": target.bootstrap})
        extra.produce(TOPIC, value=b"only on the target", partition=0)
        extra.flush(30)
        del extra  # its connection goes before the gateways do
        code, said = cli("parity", *common, *report)
        # its sample, read back from the target with confluent-kafka (samples.py)
        if code != 1 or "NO PARITY in" not in said or "value=only on the target" not in said:
            raise SystemExit(f"parity of a damaged copy exited {code}")
        print("parity smoke: passed", flush=True)
        return 0
    finally:
        source.stop()
        target.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
