"""kill -9 of the embedded broker right after a consumer acked: the acks pulsar-client
had not sent yet are lost and the restarted broker hands those messages out again,
counted as new. The gateway must recognise them (acked: never delivered again) and
mark what was delivered and unacked at the crash as redelivered."""

from __future__ import annotations

import time

import pika

from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until

TOTAL = 3000
HELD = 10  # deliveries a second channel holds unacked across the crash
END = b"end-marker"


def test_acked_messages_are_not_delivered_again_after_a_broker_kill(tmp_path) -> None:
    gw = GatewayProcess(tmp_path / "gw").start()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(gw.amqp_url))
        ch = connection.channel()
        ch.queue_declare("acked-q", durable=True)
        ch.confirm_delivery()
        for i in range(TOTAL):
            ch.basic_publish("", "acked-q", f"m{i}".encode())

        holder = connection.channel()  # takes HELD messages and sits on them
        holder.basic_qos(prefetch_count=HELD)
        held: list[bytes] = []
        holder.basic_consume("acked-q", lambda c, m, p, b: held.append(b))
        wait_until(
            lambda: connection.process_data_events(time_limit=0.05) or len(held) == HELD,
            10,
            0,
            message="the holder's deliveries",
        )

        consumer = connection.channel()
        consumer.basic_qos(prefetch_count=200)
        got: list[tuple[bytes, bool]] = []
        acked: set[bytes] = set()
        again: list[bytes] = []

        def on_message(c, method, props, body) -> None:
            if body in acked:
                again.append(body)
            got.append((body, method.redelivered))
            c.basic_ack(method.delivery_tag)
            acked.add(body)

        consumer.basic_consume("acked-q", on_message)
        wait_until(
            lambda: connection.process_data_events(time_limit=0.05) or len(got) >= TOTAL // 2,
            30,
            0,
            message="half the messages",
        )
        connection.process_data_events(time_limit=0)  # the last acks leave the client
        time.sleep(0.02)  # ...reach the gateway, and sit in pulsar-client's ack group
        gw.kill_broker()

        holder.close()  # its unacked deliveries go back to the queue, redelivered
        wait_until(
            lambda: connection.process_data_events(time_limit=0.1) or len(acked) >= TOTAL,
            60,
            0,
            message="every message after the broker's restart",
        )
        consumer.basic_publish("", "acked-q", END)  # whatever came back precedes it
        wait_until(
            lambda: connection.process_data_events(time_limit=0.1) or (END, False) in got,
            30,
            0,
            message="the end marker",
        )
        got.remove((END, False))
        acked.discard(END)
        connection.close()

        assert again == [], f"{len(again)} acked messages delivered again: {again[:5]}"
        assert sorted(acked) == sorted(f"m{i}".encode() for i in range(TOTAL))
        first_time = {body: redelivered for body, redelivered in got}
        assert all(first_time[body] for body in held), "a held message came back unmarked"
        log = gw.log_tail(400)
        print("gateway reported lost acks:", [ln for ln in log.splitlines() if "came back" in ln])
    finally:
        gw.stop()
