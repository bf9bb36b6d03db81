"""AMQP operations on the permission model, with RabbitMQ's answers.

A vhost is one Pulsar namespace (docs/pulsar-mapping.md), and its queues and exchanges are
topics of it: the rules of the Kafka side (security/rights.py) decide on a queue or
exchange `q` of the vhost on namespace `tenant/ns` as on the topic `tenant/ns/q` (and `q`
where short Kafka names live), so one DENY binds both protocols (handlers/authorization.py;
docs/security.md, "Authorization"):

- connection.open: some ALLOW rule that may cover a topic of the namespace, else
  connection.close 530 NOT_ALLOWED "access to vhost '<v>' refused for user '<u>'", as
  RabbitMQ answers a user without permissions on the vhost;
- RabbitMQ's configure/write/read split, per operation on the queue or exchange named:
  declaring an exchange or queue needs `create` (a passive declare needs nothing, as in
  RabbitMQ), deleting `delete`, binding and unbinding `alter`; publishing `write` on the
  exchange (on the queue the routing key names, for the default exchange, which
  delivers to that queue, while the refusal names `amq.default` as RabbitMQ's does);
  consuming, basic.get and purging `read`. A refusal is
  channel.close 403 ACCESS_REFUSED "access to queue 'q' in vhost '/' refused for user 'u'",
  RabbitMQ's text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from pamqp import base, commands

from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode, resource
from pulsar_gateway.handlers.authorization import Access
from pulsar_gateway.security.rights import ALTER, CREATE, DELETE, READ, TOPIC, WRITE

_E, _Q, _B = commands.Exchange, commands.Queue, commands.Basic

# method -> (operation, what it names, that name), or None when it needs no right
Need = tuple[str, str, str] | None
_NEEDS: Mapping[type[base.Frame], Callable[[Any], Need]] = MappingProxyType(
    {
        _E.Declare: lambda m: None if m.passive else (CREATE, "exchange", m.exchange),
        _E.Delete: lambda m: (DELETE, "exchange", m.exchange),
        _E.Bind: lambda m: (ALTER, "exchange", m.destination),
        _E.Unbind: lambda m: (ALTER, "exchange", m.destination),
        _Q.Declare: lambda m: None if m.passive else (CREATE, "queue", m.queue),
        _Q.Bind: lambda m: (ALTER, "queue", m.queue),
        _Q.Unbind: lambda m: (ALTER, "queue", m.queue),
        _Q.Purge: lambda m: (READ, "queue", m.queue),
        _Q.Delete: lambda m: (DELETE, "queue", m.queue),
        _B.Consume: lambda m: (READ, "queue", m.queue),
        _B.Get: lambda m: (READ, "queue", m.queue),
    }
)


def may_open(access: Access, namespace: str, vhost: str) -> bool:
    """connection.open: some right in the vhost's namespace; a denial is logged."""
    if access.may_see_namespace(namespace):
        return True
    access.denied(TOPIC, f"vhost '{vhost}'", "open")
    return False


def authorize_method(access: Access, namespace: str, vhost: str, method: base.Frame) -> None:
    """Raises RabbitMQ's 403 when the method needs a right the user lacks."""
    if access.unrestricted:
        return
    need = _NEEDS.get(type(method))
    if need is not None:
        required = need(method)
        if required is not None:
            authorize(access, namespace, vhost, *required)


def authorize(
    access: Access,
    namespace: str,
    vhost: str,
    operation: str,
    kind: str,
    name: str,
    checked: str | None = None,
) -> None:
    """Raises RabbitMQ's 403 naming the `kind` `name` unless the user may do `operation`
    on it (on the topic `checked`, when that differs from the name RabbitMQ reports)."""
    topic = name if checked is None else checked
    if access.may(TOPIC, access.topic_names(namespace, topic), operation):
        return
    what = resource(kind, name, vhost)
    access.denied(TOPIC, what, operation)
    raise AmqpError(ReplyCode.ACCESS_REFUSED, f"access to {what} refused for user '{access.user}'")


def authorize_publish(
    access: Access, namespace: str, vhost: str, exchange: str, routing_key: str = ""
) -> None:
    """basic.publish: `write` on the exchange; through the default exchange, on the queue
    the routing key names, where the message goes (a refusal names `amq.default`, as
    RabbitMQ's does)."""
    if access.unrestricted:
        return
    if exchange:
        authorize(access, namespace, vhost, WRITE, "exchange", exchange)
    else:
        authorize(access, namespace, vhost, WRITE, "exchange", "amq.default", routing_key)
