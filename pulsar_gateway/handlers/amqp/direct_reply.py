"""Direct reply-to: RabbitMQ's `amq.rabbitmq.reply-to` pseudo-queue.

An RPC client consumes from `amq.rabbitmq.reply-to` (no-ack only, one such consumer per
channel) and publishes its request with `reply_to` set to that name; the broker rewrites
`reply_to` to an address of the client's channel, `amq.rabbitmq.reply-to.<token>`, and a
reply published to the default exchange with that address as routing key goes straight to
the consumer: no queue, nothing stored, nothing to acknowledge. A reply to an address
whose consumer is gone is dropped (returned when mandatory); a request with `reply_to`
set on a channel without the consumer, a second reply consumer on a channel and an
acknowledging one are refused with 406, in RabbitMQ's words (docs/compatibility.md).

Addresses live in the vhost (`ReplyRoutes`), and every connection of a vhost is served by
the same gateway process, the vhost's owner in a cluster (docs/cluster.md, "AMQP on one
port"): a requester and a responder that connected to different members meet there.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Protocol

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode

REPLY_TO = "amq.rabbitmq.reply-to"
ADDRESS_PREFIX = REPLY_TO + "."


class ReplyChannel(Protocol):
    """The channel a reply consumer lives on (channel.Channel)."""

    closed: bool

    def deliver_reply(self, consumer_tag: str, message: AmqpMessage) -> None: ...


@dataclass(slots=True)
class ReplyConsumer:
    """A channel's consumer on `amq.rabbitmq.reply-to`, and the address it answers to."""

    channel: ReplyChannel
    tag: str
    address: str


class ReplyRoutes:
    """The reply consumers of one vhost, by address."""

    def __init__(self) -> None:
        self._by_address: dict[str, ReplyConsumer] = {}

    def add(self, channel: ReplyChannel, tag: str) -> ReplyConsumer:
        address = ADDRESS_PREFIX + secrets.token_urlsafe(18)
        consumer = self._by_address[address] = ReplyConsumer(channel, tag, address)
        return consumer

    def remove(self, consumer: ReplyConsumer | None) -> None:
        if consumer is not None:
            self._by_address.pop(consumer.address, None)

    def find(self, address: str) -> ReplyConsumer | None:
        consumer = self._by_address.get(address)
        if consumer is None or consumer.channel.closed:
            return None
        return consumer

    def __len__(self) -> int:
        return len(self._by_address)


def is_reply_address(exchange: str, routing_key: str) -> bool:
    """A publish to the default exchange with a reply address as routing key."""
    return exchange == "" and routing_key.startswith(ADDRESS_PREFIX)


def check_reply_consume(no_ack: bool, existing: ReplyConsumer | None) -> None:
    if not no_ack:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, "reply consumer cannot acknowledge")
    if existing is not None:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, "reply consumer already set")


def no_reply_consumer() -> AmqpError:
    """A request names `amq.rabbitmq.reply-to` on a channel that does not consume it."""
    return AmqpError(ReplyCode.PRECONDITION_FAILED, "fast reply consumer does not exist")
