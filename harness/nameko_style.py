"""A nameko-style service on plain pika: RPC over a topic exchange with a reply queue per
caller, and events dispatched to a topic exchange that each listening service consumes
through a queue of its own, as nameko lays them out (`nameko-rpc`, `<service>.events`,
`evt-<service>-<event>--<listener>.<method>`). Used by the application tests of issue 36
against RabbitMQ and the gateway alike.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pika

RPC_EXCHANGE = "nameko-rpc"


class Service(threading.Thread):
    """`greeter.hello(name)` answers and dispatches `greeted`; `audit` and `mailer` each
    listen to `greeted` with a queue of their own."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.url, self.prefix = url, prefix
        self.events: dict[str, list[str]] = {"audit": [], "mailer": []}
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # the test reports it
            self.error = exc
            self.ready.set()

    def _serve(self) -> None:
        p = self.prefix
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)
        ch.exchange_declare(f"{p}.{RPC_EXCHANGE}", "topic", durable=True)
        ch.exchange_declare(f"{p}.greeter.events", "topic", durable=True)
        ch.queue_declare(f"{p}.rpc-greeter", durable=True)
        ch.queue_bind(f"{p}.rpc-greeter", f"{p}.{RPC_EXCHANGE}", "greeter.*")
        for listener in self.events:
            queue = f"{p}.evt-greeter-greeted--{listener}.on_greeted"
            ch.queue_declare(queue, durable=True)
            ch.queue_bind(queue, f"{p}.greeter.events", "greeted")
            ch.basic_consume(queue, self._listener(listener))
        ch.basic_consume(f"{p}.rpc-greeter", self._rpc)
        self.ready.set()
        while not self.stopping.is_set():
            conn.process_data_events(time_limit=0.05)
        conn.close()

    def _listener(self, name: str) -> Any:
        def on_event(channel: Any, method: Any, _props: Any, body: bytes) -> None:
            self.events[name].append(json.loads(body)["name"])
            channel.basic_ack(method.delivery_tag)

        return on_event

    def _rpc(self, channel: Any, method: Any, props: Any, body: bytes) -> None:
        call = json.loads(body)
        name = call["kwargs"]["name"]
        result = {"result": f"hello, {name}", "error": None}
        channel.basic_publish(
            f"{self.prefix}.greeter.events",
            "greeted",
            json.dumps({"name": name}).encode(),
            pika.BasicProperties(delivery_mode=2, content_type="application/json"),
        )
        channel.basic_publish(
            f"{self.prefix}.{RPC_EXCHANGE}",
            props.reply_to,
            json.dumps(result).encode(),
            pika.BasicProperties(correlation_id=props.correlation_id),
        )
        channel.basic_ack(method.delivery_tag)


def call_many(url: str, prefix: str, names: list[str], timeout: float = 10) -> list[str]:
    """An RPC proxy: a reply queue bound by its own id, calls matched by correlation id."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    reply_key = f"rpc.reply-standalone_rpc_proxy-{uuid.uuid4()}"
    ch.queue_declare(reply_key, exclusive=True, auto_delete=True)
    ch.queue_bind(reply_key, f"{prefix}.{RPC_EXCHANGE}", reply_key)
    answers: dict[str, str] = {}

    def on_reply(channel: Any, method: Any, props: Any, body: bytes) -> None:
        answers[props.correlation_id] = json.loads(body)["result"]

    ch.basic_consume(reply_key, on_reply, auto_ack=True)
    for i, name in enumerate(names):
        body = json.dumps({"args": [], "kwargs": {"name": name}}).encode()
        properties = pika.BasicProperties(reply_to=reply_key, correlation_id=f"call-{i}")
        ch.basic_publish(f"{prefix}.{RPC_EXCHANGE}", "greeter.hello", body, properties)
    deadline = time.time() + timeout
    while len(answers) < len(names) and time.time() < deadline:
        conn.process_data_events(time_limit=0.05)
    conn.close()
    return [answers.get(f"call-{i}", "") for i in range(len(names))]
