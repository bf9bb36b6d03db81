"""Small real applications, each run against RabbitMQ 3.10 and against the gateway: what
they observe must be the same (issue 36). Written as their frameworks use AMQP: aio-pika
for an RPC client and server over direct reply-to, Celery with retries, countdowns and a
worker killed on the way, and a nameko-style service (RPC plus events) on pika.

One RabbitMQ node and one gateway serve the whole module.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import aio_pika
import pytest

from harness.gateway_process import GatewayProcess
from harness.nameko_style import Service, call_many
from harness.rabbitmq_process import RabbitMQProcess
from harness.task_run import run_in_process
from harness.waiting import wait_until

REPLY_TO = "amq.rabbitmq.reply-to"


@pytest.fixture(scope="module")
def rabbitmq(reference_rabbitmq: RabbitMQProcess) -> RabbitMQProcess:
    return reference_rabbitmq


@pytest.fixture(scope="module", params=["rabbitmq", "gateway"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "rabbitmq":
        return request.getfixturevalue("rabbitmq").url
    gateway: GatewayProcess = request.getfixturevalue("gateway")
    return gateway.amqp_url


async def _rpc_round_trip(url: str, calls: int) -> list[str]:
    """An aio-pika RPC server squaring numbers, and a client that sends `calls` requests at
    once over direct reply-to and matches the replies by correlation id."""
    name = f"rpc-{uuid.uuid4().hex[:8]}"
    server = await aio_pika.connect(url)
    client = await aio_pika.connect(url)
    try:
        server_channel = await server.channel()
        queue = await server_channel.declare_queue(name, auto_delete=True)

        async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                number = int(message.body)
                reply = aio_pika.Message(
                    str(number * number).encode(), correlation_id=message.correlation_id
                )
                assert message.reply_to and message.reply_to.startswith(REPLY_TO + ".")
                await server_channel.default_exchange.publish(reply, message.reply_to)

        await queue.consume(serve)
        channel = await client.channel()
        replies = await channel.get_queue(REPLY_TO, ensure=False)
        pending: dict[str, asyncio.Future[str]] = {}

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            future = pending.pop(message.correlation_id or "", None)
            if future is not None:
                future.set_result(message.body.decode())

        await replies.consume(on_reply, no_ack=True)
        loop = asyncio.get_running_loop()
        for i in range(calls):
            pending[f"c{i}"] = loop.create_future()
        waiting = [pending[f"c{i}"] for i in range(calls)]
        for i in range(calls):
            request = aio_pika.Message(str(i).encode(), correlation_id=f"c{i}", reply_to=REPLY_TO)
            await channel.default_exchange.publish(request, name)
        return list(await asyncio.wait_for(asyncio.gather(*waiting), 10))
    finally:
        await client.close()
        await server.close()


def test_rpc_round_trip_over_direct_reply_to(url: str) -> None:
    answers = asyncio.run(_rpc_round_trip(url, 50))
    assert answers == [str(i * i) for i in range(50)]


def test_a_task_framework_with_retries_and_delays_survives_a_killed_worker(
    url: str, tmp_path: Path
) -> None:
    """Celery with late acks: 90 tasks, a third failing once and retried after a countdown,
    a fifth sent with a countdown, two workers of which one is killed -9 a third of the way:
    every task is done, with the right result, on both brokers."""
    celery_url = url.replace("%2F", "").rstrip("/") + "//"
    queue = f"tasks-{uuid.uuid4().hex[:8]}"
    run = run_in_process(celery_url, queue, 90, tmp_path, kill_after=30)
    assert run.killed_worker
    assert (run.done, run.correct) == (90, 90)


def test_a_nameko_style_service_answers_calls_and_its_listeners_get_each_event(
    url: str,
) -> None:
    prefix = f"nk-{uuid.uuid4().hex[:8]}"
    service = Service(url, prefix)
    service.start()
    assert service.ready.wait(10) and service.error is None, service.error
    names = [f"n{i}" for i in range(25)]
    try:
        assert call_many(url, prefix, names) == [f"hello, {name}" for name in names]
        wait_until(
            lambda: all(len(e) >= len(names) for e in service.events.values()),
            10,
            message="every listener's events",
        )
    finally:
        service.stopping.set()
        service.join(10)
    assert service.events == {"audit": names, "mailer": names}
