"""aio-pika and aiormq (pamqp frames) against the gateway: RPC, confirms, qos, tx, nack."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import aiormq
import pytest

from harness.gateway_process import GatewayProcess


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_aio_pika_rpc_round_trip_with_reply_queue(gateway: GatewayProcess) -> None:
    async def scenario() -> None:
        connection = await aio_pika.connect_robust(gateway.amqp_url)
        async with connection:
            server_channel = await connection.channel()
            await server_channel.set_qos(prefetch_count=10)
            requests = await server_channel.declare_queue(f"rpc-{uuid.uuid4().hex[:8]}")

            async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    await server_channel.default_exchange.publish(
                        aio_pika.Message(
                            body=message.body.upper(), correlation_id=message.correlation_id
                        ),
                        routing_key=message.reply_to,
                    )

            await requests.consume(serve)
            client_channel = await connection.channel()
            replies = await client_channel.declare_queue(exclusive=True)
            futures: dict[str, asyncio.Future[bytes]] = {}

            async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                futures.pop(message.correlation_id).set_result(message.body)

            await replies.consume(on_reply, no_ack=True)
            loop = asyncio.get_running_loop()
            pending = []
            for i in range(50):
                cid = str(i)
                futures[cid] = loop.create_future()
                pending.append(futures[cid])
                await client_channel.default_exchange.publish(
                    aio_pika.Message(f"req{i}".encode(), correlation_id=cid, reply_to=replies.name),
                    routing_key=requests.name,
                )
            results = await asyncio.gather(*pending)
            assert sorted(results) == sorted(f"REQ{i}".encode() for i in range(50))
            await requests.delete(if_unused=False)

    _run(scenario())


def test_aio_pika_confirms_pipelined_and_nack_requeue(gateway: GatewayProcess) -> None:
    async def scenario() -> None:
        connection = await aio_pika.connect(gateway.amqp_url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            exchange = await channel.declare_exchange("aio-topic", aio_pika.ExchangeType.TOPIC)
            queue = await channel.declare_queue(exclusive=True)
            await queue.bind(exchange, "a.#")
            results = await asyncio.gather(
                *(
                    exchange.publish(aio_pika.Message(str(i).encode()), routing_key="a.b")
                    for i in range(500)
                )
            )
            assert len(results) == 500
            with pytest.raises(aiormq.exceptions.PublishError):
                await exchange.publish(
                    aio_pika.Message(b"nowhere"), routing_key="z", mandatory=True
                )
            declared = await channel.declare_queue(queue.name, passive=True)
            assert declared.declaration_result.message_count == 500
            first = await queue.get(timeout=5)
            assert first.body == b"0" and not first.redelivered
            await first.nack(requeue=True)
            again = await queue.get(timeout=5)
            assert again.body == b"0" and again.redelivered
            await again.ack()
            bodies = []
            async with queue.iterator() as it:
                async for message in it:
                    bodies.append(message.body)
                    await message.ack()
                    if len(bodies) == 499:
                        break
            assert bodies == [str(i).encode() for i in range(1, 500)]
            await exchange.delete()

    _run(scenario())


def test_aiormq_tx_and_basic_get(gateway: GatewayProcess) -> None:
    async def scenario() -> None:
        connection = await aiormq.connect(gateway.amqp_url)
        try:
            channel = await connection.channel(publisher_confirms=False)
            declared = await channel.queue_declare(exclusive=True)
            name = declared.queue
            await channel.tx_select()
            await channel.basic_publish(b"one", routing_key=name)
            await channel.basic_publish(b"two", routing_key=name)
            empty = await channel.basic_get(name)
            assert isinstance(empty.delivery, aiormq.spec.Basic.GetEmpty)
            await channel.tx_commit()
            got = await channel.basic_get(name, no_ack=True)
            assert got.body == b"one"
            assert got.delivery.message_count == 1
            second = await channel.basic_get(name)
            assert second.body == b"two"
            await channel.basic_reject(second.delivery.delivery_tag, requeue=True)
            await channel.tx_commit()
            again = await channel.basic_get(name)
            assert again.body == b"two" and again.delivery.redelivered
            with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed):
                await channel.rpc(aiormq.spec.Confirm.Select())
        finally:
            await connection.close()

    _run(scenario())
