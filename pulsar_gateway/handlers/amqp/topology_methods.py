"""Exchange and queue methods of one connection: declare, bind, unbind, purge, delete.

Validation (declare rules, reply codes and texts) comes from topology_rules.py; every
change goes through the connection's `VhostState` while its lock is held, so the check and
the change it allows see the same topology. The queues this connection declared exclusive
are remembered here and deleted when it closes.
"""

from __future__ import annotations

import logging
from typing import Any

from pamqp import commands

from pulsar_gateway.handlers.amqp.channel import Channel
from pulsar_gateway.handlers.amqp.direct_reply import REPLY_TO
from pulsar_gateway.handlers.amqp.frames import make_method
from pulsar_gateway.handlers.amqp.method_context import MethodContext
from pulsar_gateway.handlers.amqp.stream_engine import not_supported
from pulsar_gateway.handlers.amqp.topology import DestinationKind
from pulsar_gateway.handlers.amqp.topology_rules import (
    check_bind,
    check_exchange_delete,
    check_queue_access,
    check_queue_delete,
    check_supported_arguments,
    check_unbind,
    declare_exchange,
    declare_queue,
)

log = logging.getLogger("gateway.amqp")

_Q = commands.Queue
_E = commands.Exchange


class TopologyMethods:
    """exchange.* and queue.* of one connection (see the module docstring)."""

    def __init__(self, context: MethodContext) -> None:
        self.context = context
        self.exclusive_queues: set[str] = set()

    # --- exchanges --------------------------------------------------------------------

    async def exchange_declare(self, channel: Channel, m: commands.Exchange.Declare) -> None:
        vh = self.context.state
        async with vh.lock:
            exchange, new = declare_exchange(
                vh.topology,
                m.exchange,
                m.exchange_type,
                passive=m.passive,
                durable=m.durable,
                auto_delete=m.auto_delete,
                internal=m.internal,
                arguments=m.arguments,
            )
            if new:
                await vh.add_exchange(exchange)
        self.context.reply(channel, _E.DeclareOk(), m.nowait)

    async def exchange_delete(self, channel: Channel, m: commands.Exchange.Delete) -> None:
        vh = self.context.state
        async with vh.lock:
            exchange = check_exchange_delete(vh.topology, m.exchange, m.if_unused)
            if exchange is not None:
                await vh.delete_exchange(exchange.name)
        self.context.reply(channel, _E.DeleteOk(), m.nowait)

    async def exchange_bind(self, channel: Channel, m: commands.Exchange.Bind) -> None:
        await self._binding(
            True, m.source, m.destination, DestinationKind.EXCHANGE, m.routing_key, m.arguments
        )
        self.context.reply(channel, _E.BindOk(), m.nowait)

    async def exchange_unbind(self, channel: Channel, m: commands.Exchange.Unbind) -> None:
        await self._binding(
            False, m.source, m.destination, DestinationKind.EXCHANGE, m.routing_key, m.arguments
        )
        self.context.reply(channel, _E.UnbindOk(), m.nowait)

    async def _binding(
        self,
        bind: bool,
        source: str,
        destination: str,
        kind: DestinationKind,
        routing_key: str,
        arguments: Any,
    ) -> None:
        """Add (`bind`) or remove a binding once the rules allow it; removing one that
        does not exist is no error (RabbitMQ 3.10 answers unbind-ok)."""
        vh = self.context.state
        check = check_bind if bind else check_unbind
        async with vh.lock:
            binding = check(
                vh.topology,
                source,
                destination,
                kind,
                routing_key,
                arguments,
                connection_id=self.context.id,
            )
            if binding is None:
                return
            if bind:
                await vh.add_binding(binding)
            else:
                await vh.remove_binding(binding)

    # --- queues -----------------------------------------------------------------------

    async def queue_declare(self, channel: Channel, m: commands.Queue.Declare) -> None:
        vh = self.context.state
        if m.queue == REPLY_TO:
            # RabbitMQ answers for the pseudo-queue, passive or not: no messages, one consumer
            reply = make_method(_Q.DeclareOk, queue=REPLY_TO, message_count=0, consumer_count=1)
            self.context.reply(channel, reply, m.nowait)
            return
        if not m.passive:
            check_supported_arguments(m.arguments or {}, m.queue, vh.name)
        async with vh.lock:
            queue, new = declare_queue(
                vh.topology,
                m.queue,
                connection_id=self.context.id,
                passive=m.passive,
                durable=m.durable,
                exclusive=m.exclusive,
                auto_delete=m.auto_delete,
                arguments=m.arguments,
            )
            if new:
                await vh.add_queue(queue)
                if queue.exclusive:
                    self.exclusive_queues.add(queue.name)
            vh.touch(queue.name)
            engine = vh.consumed(queue.name)
        reply = make_method(
            _Q.DeclareOk,
            queue=queue.name,
            message_count=engine.message_count,
            consumer_count=engine.consumer_count,
        )
        self.context.reply(channel, reply, m.nowait)

    async def queue_bind(self, channel: Channel, m: commands.Queue.Bind) -> None:
        await self._binding(
            True, m.exchange, m.queue, DestinationKind.QUEUE, m.routing_key, m.arguments
        )
        self.context.reply(channel, _Q.BindOk(), m.nowait)

    async def queue_unbind(self, channel: Channel, m: commands.Queue.Unbind) -> None:
        await self._binding(
            False, m.exchange, m.queue, DestinationKind.QUEUE, m.routing_key, m.arguments
        )
        self.context.reply(channel, _Q.UnbindOk())  # queue.unbind has no nowait

    async def queue_purge(self, channel: Channel, m: commands.Queue.Purge) -> None:
        vh = self.context.state
        queue = check_queue_access(vh.topology, m.queue, self.context.id)
        if queue.is_stream:
            raise not_supported("queue.purge", queue.name, vh.name)
        purged = await vh.engine(queue.name).purge()
        self.context.reply(channel, make_method(_Q.PurgeOk, message_count=purged), m.nowait)

    async def queue_delete(self, channel: Channel, m: commands.Queue.Delete) -> None:
        vh = self.context.state
        async with vh.lock:
            name = m.queue
            known = vh.topology.queues.get(name)
            engines = vh.streams if known is not None and known.is_stream else vh.engines
            engine = engines.get(name) if known is not None else None
            queue = check_queue_delete(
                vh.topology,
                name,
                self.context.id,
                if_unused=m.if_unused,
                if_empty=m.if_empty,
                consumers=engine.consumer_count if engine else 0,
                messages=engine.message_count if engine else 0,
            )
            count = 0
            if queue is not None:
                count = vh.consumed(queue.name).message_count
                await vh.delete_queue(queue.name)
                self.exclusive_queues.discard(queue.name)
        self.context.reply(channel, make_method(_Q.DeleteOk, message_count=count), m.nowait)

    async def delete_exclusive_queues(self) -> None:
        """The connection closed: its exclusive queues go with it."""
        vh = self.context.vhost
        if vh is None:
            return
        for name in sorted(self.exclusive_queues):
            try:
                async with vh.lock:
                    await vh.delete_queue(name)
            except Exception as exc:
                log.warning("deleting exclusive queue %s failed: %s", name, exc)
        self.exclusive_queues.clear()
