"""The wire client's protocol paths that the embedded broker never takes, against a
scripted broker on a real socket (harness/scripted_pulsar.py): lookup redirects and
proxies, authentication, keepalive, hostile frames, producer receipts out of order and
send errors, bounded pending sends, flow control."""

from __future__ import annotations

import asyncio
import gc
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from harness.scripted_pulsar import BrokerSide, ScriptedBroker
from harness.waiting import async_wait_until
from pulsar_gateway.gateway.backend.wire import commands as c
from pulsar_gateway.gateway.backend.wire.auth import TokenAuthentication
from pulsar_gateway.gateway.backend.wire.batch import single_entry
from pulsar_gateway.gateway.backend.wire.client import Client
from pulsar_gateway.gateway.backend.wire.consumer import Consumer
from pulsar_gateway.gateway.backend.wire.errors import (
    ConnectionClosed,
    OperationTimeout,
    ProducerClosed,
    ServerError,
    TopicLookupError,
)
from pulsar_gateway.gateway.backend.wire.flow_window import MAX_PER_ENTRY_WINDOW
from pulsar_gateway.gateway.backend.wire.frames import (
    Frame,
    payload_frame_head,
    payload_section,
    simple_frame,
)
from pulsar_gateway.gateway.backend.wire.ids import MessageId
from pulsar_gateway.gateway.backend.wire.messages import (
    KeyValue,
    MessageIdData,
    MessageMetadata,
)

TOPIC = "persistent://public/default/t"


def run(scenario: Callable[..., Awaitable[None]], brokers: int = 1, **client: Any) -> None:
    async def main() -> None:
        started = [await ScriptedBroker().start() for _ in range(brokers)]
        clients: list[Client] = []

        def make(url: str | None = None, **options: Any) -> Client:
            made = Client(url or started[0].url, **{"operation_timeout": 3.0, **client, **options})
            clients.append(made)
            return made

        try:
            await asyncio.wait_for(scenario(make, *started), 30)
        finally:
            for made in clients:
                await made.close()
            for broker in started:
                await broker.stop()

    asyncio.run(main())


def test_lookup_follows_redirects_with_the_authoritative_flag() -> None:
    async def scenario(make, first: ScriptedBroker, second: ScriptedBroker) -> None:
        first.lookup_answer = lambda lookup: c.LookupResponse(
            second.url, None, c.LookupType.REDIRECT, lookup.request_id, authoritative=True
        )
        client = make()
        logical, physical = await client.lookup(TOPIC)
        assert logical == physical and logical.port == second.port
        [asked] = second.of_type(c.Lookup)
        assert asked.authoritative  # the redirect said so
        assert not first.of_type(c.Lookup)[0].authoritative

    run(scenario, brokers=2)


def test_lookup_gives_up_after_too_many_redirects() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        broker.lookup_answer = lambda lookup: c.LookupResponse(
            broker.url, None, c.LookupType.REDIRECT, lookup.request_id
        )
        with pytest.raises(TopicLookupError):
            await make(max_lookup_redirects=3).lookup(TOPIC)
        assert len(broker.of_type(c.Lookup)) == 4

    run(scenario)


def test_lookup_failures_and_partitioned_metadata() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        broker.lookup_answer = lambda lookup: c.LookupResponse(
            None, None, c.LookupType.FAILED, lookup.request_id, error=11, message="no topic"
        )
        client = make()
        with pytest.raises(ServerError) as failed:
            await client.lookup(TOPIC)
        assert failed.value.name == "TopicNotFound"
        assert await client.partitions(TOPIC) == 0

    run(scenario)


def test_proxy_through_service_url_keeps_the_bytes_on_the_service_url() -> None:
    async def scenario(make, proxy: ScriptedBroker) -> None:
        proxy.lookup_answer = lambda lookup: c.LookupResponse(
            "pulsar://10.9.9.9:6650",
            None,
            c.LookupType.CONNECT,
            lookup.request_id,
            proxy_through_service_url=True,
        )
        client = make()
        producer = await client.create_producer(TOPIC)
        assert await producer.send(single_entry(b"x")) == MessageId(1, 0)
        connects = proxy.of_type(c.Connect)
        assert [x.proxy_to_broker_url for x in connects] == [None, "10.9.9.9:6650"]

    run(scenario)


def test_connect_carries_the_token_read_at_each_connect_and_refreshes_on_challenge() -> None:
    tokens = iter(["t1", "t2", "t3"])

    async def scenario(make, broker: ScriptedBroker) -> None:
        client = make(authentication=TokenAuthentication(lambda: next(tokens)))
        connection = await client.service_connection()
        [connect] = broker.of_type(c.Connect)
        assert (connect.auth_method_name, connect.auth_data) == ("token", b"t1")
        assert connect.feature_flags.supports_auth_refresh
        broker.connections[0].send(c.AuthChallenge("scripted", c.AuthData("refresh", b"")))
        await async_wait_until(lambda: broker.of_type(c.AuthResponse), 5, message="AUTH_RESPONSE")
        [response] = broker.of_type(c.AuthResponse)
        assert response.response == c.AuthData("token", b"t2")
        connection.close()
        await client.service_connection()
        assert broker.of_type(c.Connect)[1].auth_data == b"t3"

    run(scenario)


def test_a_refused_connect_is_a_server_error() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        def refuse(side: BrokerSide, frame: Frame) -> bool:
            if isinstance(frame.command, c.Connect):
                side.send(c.Error(0, 3, "bad token"))
                return True
            return False

        broker.handlers.append(refuse)
        with pytest.raises(ServerError) as refused:
            await make().service_connection()
        assert refused.value.name == "AuthenticationError"

    run(scenario)


def test_a_stalled_broker_is_detected_and_pings_are_answered() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        client = make(keepalive_interval=0.3, keepalive_timeout=0.5, operation_timeout=30)
        connection = await client.service_connection()
        broker.connections[0].send(c.Ping())
        await async_wait_until(lambda: broker.of_type(c.Pong), 5, message="our PONG")
        broker.silent = True
        pending = asyncio.ensure_future(
            connection.request(c.PartitionedMetadata(TOPIC, connection.new_request_id()))
        )
        started = asyncio.get_running_loop().time()
        with pytest.raises(ConnectionClosed, match="keepalive"):
            await pending
        assert asyncio.get_running_loop().time() - started < 3
        assert broker.of_type(c.Ping)  # it asked before giving up

    run(scenario)


@pytest.mark.parametrize("hostile", ["oversized", "bad checksum", "garbage"])
def test_hostile_frames_close_the_connection_and_fail_what_waits(hostile, caplog) -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        client = make()
        connection = await client.service_connection()
        broker.silent = True  # the request waits; the hostile frame comes instead
        waiting = asyncio.ensure_future(
            connection.request(c.PartitionedMetadata(TOPIC, connection.new_request_id()))
        )
        await asyncio.sleep(0.05)
        side = broker.connections[0]
        if hostile == "oversized":
            side.send_raw(struct.pack(">I", 64 << 20) + b"\x00" * 100)
        elif hostile == "bad checksum":
            section = bytearray(payload_section(MessageMetadata("p", 1, 1).encode(), b"data"))
            section[-1] ^= 1
            command = c.Message(1, MessageIdData(1, 1))
            side.send_raw(payload_frame_head(command, len(section)) + bytes(section))
        else:
            side.send_raw(struct.pack(">II", 6, 2) + b"\xff\xff")
        with pytest.raises(ConnectionClosed):
            await waiting
        assert connection.closed

    with caplog.at_level(logging.WARNING, "gateway.pulsar.wire"):
        run(scenario)
    assert "closing the connection to" in caplog.text


def _hold_receipts(broker: ScriptedBroker) -> list[tuple[BrokerSide, c.Send]]:
    held: list[tuple[BrokerSide, c.Send]] = []

    def hold(side: BrokerSide, frame: Frame) -> bool:
        if isinstance(frame.command, c.Send):
            held.append((side, frame.command))
            return True
        return False

    broker.handlers.append(hold)
    return held


def test_receipts_are_matched_in_order_and_a_mismatch_resends_everything() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        held = _hold_receipts(broker)
        producer = await make().create_producer(TOPIC, name="ordered", properties={"role": "kafka"})
        futures = [await producer.enqueue(single_entry(b"%d" % i)) for i in range(3)]
        await async_wait_until(lambda: len(held) == 3, 5, message="three sends")
        side, first = held[0]
        side.send(c.SendReceipt(first.producer_id, first.sequence_id, MessageIdData(5, 0)))
        assert await futures[0] == MessageId(5, 0)
        side, third = held[2]  # the third's receipt before the second's: out of order
        side.send(c.SendReceipt(third.producer_id, third.sequence_id, MessageIdData(5, 2)))
        # the producer registers again, epoch 1, and sends 1 and 2 again in order
        await async_wait_until(lambda: len(held) == 5, 5, message="the resends")
        producers = broker.of_type(c.Producer)
        assert [p.epoch for p in producers] == [0, 1]
        assert producers[1].producer_name == "ordered"
        assert producers[0].metadata == [KeyValue("role", "kafka")] == producers[1].metadata
        assert [s.sequence_id for _, s in held[3:]] == [1, 2]
        assert all(s.producer_id == producers[1].producer_id for _, s in held[3:])
        assert producer.resent == 2
        for entry, (side, send) in enumerate(held[3:], start=1):
            side.send(c.SendReceipt(send.producer_id, send.sequence_id, MessageIdData(5, entry)))
        assert [await f for f in futures[1:]] == [MessageId(5, 1), MessageId(5, 2)]

    run(scenario)


def test_send_errors_resend_or_fail() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        held = _hold_receipts(broker)
        producer = await make().create_producer(TOPIC)
        first = await producer.enqueue(single_entry(b"a"))
        await async_wait_until(lambda: held, 5, message="a send")
        side, send = held[0]
        side.send(c.SendError(send.producer_id, send.sequence_id, 2, "disk full"))
        await async_wait_until(lambda: len(held) == 2, 5, message="the resend")
        side, send = held[1]
        side.send(c.SendReceipt(send.producer_id, send.sequence_id, MessageIdData(1, 1)))
        assert await first == MessageId(1, 1)
        second = await producer.enqueue(single_entry(b"b"))
        third = await producer.enqueue(single_entry(b"c"))
        await async_wait_until(lambda: len(held) == 4, 5, message="two sends")
        side, send = held[2]
        side.send(c.SendError(send.producer_id, send.sequence_id, 15, "terminated"))
        for future in (second, third):  # fatal: everything pending fails
            with pytest.raises(ServerError, match="TopicTerminatedError"):
                await future

    run(scenario)


def test_a_failed_receipt_nobody_awaits_is_not_logged_as_lost() -> None:
    """A send whose sender went away (its request timed out, its client left) fails: the
    writer deals with the failure, and asyncio must not log the receipt's error as never
    retrieved (a test run's gateway-log check fails on such a line)."""
    reported: list[dict] = []

    async def scenario(make, broker: ScriptedBroker) -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        held = _hold_receipts(broker)
        producer = await make().create_producer(TOPIC)
        await producer.enqueue(single_entry(b"a"))  # the receipt's future, dropped
        await async_wait_until(lambda: held, 5, message="a send")
        side, send = held[0]
        side.send(c.SendError(send.producer_id, send.sequence_id, 15, "terminated"))
        await async_wait_until(lambda: producer.pending == 0, 5, message="the failure")
        gc.collect()

    run(scenario)
    assert not [ctx for ctx in reported if "never retrieved" in ctx.get("message", "")]


def test_pending_sends_are_bounded_by_count_and_bytes_and_time_out() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        held = _hold_receipts(broker)
        client = make()
        producer = await client.create_producer(
            TOPIC, max_pending_messages=2, max_pending_bytes=10_000, send_timeout=1.0
        )
        receipts = [await producer.enqueue(single_entry(b"%d" % i)) for i in (1, 2)]
        third = asyncio.ensure_future(producer.enqueue(single_entry(b"3")))
        await asyncio.sleep(0.2)
        assert not third.done() and producer.pending == 2  # waits for room
        side, send = held[0]
        side.send(c.SendReceipt(send.producer_id, send.sequence_id, MessageIdData(1, 0)))
        receipt3 = await asyncio.wait_for(third, 5)
        big = await client.create_producer(TOPIC, max_pending_bytes=10_000, send_timeout=None)
        receipts.append(await big.enqueue(single_entry(b"x" * 6000)))
        fourth = asyncio.ensure_future(big.enqueue(single_entry(b"y" * 6000)))
        await asyncio.sleep(0.2)
        assert not fourth.done() and big.pending_bytes > 6000  # bytes bound
        fourth.cancel()
        assert await receipts[0] == MessageId(1, 0)
        # no receipt within the send timeout: everything pending fails
        for receipt in (receipts[1], receipt3):
            with pytest.raises(OperationTimeout):
                await receipt
        await big.close(timeout=0.1)
        with pytest.raises(ProducerClosed):
            await receipts[2]

    run(scenario)


def test_permits_follow_what_the_application_takes() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        client = make()
        consumer = await client.subscribe(TOPIC, "s", receiver_queue_size=10, max_queue_bytes=600)
        await async_wait_until(lambda: broker.of_type(c.Flow), 5, message="the first FLOW")
        assert broker.of_type(c.Flow)[0].message_permits == 10
        side = broker.connections[-1]
        consumer_id = broker.of_type(c.Subscribe)[0].consumer_id
        metadata = MessageMetadata("p", 1, 1).encode()
        for entry in range(10):
            section = payload_section(metadata, b"x" * 150)  # 1500 bytes in all
            command = c.Message(consumer_id, MessageIdData(1, entry))
            side.send_raw(payload_frame_head(command, len(section)) + section)
        await async_wait_until(lambda: consumer.queued == 10, 5, message="ten entries")
        for _ in range(6):
            await consumer.receive(1)
        await asyncio.sleep(0.1)
        # six taken (over half a queue), but the four queued hold 600 bytes, not below the
        # bound: no permits yet
        assert len(broker.of_type(c.Flow)) == 1
        assert consumer.queued_bytes == 600
        await consumer.receive(1)  # 450 bytes left: the seven taken go back as permits
        await async_wait_until(lambda: len(broker.of_type(c.Flow)) == 2, 5, message="FLOW")
        assert broker.of_type(c.Flow)[1].message_permits == 7

    run(scenario)


def test_a_reader_drops_replays_and_what_comes_before_its_start() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        client = make()
        reader = await client.create_reader(TOPIC, MessageId(1, 3), inclusive=True)
        [subscribe] = broker.of_type(c.Subscribe)
        assert not subscribe.durable
        assert subscribe.start_message_id == MessageIdData(1, 3, batch_index=0)
        side = broker.connections[-1]
        metadata = MessageMetadata("p", 1, 1).encode()
        for entry in (2, 3, 4, 3, 4, 5):  # one before the start, then replays
            section = payload_section(metadata, b"%d" % entry)
            command = c.Message(subscribe.consumer_id, MessageIdData(1, entry))
            side.send_raw(payload_frame_head(command, len(section)) + section)
        got = [(await reader.receive(2)).id.entry_id for _ in range(3)]
        assert got == [3, 4, 5]
        assert reader.replays_dropped == 3

    run(scenario)


def test_a_closed_consumer_is_resubscribed_after_its_last_entry() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        client = make()
        reader = await client.create_reader(TOPIC, MessageId(-1, -1))
        [subscribe] = broker.of_type(c.Subscribe)
        side = broker.connections[-1]
        section = payload_section(MessageMetadata("p", 1, 1).encode(), b"x")
        command = c.Message(subscribe.consumer_id, MessageIdData(7, 7))
        side.send_raw(payload_frame_head(command, len(section)) + section)
        assert (await reader.receive(2)).id == MessageId(7, 7)
        side.send(c.CloseConsumer(subscribe.consumer_id, 0))
        await async_wait_until(lambda: len(broker.of_type(c.Subscribe)) == 2, 5, message="again")
        again = broker.of_type(c.Subscribe)[1]
        assert again.start_message_id == MessageIdData(7, 7)  # after the last handed out
        assert again.consumer_id != subscribe.consumer_id
        side.send_raw(simple_frame(c.Ping()))

    run(scenario)


@pytest.mark.parametrize(("server", "granted"), [("Pulsar-Lite-0.1.0", 4), ("Apache Pulsar", 20)])
def test_permits_count_messages_or_entries_as_the_broker_does(server, granted) -> None:
    """Pulsar takes a permit per message, pulsar-lite one per entry: granting a batched
    entry's messages back to pulsar-lite would let it run ahead without bound."""

    async def scenario(make, broker: ScriptedBroker) -> None:
        def connected(side: BrokerSide, frame: Frame) -> bool:
            if isinstance(frame.command, c.Connect):
                side.send(c.Connected(server, 19))
                return True
            return False

        broker.handlers.append(connected)
        consumer = await make().subscribe(TOPIC, "s", receiver_queue_size=8)
        [subscribe] = broker.of_type(c.Subscribe)
        batch = MessageMetadata("p", 1, 1, num_messages_in_batch=5).encode()
        side = broker.connections[-1]
        for entry in range(4):
            section = payload_section(batch, b"")  # (an empty batch: only counts matter)
            command = c.Message(subscribe.consumer_id, MessageIdData(1, entry))
            side.send_raw(payload_frame_head(command, len(section)) + section)
        for _ in range(4):
            await consumer.receive(2)
        # the permits may cross the socket as more than one FLOW: wait for them all
        await async_wait_until(
            lambda: sum(flow.message_permits for flow in broker.of_type(c.Flow)[1:]) >= granted,
            5,
            message="FLOW",
        )
        assert sum(flow.message_permits for flow in broker.of_type(c.Flow)[1:]) == granted

    run(scenario)


async def _pulsar_lite_window_reader(
    make: Callable[..., Client], broker: ScriptedBroker
) -> tuple[Consumer, c.Subscribe, BrokerSide]:
    """A reader with a window sized by bytes (10,000, at least 4 entries), connected to a
    scripted broker that names itself pulsar-lite (permits per entry): the reader, its
    SUBSCRIBE and the broker's side of the connection."""

    def connected(side: BrokerSide, frame: Frame) -> bool:
        if isinstance(frame.command, c.Connect):
            side.send(c.Connected("Pulsar-Lite-0.1.0", 19))
            return True
        return False

    broker.handlers.append(connected)
    reader = await make().create_reader(
        TOPIC, MessageId(-1, -1), per_entry_window=4, window_bytes=10_000
    )
    [subscribe] = broker.of_type(c.Subscribe)
    return reader, subscribe, broker.connections[-1]


def test_a_window_sized_by_bytes_asks_for_many_small_entries_and_few_large_ones() -> None:
    """`window_bytes` (history reads): against pulsar-lite (a permit per entry) the
    window is as many entries as the bytes hold of the size last seen, at least
    `per_entry_window`, at most MAX_PER_ENTRY_WINDOW; permits in flight follow it down
    as well as up: none is given while more are in flight than the window allows."""

    async def scenario(make, broker: ScriptedBroker) -> None:
        reader, subscribe, side = await _pulsar_lite_window_reader(make, broker)
        metadata = MessageMetadata("p", 1, 1).encode()

        def granted() -> int:
            return sum(flow.message_permits for flow in broker.of_type(c.Flow))

        def send(entry: int, size: int) -> None:
            section = payload_section(metadata, b"x" * size)
            command = c.Message(subscribe.consumer_id, MessageIdData(1, entry))
            side.send_raw(payload_frame_head(command, len(section)) + section)

        await async_wait_until(lambda: granted() == 4, 5, message="the first FLOW")
        send(0, 200)  # 50 entries of 200 bytes in 10,000: 46 more permits at once
        await async_wait_until(lambda: granted() == 50, 5, message="a wider window")
        for entry in range(1, 50):
            send(entry, 10)  # entries this small: as many as MAX_PER_ENTRY_WINDOW
        await async_wait_until(lambda: reader.queued == 50, 5, message="fifty entries")
        # the FLOW the small entries earn crosses a socket to the scripted broker: wait for
        # it there (asserting at once failed under a busy loop per core)
        await async_wait_until(
            lambda: granted() >= MAX_PER_ENTRY_WINDOW, 5, message="the widest window"
        )
        assert granted() == 50 + MAX_PER_ENTRY_WINDOW - 50
        send(50, 5_000)  # large ones: back to the least window, in flight included
        await async_wait_until(lambda: reader.queued == 51, 5, message="a large entry")
        for _ in range(51):
            await reader.receive(2)
        await asyncio.sleep(0.1)
        # all taken, yet no permit given back: the 49 granted for small entries and not
        # used yet exceed the least window (a broker cannot be asked to forget permits)
        assert granted() == MAX_PER_ENTRY_WINDOW
        for entry in range(51, 98):
            send(entry, 5_000)  # used down to half the least window: permits again
        for _ in range(51, 98):
            await reader.receive(2)
        await async_wait_until(lambda: granted() > MAX_PER_ENTRY_WINDOW, 5, message="FLOW")
        assert granted() - 98 == 4  # in flight: the least window

    run(scenario)


def test_a_reader_owing_permits_back_still_asks_pulsar_lite_every_half_window() -> None:
    """pulsar-lite dispatches at most 20 entries per FLOW it gets, and stops early when it
    must read from disk: it goes on only at the next FLOW, whatever permits it holds.
    After a window sized by bytes shrinks (a small entry, then large ones) the reader owes
    the broker the permits granted for the wider window; it still sends a FLOW (of no
    permits) every half window it takes, and a nudge never carries a negative count (a
    uint64 on the wire: 2**64 less the debt). Issue 32: a cold history read waited out
    the 50 ms nudge every 20-30 entries."""

    async def scenario(make, broker: ScriptedBroker) -> None:
        reader, subscribe, side = await _pulsar_lite_window_reader(make, broker)
        metadata = MessageMetadata("p", 1, 1).encode()

        def send(entry: int, size: int) -> None:
            section = payload_section(metadata, b"x" * size)
            command = c.Message(subscribe.consumer_id, MessageIdData(1, entry))
            side.send_raw(payload_frame_head(command, len(section)) + section)

        def flows() -> list[int]:
            return [flow.message_permits for flow in broker.of_type(c.Flow)]

        await async_wait_until(lambda: sum(flows()) == 4, 5, message="the first FLOW")
        send(0, 200)  # a small entry first: a window of 50, 46 more permits
        await async_wait_until(lambda: sum(flows()) == 50, 5, message="a wider window")
        before = len(flows())
        for entry in range(1, 11):
            send(entry, 5_000)  # then large ones: a window of 4, 46 permits owed back
        await async_wait_until(lambda: reader.queued == 11, 5, message="eleven entries")
        for _ in range(11):
            await reader.receive(2)
        # every other entry taken (half the window of 4) asked the broker again
        await async_wait_until(lambda: len(flows()) >= before + 5, 5, message="FLOWs")
        assert sum(flows()) == 50  # none of them granted more
        # nothing queued, nothing sent: the nudges go, none with a negative count
        with pytest.raises(TimeoutError):
            await reader.receive(0.3)
        assert reader.nudges >= 1
        assert all(0 <= permits < 2**32 for permits in flows())
        assert sum(flows()) == 50

    run(scenario)


def test_a_broker_sending_past_its_permits_loses_the_connection() -> None:
    async def scenario(make, broker: ScriptedBroker) -> None:
        client = make()
        consumer = await client.subscribe(TOPIC, "s", receiver_queue_size=4, max_queue_bytes=1000)
        [subscribe] = broker.of_type(c.Subscribe)
        side = broker.connections[-1]
        metadata = MessageMetadata("p", 1, 1).encode()
        for entry in range(50):  # four permits, fifty entries of 200 bytes
            section = payload_section(metadata, b"x" * 200)
            command = c.Message(subscribe.consumer_id, MessageIdData(1, entry))
            side.send_raw(payload_frame_head(command, len(section)) + section)
        await async_wait_until(lambda: len(broker.of_type(c.Subscribe)) == 2, 5, message="again")
        assert consumer.queued_bytes <= 2000

    run(scenario)


def test_a_broker_closing_the_producer_gets_the_pending_sends_again() -> None:
    """CLOSE_PRODUCER (a topic moving, a broker unloading): the producer looks the topic up
    again, registers anew and resends what has no receipt, in order, same sequence ids."""

    async def scenario(make, broker: ScriptedBroker) -> None:
        held = _hold_receipts(broker)
        producer = await make().create_producer(TOPIC)
        futures = [await producer.enqueue(single_entry(b"%d" % i)) for i in range(2)]
        await async_wait_until(lambda: len(held) == 2, 5, message="two sends")
        side, first = held[0]
        side.send(c.CloseProducer(first.producer_id, 0))
        await async_wait_until(lambda: len(held) == 4, 5, message="the resends")
        assert len(broker.of_type(c.Lookup)) == 2
        assert [(s.sequence_id, s.producer_id != first.producer_id) for _, s in held[2:]] == [
            (0, True),
            (1, True),
        ]
        for entry, (side, send) in enumerate(held[2:]):
            side.send(c.SendReceipt(send.producer_id, send.sequence_id, MessageIdData(2, entry)))
        assert [await f for f in futures] == [MessageId(2, 0), MessageId(2, 1)]
        assert producer.reconnects == 1 and producer.epoch == 1

    run(scenario)
