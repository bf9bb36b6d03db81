"""Victim clients: real clients whose sockets the soak shuts down mid-stream.

They run in a process of their own (`python -m bench.soak_victims`), so that "every socket
of this process to the Kafka port" names exactly the victims' connections: librdkafka does
not hand out its sockets, but /proc does. The soak sends `cut kafka`, `cut amqp` and `stop`
on stdin; the process answers with one JSON line per command, and `stop` answers with
everything it acknowledged, so the soak verifies the victims' records too: an idempotent
producer whose connection is cut must still have each record stored exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import pika
import pika.exceptions

from bench.soak_common import ClientRecord, QueueLedger, Timeline, kafka_value
from bench.soak_kafka import GroupLedger, KafkaGroupMember, KafkaProducerLoad


def sockets_to(port: int) -> list[int]:
    """This process's file descriptors of established TCP connections to `port`."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            found.append(int(fd))
    return found


def cut(port: int) -> int:
    """shutdown(2) every connection to `port` under its client's feet: the client sees its
    connection die (mid-frame when it was writing) and the gateway sees it end."""
    count = 0
    for fd in sockets_to(port):
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
            count += 1
        except OSError:
            pass
    return count


class VictimPublisher(threading.Thread):
    """A pika publisher with confirms, reconnecting after each cut; the message unconfirmed
    when its connection died is in doubt, and is not republished."""

    def __init__(self, url: str, queue: str, rate: float, timeline: Timeline) -> None:
        super().__init__(name="victim-amqp", daemon=True)
        self.params = pika.URLParameters(url)
        self.queue = queue
        self.rate = rate
        self.timeline = timeline
        self.record = ClientRecord("victim-amqp-pub", "amqp", "publisher", healthy=False)
        self.ledger = QueueLedger(queue, self.record.name)
        self.stopping = threading.Event()

    def run(self) -> None:
        seq = 0
        while not self.stopping.is_set():
            in_flight: int | None = None
            try:
                connection = pika.BlockingConnection(self.params)
                channel = connection.channel()
                channel.confirm_delivery()
                next_at = time.monotonic()
                while not self.stopping.is_set():
                    next_at += 1 / self.rate
                    connection.sleep(max(0.0, next_at - time.monotonic()))
                    in_flight = seq
                    self.ledger.published += 1
                    self.record.produced += 1
                    try:
                        channel.basic_publish(
                            "",
                            self.queue,
                            kafka_value(self.record.name, self.queue, seq),
                            pika.BasicProperties(delivery_mode=2),
                            mandatory=True,
                        )
                    except (pika.exceptions.NackError, pika.exceptions.UnroutableError):
                        self.ledger.nacked[seq] = self.timeline.now()
                    else:
                        self.ledger.confirmed[seq] = self.timeline.now()
                        self.record.ack_times.append(self.timeline.now())
                    in_flight = None
                    seq += 1
                connection.close()
            except Exception as error:  # noqa: BLE001 - the cut: expected, counted
                now = self.timeline.now()
                if in_flight is not None:
                    self.ledger.in_doubt[in_flight] = now
                    seq += 1
                self.record.drop(now, f"{type(error).__name__}: {error}")
                time.sleep(0.5)


def run(args: argparse.Namespace) -> None:
    timeline = Timeline()
    timeline.t0 = args.t0
    log_path = Path(args.log)
    producer = KafkaProducerLoad(
        "victim-kafka-idem",
        args.bootstrap,
        [args.topic],
        8,
        args.kafka_rate,
        True,
        timeline,
        log_path,
    )
    producer.record.healthy = False
    group = GroupLedger("soak-victim-group")
    consumer = KafkaGroupMember(
        "victim-kafka-con", args.bootstrap, [args.topic], group, timeline, log_path
    )
    consumer.record.healthy = False
    publisher = VictimPublisher(args.amqp_url, args.queue, args.amqp_rate, timeline)
    for thread in (producer, consumer, publisher):
        thread.start()
    say({"ev": "ready"})
    for line in sys.stdin:
        command = line.split()
        if command[:1] == ["cut"]:
            port = args.kafka_port if command[1] == "kafka" else args.amqp_port
            say({"ev": "cut", "target": command[1], "sockets": cut(port)})
        elif command[:1] == ["stop"]:
            break
    producer.stopping.set()
    publisher.stopping.set()
    producer.join(180)
    publisher.join(60)
    consumer.stopping.set()
    consumer.join(30)
    records = [producer.record, consumer.record, publisher.record]
    say(
        {
            "ev": "result",
            "acks": [asdict(a) for a in producer.acks],
            "failures": [asdict(f) for f in producer.failures],
            "ledger": asdict(publisher.ledger),
            "records": [asdict(r) for r in records],
            "consumed": sum(group.seen.values()),
        }
    )


def say(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class VictimProcess:
    """The soak's handle on the victims' process."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.soak_victims", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.arrived:
                self.events.append(event)
                self.arrived.notify_all()
        with self.arrived:
            self.events.append({"ev": "exit"})
            self.arrived.notify_all()

    def wait_for(self, kind: str, timeout: float) -> dict[str, Any] | None:
        """The next event of `kind` after those already taken; None after `timeout`."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while True:
                for index, event in enumerate(self.events):
                    if event["ev"] in (kind, "exit"):
                        del self.events[: index + 1]
                        return event if event["ev"] == kind else None
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.arrived.wait(left)

    def command(self, line: str, answer: str, timeout: float) -> dict[str, Any] | None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            return None
        return self.wait_for(answer, timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("bootstrap", "amqp-url", "topic", "queue", "log"):
        parser.add_argument(f"--{name}", required=True)
    for name in ("kafka-port", "amqp-port"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--kafka-rate", type=float, default=40)
    parser.add_argument("--amqp-rate", type=float, default=20)
    parser.add_argument("--t0", type=float, required=True)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
