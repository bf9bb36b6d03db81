"""The delayed-message exchange (x-delayed-message) as RabbitMQ's plugin behaves, held by
the gateway since the embedded Pulsar has no delayed delivery (issue 36). The reference
RabbitMQ on this machine has no such plugin: these tests run against the gateway alone.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pika
import pika.exceptions

from harness.gateway_process import GatewayProcess
from harness.pika_waits import pump_until


def _delayed(ch, name: str, kind: str = "direct") -> None:
    ch.exchange_declare(name, "x-delayed-message", durable=True, arguments={"x-delayed-type": kind})


def test_messages_are_routed_when_their_delay_is_over(gateway: GatewayProcess) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        ch = conn.channel()
        p = f"dx-{uuid.uuid4().hex[:8]}"
        _delayed(ch, f"{p}.x", "topic")
        ch.queue_declare(f"{p}.q")
        ch.queue_bind(f"{p}.q", f"{p}.x", "jobs.*")
        arrived: list[tuple[bytes, float]] = []
        ch.basic_consume(
            f"{p}.q",
            lambda _c, _m, _p, body: arrived.append((body, time.monotonic())),
            auto_ack=True,
        )
        ch.confirm_delivery()
        start = time.monotonic()
        for body, delay in ((b"late", 900), (b"now", None), (b"soon", 300), (b"neg", -5)):
            headers = {"x-delay": delay} if delay is not None else {}
            # mandatory: a held message is confirmed, never returned (as the plugin)
            ch.basic_publish(
                f"{p}.x", "jobs.a", body, pika.BasicProperties(headers=headers), mandatory=True
            )
        ch.basic_publish(
            f"{p}.x",
            "other.key",
            b"unbound",
            pika.BasicProperties(headers={"x-delay": 100}),
            mandatory=True,
        )
        pump_until(conn, lambda: len(arrived) == 4, "the delayed messages", 5)
        order = [body for body, _ in arrived]
        assert order[:2] in ([b"now", b"neg"], [b"neg", b"now"])
        assert order[2:] == [b"soon", b"late"]
        times = {body: at - start for body, at in arrived}
        assert 0.28 <= times[b"soon"] < 0.3 + 1.0, times
        assert 0.88 <= times[b"late"] < 0.9 + 1.0, times
        conn.sleep(0.2)
        assert len(arrived) == 4  # the unbound one went nowhere
        try:
            ch.exchange_declare(f"{p}.bad", "x-delayed-message")
            raise AssertionError("a delayed exchange without x-delayed-type was declared")
        except pika.exceptions.ChannelClosedByBroker as error:
            assert error.reply_code == 406
    finally:
        if conn.is_open:
            conn.close()


def test_held_messages_survive_a_gateway_restart(tmp_path: Path) -> None:
    """The delay is kept in Pulsar, not in the gateway's memory: a gateway killed while
    messages wait routes them after its restart, each when due (or at once if overdue)."""
    gw = GatewayProcess(tmp_path / "gw").start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        ch = conn.channel()
        _delayed(ch, "dx", "fanout")
        ch.queue_declare("dq", durable=True)
        ch.queue_bind("dq", "dx")
        ch.confirm_delivery()
        for i in range(5):
            headers = {"x-delay": 500 + 1000 * i}
            ch.basic_publish(
                "dx", "", f"m{i}".encode(), pika.BasicProperties(headers=headers, delivery_mode=2)
            )
        gw.kill()
        gw.start()
        conn = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        ch = conn.channel()
        got: list[bytes] = []
        ch.basic_consume("dq", lambda _c, _m, _p, body: got.append(body), auto_ack=True)
        pump_until(conn, lambda: len(got) == 5, "the held messages after a restart", 15)
        assert got == [f"m{i}".encode() for i in range(5)]
        conn.sleep(0.5)
        assert len(got) == 5  # each routed once
        conn.close()
    finally:
        gw.stop()
