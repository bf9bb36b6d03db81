"""A Celery app for the AMQP integration test; the broker URL comes from the environment."""

from __future__ import annotations

import os

from celery import Celery

app = Celery(
    "gateway_test",
    broker=os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"),
    backend="rpc://",
)
app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1, broker_connection_retry=False)


@app.task
def add(x: int, y: int) -> int:
    return x + y
