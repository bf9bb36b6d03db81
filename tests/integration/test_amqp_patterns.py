"""RabbitMQ patterns on the gateway alone, where the reference on this machine (RabbitMQ
3.10) behaves otherwise than the versions the gateway follows (issue 36; the behaviour
both share is compared in tests/differential/). Each test says which version it follows.
One gateway serves the module.
"""

from __future__ import annotations

import uuid

import pika
import pika.exceptions

from tests.support.gateway_process import GatewayProcess
from tests.support.pika_waits import pump_until

REPLY_TO = "amq.rabbitmq.reply-to"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_mandatory_reply_is_delivered_and_not_returned(gateway: GatewayProcess) -> None:
    """RabbitMQ 3.10 delivered a direct reply-to reply published as mandatory and also
    returned it as unroutable (312); RabbitMQ 3.12 and later deliver it only."""
    requester = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    responder = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        ch = requester.channel()
        queue = _name("rpc")
        ch.queue_declare(queue, auto_delete=True)
        replies: list[bytes] = []
        ch.basic_consume(REPLY_TO, lambda _c, _m, _p, body: replies.append(body), auto_ack=True)
        ch.basic_publish("", queue, b"ping", pika.BasicProperties(reply_to=REPLY_TO))
        rch = responder.channel()
        rch.confirm_delivery()
        got = None
        while got is None:
            method, props, _ = rch.basic_get(queue, auto_ack=True)
            got = props if method is not None else None
        rch.basic_publish("", got.reply_to, b"pong", mandatory=True)  # no UnroutableError
        pump_until(requester, lambda: replies, "the reply", 5)
        assert replies == [b"pong"]
        requester.close()  # the address is gone with its channel: a reply is now unroutable
        try:
            rch.basic_publish("", got.reply_to, b"late", mandatory=True)
            raise AssertionError("a reply to a closed requester was confirmed as routed")
        except pika.exceptions.UnroutableError as error:
            assert error.messages[0].method.reply_code == 312
    finally:
        for connection in (requester, responder):
            if connection.is_open:
                connection.close()
