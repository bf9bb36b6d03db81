"""A Celery app for the AMQP integration tests; the broker URL comes from the environment,
and for amqps:// the CA that signed the gateway's certificate (GATEWAY_AMQP_CA)."""

from __future__ import annotations

import os
import ssl

from celery import Celery

app = Celery(
    "gateway_test",
    broker=os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"),
    backend="rpc://",
)
app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1, broker_connection_retry=False)
if os.environ.get("GATEWAY_AMQP_CA"):
    # verified TLS: the certificate chain and the host name (py-amqp's ssl options)
    app.conf.broker_use_ssl = {
        "ca_certs": os.environ["GATEWAY_AMQP_CA"],
        "cert_reqs": ssl.CERT_REQUIRED,
        "server_hostname": "localhost",
    }


@app.task
def add(x: int, y: int) -> int:
    return x + y
