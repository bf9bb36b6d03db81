"""Waiting with a pika BlockingConnection: its events only run while something pumps them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika

from harness.waiting import wait_until


def pump_until(
    conn: pika.BlockingConnection, condition: Callable[[], Any], what: str, timeout: float = 10
) -> None:
    """Process the connection's events (deliveries, cancels, closes) until `condition()`."""

    def pumped() -> Any:
        conn.process_data_events(time_limit=0.05)
        return condition()

    wait_until(pumped, timeout, 0, message=what)


def round_trip(conn: pika.BlockingConnection) -> None:
    """Open and close a channel, then dispatch: whatever the broker sent before it answered
    has arrived. The marker for "and nothing more was delivered"."""
    conn.channel().close()
    conn.process_data_events(time_limit=0)


def connect_when_served(port: int, timeout: float = 30) -> pika.BlockingConnection:
    """A connection through one cluster member's port, tried until the vhost's owner is
    settled (before that, the member refuses the login)."""
    params = pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1)

    def attempt() -> pika.BlockingConnection | None:
        try:
            return pika.BlockingConnection(params)
        except pika.exceptions.AMQPError:
            return None

    return wait_until(attempt, timeout=timeout, message=f"a connection through port {port}")


def drain(
    channel: pika.adapters.blocking_connection.BlockingChannel, queue: str, quiet: float
) -> list[bytes]:
    """Every body the queue delivers, each acknowledged, until none comes for `quiet`
    seconds; then the consumer is cancelled."""
    bodies = []
    for method, _properties, body in channel.consume(queue, inactivity_timeout=quiet):
        if method is None:
            break
        bodies.append(body)
        channel.basic_ack(method.delivery_tag)
    channel.cancel()
    return bodies
