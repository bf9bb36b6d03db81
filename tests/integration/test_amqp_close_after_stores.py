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
from pamqp import commands

from harness.gateway_process import GatewayProcess
from harness.raw_amqp_socket import next_method, open_connection
from pulsar_gateway.handlers.amqp.frames import FrameReader, encode_content, encode_method

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


def test_a_publish_read_together_with_the_close_is_stored_before_close_ok(tmp_path) -> None:
    """amqp-publish writes its publish and connection.close together: both arrive in one
    read, and the publish must be stored before close-ok all the same."""
    gw = GatewayProcess(tmp_path / "gw").start()
    try:
        sock = open_connection(gw.amqp_port)
        reader = FrameReader(0)
        sock.sendall(encode_method(1, commands.Channel.Open()))
        assert isinstance(next_method(sock, reader), commands.Channel.OpenOk)
        sock.sendall(encode_method(1, commands.Queue.Declare(queue="together-q", durable=True)))
        assert isinstance(next_method(sock, reader), commands.Queue.DeclareOk)
        publish = commands.Basic.Publish(exchange="", routing_key="together-q")
        content = encode_content(
            1, publish, b"hello", commands.Basic.Properties().marshal(), 131072
        )
        broker = gw.broker_pid()
        os.kill(broker, signal.SIGSTOP)
        try:
            sock.sendall(content + encode_method(0, commands.Connection.Close(200, "bye", 0, 0)))
            sock.settimeout(FROZEN_SECONDS)
            try:
                early = next_method(sock, reader)
            except TimeoutError:
                early = None
            assert early is None, f"{early} came while the broker was stopped"
        finally:
            os.kill(broker, signal.SIGCONT)
        sock.settimeout(60)
        assert isinstance(next_method(sock, reader), commands.Connection.CloseOk)
        sock.close()

        getter = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        try:
            method, _properties, body = getter.channel().basic_get("together-q", True)
            assert method is not None and body == b"hello"
        finally:
            getter.close()
    finally:
        gw.stop()
