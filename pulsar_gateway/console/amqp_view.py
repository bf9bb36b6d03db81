"""The console's AMQP actions: purge or delete a queue, close a connection.

The listings are the management API's (`/api/queues`, `/api/connections`...), which the
page reads itself. The actions are checked as the AMQP methods they stand for are
(handlers/amqp/authorization.py): purging a queue needs READ on the queue as a topic of
its vhost's namespace (queue.purge's), deleting it DELETE (queue.delete's); closing a
connection is for an administrator, or the connection's own user. A queue is acted on
only in a vhost this member has open (in a cluster, the member that serves the vhost)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from pulsar_gateway.console.kafka_view import ConsoleError, Viewer
from pulsar_gateway.security.rights import DELETE, READ, TOPIC

Json = Any


class AmqpListener(Protocol):
    """What the console asks of the AMQP listener (handlers/amqp/server.py)."""

    broker: Any  # its AmqpBroker: the open vhosts

    def connections(self) -> Iterable[Any]: ...

    async def close_connection(self, name: str, reason: str) -> bool: ...


class AmqpActions:
    def __init__(self, listener: AmqpListener, vhost_namespace: Callable[[str], str]) -> None:
        self.listener = listener
        self.vhost_namespace = vhost_namespace

    def _vhost(self, caller: Viewer, vhost: str, queue: str, operation: str) -> Any:
        """The open vhost holding `queue`, when the caller may do `operation` on it; 404
        alike for a queue that does not exist and one the caller may not see."""
        access = caller.access
        names = access.topic_names(self.vhost_namespace(vhost), queue)
        allowed = access.unrestricted or access.may(TOPIC, names, operation)
        state = self.listener.broker.vhosts.get(vhost)
        if state is None or queue not in state.topology.queues:
            raise ConsoleError(404, f"no queue '{queue}' in vhost '{vhost}' here")
        if not allowed:
            raise ConsoleError(403, f"you may not {operation} queue '{queue}'")
        return state

    async def purge_queue(self, caller: Viewer, vhost: str, queue: str) -> Json:
        state = self._vhost(caller, vhost, queue, READ)
        purged = await state.engine(queue).purge()
        return {"vhost": vhost, "queue": queue, "purged": purged}

    async def delete_queue(self, caller: Viewer, vhost: str, queue: str) -> Json:
        state = self._vhost(caller, vhost, queue, DELETE)
        await state.delete_queue(queue)
        return {"vhost": vhost, "queue": queue, "deleted": True}

    async def close_connection(self, caller: Viewer, name: str) -> Json:
        owners = {c.name: c.user for c in self.listener.connections()}
        if name not in owners or not (caller.administrator or owners[name] == caller.user):
            raise ConsoleError(404, f"no connection '{name}' you may see")
        closed = await self.listener.close_connection(name, "closed from the management console")
        if not closed:
            raise ConsoleError(404, f"connection '{name}' is gone")
        return {"closed": name}
