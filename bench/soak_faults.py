"""The soak's faults: injected one at a time, at seeded random intervals, each recorded with
what the gateway did about it (restarted in 3 s, answered CORRUPT_MESSAGE, closed the
socket...), so a failure at the end can be read against the fault that preceded it.

Every hostile input is small and bounded (a few hundred bytes, a few hundred sockets, a
few seconds), and only the embedded broker this soak's gateway started is ever signalled.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from confluent_kafka import KafkaError
from pamqp import body as amqp_body
from pamqp import commands
from pamqp import frame as amqp_frame
from pamqp import header as amqp_header

from bench.soak_common import Fault, Timeline, kafka_value
from bench.soak_victims import VictimProcess
from harness import kafka_wire
from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.record_batch import encode_batch

KINDS = (
    "broker_kill",
    "broker_stop",
    "half_frame_kafka",
    "half_frame_amqp",
    "client_cut",
    "kafka_size_bomb",
    "garbage_produce",
    "amqp_bad_frame",
    "idle_flood",
)
# broker faults are the rarest: each takes the backend away for seconds
WEIGHTS = (1, 1, 2, 2, 2, 1, 1, 1, 1)
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
PRODUCE = kafka_wire.PRODUCE


def probe_health(port: int) -> str:
    """`ok`, `503` or `no answer` (the gateway's loop blocked, or the process gone)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return "ok" if json.loads(response.read()).get("ok") else "not ok"
    except urllib.error.HTTPError as error:
        return str(error.code)
    except (OSError, ValueError):
        return "no answer"


def closed_within(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the peer closed `sock` (reading and dropping what it sends), or None."""
    started = time.monotonic()
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            if time.monotonic() - started > timeout:
                return None
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return None
    return time.monotonic() - started


class RawAmqp:
    """Just enough AMQP to open a connection and a channel, then misbehave."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""

    def frame(self) -> object | None:
        while True:
            if len(self.buffer) >= 7:
                size = struct.unpack(">I", self.buffer[3:7])[0]
                if len(self.buffer) >= size + 8:
                    consumed, _, value = amqp_frame.unmarshal(self.buffer)
                    self.buffer = self.buffer[consumed:]
                    return value
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk

    def expect(self, kind: type) -> object:
        while True:
            value = self.frame()
            if value is None:
                raise ConnectionError(f"closed while waiting for {kind.__name__}")
            if isinstance(value, kind):
                return value

    def open(self) -> RawAmqp:
        self.sock.sendall(PROTOCOL_HEADER)
        self.expect(commands.Connection.Start)
        start_ok = commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"
        )
        self.sock.sendall(amqp_frame.marshal(start_ok, 0))
        tune = self.expect(commands.Connection.Tune)
        tune_ok = commands.Connection.TuneOk(
            channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
        )
        self.sock.sendall(amqp_frame.marshal(tune_ok, 0))
        self.sock.sendall(amqp_frame.marshal(commands.Connection.Open(virtual_host="/"), 0))
        self.expect(commands.Connection.OpenOk)
        self.sock.sendall(amqp_frame.marshal(commands.Channel.Open(), 1))
        self.expect(commands.Channel.OpenOk)
        return self

    def close(self) -> None:
        self.sock.close()


class FaultInjector(threading.Thread):
    """Runs faults one after another until `until` (timeline seconds) or `stop()`."""

    def __init__(
        self,
        gateway: GatewayProcess,
        timeline: Timeline,
        rng: random.Random,
        victims: VictimProcess,
        until: float,
        gaps: tuple[float, float],
        topic: str,
    ) -> None:
        super().__init__(name="faults", daemon=True)
        self.gateway = gateway
        self.timeline = timeline
        self.rng = rng
        self.victims = victims
        self.until = until
        self.gaps = gaps
        self.topic = topic
        self.stopping = threading.Event()
        self.frozen_pid: int | None = None  # for cleanup: never leave the broker stopped

    def stop(self, timeout: float = 60) -> None:
        self.stopping.set()
        self.join(timeout)
        self.thaw()

    def thaw(self) -> None:
        if self.frozen_pid is not None:
            try:
                os.kill(self.frozen_pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.frozen_pid = None

    def run(self) -> None:
        plan = list(KINDS)  # each kind once first (in a seeded order), then weighted draws
        self.rng.shuffle(plan)
        self.stopping.wait(5)
        while not self.stopping.is_set() and self.timeline.now() < self.until:
            if self.gateway.process is None or self.gateway.process.poll() is not None:
                return
            kind = plan.pop(0) if plan else self.rng.choices(KINDS, WEIGHTS)[0]
            fault = self.timeline.begin_fault(kind)
            injector: Callable[[Fault], str] = getattr(self, kind)
            try:
                fault.outcome = injector(fault)
            except Exception as error:  # noqa: BLE001 - recorded; the soak goes on
                fault.outcome = f"injector failed: {type(error).__name__}: {error}"
            if fault.end is None:
                fault.end = self.timeline.now()
            self.stopping.wait(self.rng.uniform(*self.gaps))

    # --- the embedded broker --------------------------------------------------------------

    def _broker_pid(self) -> int:
        return wait_until(self._pid_or_none, 30, 0.2, "the embedded broker's pid")

    def _pid_or_none(self) -> int | None:
        try:
            return self.gateway.broker_pid()
        except (IndexError, ValueError):
            return None

    def _healthy_after(self, timeout: float = 60) -> str:
        started = time.monotonic()
        try:
            wait_until(lambda: probe_health(self.gateway.metrics_port) == "ok", timeout, 0.2)
        except AssertionError:
            return f"NOT healthy within {timeout:g} s"
        return f"healthy after {time.monotonic() - started:.1f} s"

    def broker_kill(self, fault: Fault) -> str:
        pid = self._broker_pid()
        before = (self.gateway.health() or {}).get("broker_restarts", 0)
        fault.detail = f"SIGKILL pid {pid}"
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        try:
            wait_until(
                lambda: (self.gateway.health() or {}).get("broker_restarts", 0) > before,
                60,
                0.2,
            )
        except AssertionError:
            return "NOT restarted within 60 s"
        fault.end = self.timeline.now()
        restarted = time.monotonic() - started
        return f"restarted in {restarted:.1f} s, {self._healthy_after()}"

    def broker_stop(self, fault: Fault) -> str:
        pid = self._broker_pid()
        duration = self.rng.uniform(5, 20)
        fault.detail = f"SIGSTOP pid {pid} for {duration:.1f} s"
        os.kill(pid, signal.SIGSTOP)
        self.frozen_pid = pid
        started = time.monotonic()
        unhealthy_at = None
        try:
            while (elapsed := time.monotonic() - started) < duration:
                if unhealthy_at is None and probe_health(self.gateway.metrics_port) != "ok":
                    unhealthy_at = elapsed
                time.sleep(min(0.5, max(0.0, duration - elapsed)))
        finally:
            self.thaw()
            fault.end = self.timeline.now()
        seen = (
            "/health stayed ok throughout"
            if unhealthy_at is None
            else f"/health not ok from {unhealthy_at:.1f} s"
        )
        return f"{seen}; after SIGCONT {self._healthy_after()}"

    # --- connections cut mid-frame ----------------------------------------------------------

    def half_frame_kafka(self, fault: Fault) -> str:
        batch = encode_batch(0, [(0, int(time.time() * 1000), None, b"half", [])])
        frame = protocol.encode_request(
            PRODUCE,
            9,
            1,
            "soak-half",
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [
                    {"name": self.topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}
                ],
            },
        )
        cut = self.rng.randint(5, len(frame) - 1)
        hold = self.rng.uniform(0, 3)
        fault.detail = f"{cut} of a {len(frame)}-byte Produce, held {hold:.1f} s"
        with socket.create_connection(("127.0.0.1", self.gateway.kafka_port), timeout=10) as sock:
            sock.sendall(frame[:cut])
            time.sleep(hold)
        return "sent and closed"

    def half_frame_amqp(self, fault: Fault) -> str:
        client = RawAmqp(self.gateway.amqp_port).open()
        payload = kafka_value("half", "soak-half", 0)
        data = (
            amqp_frame.marshal(commands.Basic.Publish(exchange="", routing_key="soak-half"), 1)
            + amqp_frame.marshal(amqp_header.ContentHeader(body_size=len(payload)), 1)
            + amqp_frame.marshal(amqp_body.ContentBody(payload), 1)
        )
        cut = self.rng.randint(1, len(data) - 1)
        hold = self.rng.uniform(0, 3)
        fault.detail = f"{cut} of a {len(data)}-byte basic.publish, held {hold:.1f} s"
        try:
            client.sock.sendall(data[:cut])
            time.sleep(hold)
        finally:
            client.close()
        return "sent and closed"

    def client_cut(self, fault: Fault) -> str:
        target = self.rng.choice(["kafka", "amqp"])
        fault.detail = f"shutdown(2) of the victims' {target} sockets"
        answer = self.victims.command(f"cut {target}", "cut", 10)
        if answer is None:
            return "the victims' process did not answer"
        return f"{answer['sockets']} socket(s) shut down"

    # --- hostile inputs ---------------------------------------------------------------------

    def kafka_size_bomb(self, fault: Fault) -> str:
        size = self.rng.choice([2**31 - 1, 2_000_000_000, 1 << 30])
        fault.detail = f"size prefix {size:,} then 64 bytes"
        with socket.create_connection(("127.0.0.1", self.gateway.kafka_port), timeout=10) as sock:
            sock.sendall(struct.pack(">i", size) + struct.pack(">hhih", 18, 0, 1, -1) + b"\0" * 54)
            closed = closed_within(sock, 5)
        return (
            "still open after 5 s" if closed is None else f"closed by the gateway in {closed:.1f} s"
        )

    def garbage_produce(self, fault: Fault) -> str:
        partition = self.rng.randrange(2)
        if self.rng.random() < 0.5:
            records = self.rng.randbytes(self.rng.randint(61, 512))
            fault.detail = f"{len(records)} random bytes as the batch, partition {partition}"
        else:  # a real batch with its body scrambled: the header parses, the CRC does not
            batch = bytearray(encode_batch(0, [(i, 0, None, b"garbage" * 8, []) for i in range(5)]))
            for _ in range(16):
                batch[self.rng.randrange(61, len(batch))] = self.rng.randrange(256)
            records = bytes(batch)
            fault.detail = (
                f"a {len(records)}-byte batch with scrambled records, partition {partition}"
            )
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [
                {"name": self.topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        }
        try:
            response = kafka_wire.call(self.gateway.kafka_port, PRODUCE, 9, body, timeout=15)
        except TimeoutError:
            return "no answer in 15 s"
        except ConnectionError:
            return "connection closed without an answer"
        code = response["responses"][0]["partition_responses"][0]["error_code"]
        if code == 0:
            return "ACCEPTED (error_code 0): garbage stored?"
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = KafkaError(code).name()
        return f"refused: error_code {code} ({name})"

    def amqp_bad_frame(self, fault: Fault) -> str:
        variant = self.rng.choice(["bad type", "oversized", "bad frame end"])
        fault.detail = variant
        client = RawAmqp(self.gateway.amqp_port).open()
        if variant == "bad type":
            data = struct.pack(">BHI", 9, 1, 4) + b"\0\0\0\0" + b"\xce"
        elif variant == "oversized":
            data = struct.pack(">BHI", 1, 1, 0x7FFFFFF0) + b"\0" * 32
        else:
            data = amqp_frame.marshal(commands.Basic.Qos(prefetch_count=1), 1)[:-1] + b"\x00"
        started = time.monotonic()
        try:
            client.sock.sendall(data)
            client.sock.settimeout(5)
            while True:
                value = client.frame()
                if value is None:
                    return f"closed without connection.close in {time.monotonic() - started:.1f} s"
                if isinstance(value, commands.Connection.Close):
                    return f"connection.close {value.reply_code} {value.reply_text}"
        except TimeoutError:
            return "still open after 5 s"
        except ConnectionError:
            return "connection reset"
        finally:
            client.close()

    def idle_flood(self, fault: Fault) -> str:
        """Idle sockets well under the per-IP limit (1,000 by default): healthy clients
        beside them must not notice."""
        counts = {"kafka": self.rng.randint(100, 200), "amqp": self.rng.randint(50, 100)}
        ports = {"kafka": self.gateway.kafka_port, "amqp": self.gateway.amqp_port}
        hold = self.rng.uniform(8, 15)
        fault.detail = f"{counts['kafka']} Kafka + {counts['amqp']} AMQP sockets for {hold:.0f} s"
        sockets: list[socket.socket] = []
        refused = 0
        try:
            for name, count in counts.items():
                for _ in range(count):
                    try:
                        sockets.append(socket.create_connection(("127.0.0.1", ports[name]), 5))
                    except OSError:
                        refused += 1
            self.stopping.wait(hold)
            closed = 0
            for sock in sockets:
                sock.setblocking(False)
                try:
                    if sock.recv(1) == b"":
                        closed += 1
                except BlockingIOError:
                    pass
                except OSError:
                    closed += 1
        finally:
            for sock in sockets:
                sock.close()
        return f"{refused} refused, {closed} closed by the gateway while idle"
