"""Direct reply-to across a cluster of two gateways (docs/cluster.md, "AMQP on one port"):
the requester connects to one member and the responder to the other; the vhost's owner
serves both connections (the other member hands its connection over), so the reply
finds the requester's channel there (issue 36).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pika

from harness.gateway_process import cluster_member, wait_until_members_see_each_other
from harness.pika_waits import connect_when_served, pump_until
from harness.shared_broker import SharedBroker
from harness.waiting import wait_until

REPLY_TO = "amq.rabbitmq.reply-to"


def test_a_reply_reaches_a_requester_connected_to_the_other_member(tmp_path: Path) -> None:
    broker = SharedBroker(tmp_path / "broker").start()
    members = [
        cluster_member(tmp_path / f"g{node}", broker.service_url, f"m{node}", node)
        for node in (1, 2)
    ]
    try:
        for member in members:
            member.start()
        wait_until_members_see_each_other(members)
        requester = connect_when_served(members[0].amqp_port)
        responder = connect_when_served(members[1].amqp_port)
        queue = f"rpc-{uuid.uuid4().hex[:8]}"
        ch = requester.channel()
        ch.queue_declare(queue)
        replies: list[bytes] = []
        ch.basic_consume(REPLY_TO, lambda _c, _m, _p, body: replies.append(body), auto_ack=True)
        ch.basic_publish("", queue, b"6", pika.BasicProperties(reply_to=REPLY_TO))
        rch = responder.channel()
        method, props, body = wait_until(
            lambda: (got := rch.basic_get(queue, auto_ack=True))[0] and got,
            timeout=10,
            message="the request",
        )
        rch.basic_publish("", props.reply_to, str(int(body) * 7).encode())
        pump_until(requester, lambda: replies, "the reply", 10)
        assert replies == [b"42"]
        requester.close()
        responder.close()
    finally:
        for member in members:
            member.stop()
        broker.stop()
