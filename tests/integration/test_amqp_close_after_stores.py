"""connection.close-ok means the connection's publishes are stored.

A publisher without confirms (amqp-publish, a script's last `basic_publish` before
`close()`) takes close-ok as "the broker has my messages": on RabbitMQ a `basic.get` on
another connection right after finds them. The gateway used to answer close-ok before the
publishes reached Pulsar, and the README's quick start failed now and then on exactly that.
Freezing the broker makes the order visible: while it is stopped nothing can be stored,
so a close-ok in that time is the old order.
"""

from __future__ import annotations

import os
import signal
import threading

import pika

from tests.support.gateway_process import GatewayProcess

MESSAGES = 20
BODY = 64 * 1024
FROZEN_SECONDS = 3


def test_close_ok_waits_for_the_publishes_and_the_next_connection_finds_them(tmp_path) -> None:
    gw = GatewayProcess(tmp_path / "gw").start()
    try:
        publisher = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        channel = publisher.channel()
        channel.queue_declare("close-q", durable=True)
        bodies = [bytes([i]) + b"x" * (BODY - 1) for i in range(MESSAGES)]
        broker = gw.broker_pid()
        os.kill(broker, signal.SIGSTOP)
        try:
            for body in bodies:
                channel.basic_publish("", "close-q", body)
            closing = threading.Thread(target=publisher.close)  # returns on close-ok
            closing.start()
            closing.join(FROZEN_SECONDS)
            assert closing.is_alive(), (
                "connection.close-ok came while the broker was stopped, before the "
                "connection's publishes could be stored"
            )
        finally:
            os.kill(broker, signal.SIGCONT)
        closing.join(60)
        assert not closing.is_alive(), "connection.close-ok never came after the broker resumed"

        reader = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        try:
            got = []
            for _ in range(MESSAGES):
                method, _properties, body = reader.channel().basic_get("close-q", True)
                assert method is not None, (
                    f"the queue ran dry after {len(got)} of {MESSAGES} messages published "
                    "before close-ok"
                )
                got.append(body)
            assert got == bodies
        finally:
            reader.close()
    finally:
        gw.stop()
