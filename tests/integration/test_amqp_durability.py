"""Nothing confirmed is lost: kill -9 of gateway and broker, restart, every
confirmed message of a durable queue is delivered; unacked deliveries of a
closed channel come back, marked redelivered."""

from __future__ import annotations

import time

import pika

from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until

TOTAL = 2000
END = b"end-marker"


def _collect(url: str, queue: str, expected: int, timeout: float = 30) -> list[tuple[bytes, bool]]:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = connection.channel()
        ch.basic_qos(prefetch_count=500)
        got: list[tuple[bytes, bool]] = []

        def on_message(c, method, props, body) -> None:
            got.append((body, method.redelivered))
            c.basic_ack(method.delivery_tag)

        ch.basic_consume(queue, on_message)
        deadline = time.time() + timeout
        while len(got) < expected and time.time() < deadline:
            connection.process_data_events(time_limit=0.2)

        # anything beyond `expected` (a duplicate, a late redelivery) comes before a marker
        # published now, so everything is in once the marker is
        def marker_in() -> bool:
            connection.process_data_events(time_limit=0.1)
            return (END, False) in got

        ch.basic_publish("", queue, END)
        wait_until(marker_in, timeout, 0, message=f"the end marker on {queue}")
        got.remove((END, False))
        return got
    finally:
        connection.close()


def test_confirmed_messages_survive_kill_9(tmp_path) -> None:
    gw = GatewayProcess(tmp_path / "gw").start()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        ch = connection.channel()
        ch.exchange_declare("durable-x", "topic", durable=True)
        ch.queue_declare("durable-q", durable=True, arguments={"x-max-length": 100000})
        ch.queue_bind("durable-q", "durable-x", "orders.#")
        ch.queue_declare("transient-q", durable=False)
        ch.confirm_delivery()
        confirmed = []
        for i in range(TOTAL):
            body = f"m{i}".encode()
            ch.basic_publish("durable-x", "orders.new", body, pika.BasicProperties(delivery_mode=2))
            confirmed.append(body)
        # no clean close: the process dies under the client
        gw.kill()
        gw.start()
        got = _collect(gw.amqp_url, "durable-q", TOTAL)
        assert [body for body, _ in got] == confirmed
        check = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        cch = check.channel()
        assert cch.queue_declare("durable-q", passive=True).method.message_count == 0
        cch.confirm_delivery()
        cch.basic_publish("durable-x", "orders.again", b"routed")  # the binding survived too
        assert cch.queue_declare("durable-q", passive=True).method.message_count == 1
        try:
            cch.queue_declare("transient-q", passive=True)
            raise AssertionError("a transient queue survived a restart")
        except pika.exceptions.ChannelClosedByBroker as error:
            assert error.reply_code == 404
        check.close()
    finally:
        gw.stop()


def test_unacked_deliveries_of_closed_channel_are_redelivered(gateway) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    ch = connection.channel()
    queue = ch.queue_declare("", exclusive=False, auto_delete=False).method.queue
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("", queue, str(i).encode())
    consumer_ch = connection.channel()
    consumer_ch.basic_qos(prefetch_count=10)
    seen: list[bytes] = []
    consumer_ch.basic_consume(queue, lambda c, m, p, b: seen.append(b))
    deadline = time.time() + 5
    while len(seen) < 10 and time.time() < deadline:
        connection.process_data_events(time_limit=0.2)
    assert seen == [str(i).encode() for i in range(10)]
    consumer_ch.close()  # ten unacked deliveries go back to the head of the queue
    connection.close()
    got = _collect(gateway.amqp_url, queue, 20)
    assert [b for b, _ in got] == [str(i).encode() for i in range(20)]
    assert [r for _, r in got] == [True] * 10 + [False] * 10


def test_idle_queue_reader_is_released_without_false_redelivered(tmp_path) -> None:
    gw = GatewayProcess(tmp_path / "gw", extra=["--set", "amqp.reader_idle_seconds=0.3"]).start()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        ch = connection.channel()
        ch.queue_declare("idle-q", durable=True)
        ch.confirm_delivery()
        for i in range(5):
            ch.basic_publish("", "idle-q", str(i).encode())
        method, _, body = ch.basic_get("idle-q")  # the queue's reader fetches all five
        assert body == b"0"
        ch.basic_ack(method.delivery_tag)
        wait_until(  # idle: the Pulsar consumer is closed, four messages go back
            lambda: "amqp queue idle-q: idle" in gw.log_tail(200),
            10,
            message="the idle queue's reader to be released",
        )
        connection.process_data_events(time_limit=0)
        rest = []
        for _ in range(4):
            method, _, body = ch.basic_get("idle-q", auto_ack=True)
            rest.append((body, method.redelivered))
        assert rest == [(str(i).encode(), False) for i in range(1, 5)]
        assert ch.queue_declare("idle-q", passive=True).method.message_count == 0
        connection.close()
    finally:
        gw.stop()
