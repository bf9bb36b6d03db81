"""A Celery app whose tasks retry and wait, for the task-framework runs of issue 36 (the
differential application test and bench/amqp_tasks.py). The broker URL comes from the
environment. Acks are late, so a task whose worker dies unacknowledged is delivered again
to another worker: every task is done, none is lost.

`work(n, failures, sleep)` fails its first `failures` attempts and is retried after a
countdown each time (Celery publishes the retry with an ETA, which the worker holds
unacknowledged until it is due); `sleep` stands for the task's work.
"""

from __future__ import annotations

import os
import time

from celery import Celery

app = Celery(
    "retry_patterns",
    broker=os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"),
    backend="rpc://",
)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=4,
    broker_connection_retry=False,
    task_default_queue=os.environ.get("GATEWAY_TASK_QUEUE", "retry-patterns"),
    result_expires=None,
)


@app.task(bind=True, max_retries=10)
def work(self, n: int, failures: int, sleep: float = 0.0) -> int:  # noqa: ANN001
    if sleep:
        time.sleep(sleep)
    if self.request.retries < failures:
        raise self.retry(countdown=0.2)
    return n * n
