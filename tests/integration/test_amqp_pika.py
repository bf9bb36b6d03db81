"""RabbitMQ semantics through the gateway, driven by pika (the most used Python client)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from harness.gateway_process import GatewayProcess
from harness.pika_waits import pump_until, round_trip
from harness.waiting import wait_until


@pytest.fixture
def conn(gateway: GatewayProcess) -> Iterator[pika.BlockingConnection]:
    connection = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    yield connection
    if connection.is_open:
        connection.close()


@pytest.fixture
def name() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


def _declare_refused(conn, queue: str) -> int | None:
    """The reply code refusing a passive queue.declare on a fresh channel, None if it passes."""
    ch = conn.channel()
    try:
        ch.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as error:
        return error.reply_code
    ch.close()
    return None


def _queue_exists(conn, queue: str) -> bool:
    """Whether `queue` exists, asked with a queue.bind (404 when it is gone): a bind is not a
    use of the queue, where a passive declare is and would hold off x-expires."""
    ch = conn.channel()
    try:
        ch.queue_bind(queue, "amq.direct", routing_key="existence-probe")
    except pika.exceptions.ChannelClosedByBroker as error:
        assert error.reply_code == 404, error
        return False
    ch.close()
    return True


def _drain(ch, queue: str, expected: int, timeout: float = 10) -> list[tuple]:
    """basic.get until `expected` messages came (or timeout)."""
    out = []
    deadline = time.time() + timeout
    while len(out) < expected and time.time() < deadline:
        method, props, body = ch.basic_get(queue)
        if method is None:
            time.sleep(0.05)
            continue
        out.append((method, props, body))
    return out


def test_publish_get_consume_properties_and_counts(conn, name) -> None:
    ch = conn.channel()
    ok = ch.queue_declare(name, durable=True)
    assert ok.method.queue == name and ok.method.message_count == 0
    ch.confirm_delivery()
    props = pika.BasicProperties(
        content_type="text/plain",
        delivery_mode=2,
        headers={"n": 1, "s": "x", "l": [1, "a"]},
        correlation_id="c1",
        reply_to="r",
        message_id="m1",
        priority=3,
    )
    for i in range(10):
        ch.basic_publish("", name, f"m{i}".encode(), props)
    assert ch.queue_declare(name, passive=True).method.message_count == 10
    method, got, body = ch.basic_get(name)
    assert body == b"m0" and not method.redelivered and method.message_count == 9
    assert got.headers == {"n": 1, "s": "x", "l": [1, "a"]}
    assert (got.content_type, got.correlation_id, got.reply_to, got.priority) == (
        "text/plain",
        "c1",
        "r",
        3,
    )
    ch.basic_ack(method.delivery_tag)
    bodies = []

    def on_message(c, m, p, b) -> None:
        bodies.append(b)
        c.basic_ack(m.delivery_tag)
        if len(bodies) == 9:
            c.stop_consuming()

    ch.basic_consume(name, on_message)
    ch.start_consuming()
    assert bodies == [f"m{i}".encode() for i in range(1, 10)]
    assert ch.queue_declare(name, passive=True).method.message_count == 0
    assert ch.basic_get(name) == (None, None, None)
    ch.queue_delete(name)


def test_exchanges_route_direct_fanout_topic_headers(conn, name) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    for kind in ("direct", "fanout", "topic", "headers"):
        ch.exchange_declare(f"{name}-{kind}", kind)
    queues = {k: ch.queue_declare(f"{name}-{k}", exclusive=True).method.queue for k in "abcd"}
    ch.queue_bind(queues["a"], f"{name}-direct", "k1")
    ch.queue_bind(queues["b"], f"{name}-fanout")
    ch.queue_bind(queues["c"], f"{name}-topic", "a.*.#")
    ch.queue_bind(queues["d"], f"{name}-headers", arguments={"x-match": "any", "h": 1})
    ch.exchange_bind(f"{name}-fanout", f"{name}-direct", "k2")  # e2e
    ch.basic_publish(f"{name}-direct", "k1", b"d1")
    ch.basic_publish(f"{name}-direct", "k2", b"d2")  # -> fanout -> b
    ch.basic_publish(f"{name}-topic", "a.b.c.d", b"t1")
    ch.basic_publish(f"{name}-topic", "b.a", b"t2")  # unroutable
    ch.basic_publish(f"{name}-headers", "", b"h1", pika.BasicProperties(headers={"h": 1}))
    ch.basic_publish(f"{name}-headers", "", b"h2", pika.BasicProperties(headers={"h": 2}))
    assert [b for _, _, b in _drain(ch, queues["a"], 1)] == [b"d1"]
    assert [b for _, _, b in _drain(ch, queues["b"], 1)] == [b"d2"]
    assert [b for _, _, b in _drain(ch, queues["c"], 1)] == [b"t1"]
    assert [b for _, _, b in _drain(ch, queues["d"], 1)] == [b"h1"]
    for q in queues.values():
        assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.queue_unbind(queues["a"], f"{name}-direct", "k1")
    ch.basic_publish(f"{name}-direct", "k1", b"gone")
    assert ch.basic_get(queues["a"]) == (None, None, None)
    for kind in ("direct", "fanout", "topic", "headers"):
        ch.exchange_delete(f"{name}-{kind}")


def test_mandatory_unroutable_is_returned_then_confirmed(conn, name) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("amq.direct", name, b"x", mandatory=True)
    ch.basic_publish("amq.direct", name, b"x")  # not mandatory: dropped, still confirmed


def test_nack_requeue_sets_redelivered_and_reject_dead_letters(conn, name) -> None:
    ch = conn.channel()
    ch.exchange_declare(f"{name}-dlx", "fanout")
    dead = ch.queue_declare(f"{name}-dead", exclusive=True).method.queue
    ch.queue_bind(dead, f"{name}-dlx")
    ch.queue_declare(name, exclusive=True, arguments={"x-dead-letter-exchange": f"{name}-dlx"})
    ch.confirm_delivery()
    ch.basic_publish("", name, b"a")
    ch.basic_publish("", name, b"b")
    first = _drain(ch, name, 2)
    assert [b for _, _, b in first] == [b"a", b"b"]
    ch.basic_nack(first[-1][0].delivery_tag, multiple=True, requeue=True)
    again = _drain(ch, name, 2)
    assert [(b, m.redelivered) for m, _, b in again] == [(b"a", True), (b"b", True)]
    ch.basic_reject(again[0][0].delivery_tag, requeue=False)
    ch.basic_ack(again[1][0].delivery_tag)
    dead_letters = _drain(ch, dead, 1)
    assert dead_letters[0][2] == b"a"
    death = dead_letters[0][1].headers["x-death"][0]
    assert death["reason"] == "rejected" and death["queue"] == name
    ch.exchange_delete(f"{name}-dlx")


def test_prefetch_bounds_unacked_and_recover_redelivers(conn, name) -> None:
    ch = conn.channel()
    ch.queue_declare(name, exclusive=True)
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", name, str(i).encode())
    ch.basic_qos(prefetch_count=3)
    seen: list[tuple[int, bytes, bool]] = []
    ch.basic_consume(name, lambda c, m, p, b: seen.append((m.delivery_tag, b, m.redelivered)))
    pump_until(conn, lambda: len(seen) >= 3, "the first three deliveries")
    round_trip(conn)
    assert [b for _, b, _ in seen] == [b"0", b"1", b"2"]
    ch.basic_ack(seen[0][0])
    pump_until(conn, lambda: len(seen) >= 4, "a delivery after the ack")
    round_trip(conn)
    assert [b for _, b, _ in seen] == [b"0", b"1", b"2", b"3"]
    ch.basic_recover(requeue=True)
    pump_until(conn, lambda: len(seen) >= 7, "the recovered deliveries")
    round_trip(conn)
    assert [(b, r) for _, b, r in seen[4:]] == [(b"1", True), (b"2", True), (b"3", True)]


def test_global_qos_is_per_channel(conn, name) -> None:
    ch = conn.channel()
    q1 = ch.queue_declare(f"{name}-1", exclusive=True).method.queue
    q2 = ch.queue_declare(f"{name}-2", exclusive=True).method.queue
    ch.confirm_delivery()
    for _ in range(5):
        ch.basic_publish("", q1, b"x")
        ch.basic_publish("", q2, b"y")
    ch.basic_qos(prefetch_count=4, global_qos=True)
    seen: list[bytes] = []
    ch.basic_consume(q1, lambda c, m, p, b: seen.append(b))
    ch.basic_consume(q2, lambda c, m, p, b: seen.append(b))
    pump_until(conn, lambda: len(seen) >= 4, "four deliveries")
    round_trip(conn)
    assert len(seen) == 4


def test_exclusive_consumer_and_cancel_notification_on_delete(gateway, conn, name) -> None:
    ch = conn.channel()
    ch.queue_declare(name)
    ch.basic_consume(name, lambda *a: None, exclusive=True)
    other = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        och = other.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            och.basic_consume(name, lambda *a: None)
            pump_until(other, lambda: not och.is_open, "the second consumer to be refused")
        assert info.value.reply_code == 403
        och = other.channel()
        och.queue_delete(name)
    finally:
        other.close()
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame))
    pump_until(conn, lambda: cancelled, "basic.cancel for the deleted queue's consumer")


def test_tx_commit_and_rollback(conn, name) -> None:
    ch = conn.channel()
    ch.queue_declare(name, exclusive=True)
    ch.tx_select()
    ch.basic_publish("", name, b"rolled-back")
    ch.tx_rollback()
    ch.basic_publish("", name, b"committed")
    assert ch.queue_declare(name, passive=True).method.message_count == 0
    ch.tx_commit()
    method, _, body = _drain(ch, name, 1)[0]
    assert body == b"committed"
    ch.basic_ack(method.delivery_tag)
    ch.tx_rollback()  # the ack is undone: the message stays unacked
    assert ch.queue_declare(name, passive=True).method.message_count == 0
    ch.basic_ack(method.delivery_tag)
    ch.tx_commit()


def test_ttl_max_length_and_expires(conn, name) -> None:
    ch = conn.channel()
    ch.exchange_declare(f"{name}-dlx", "fanout")
    dead = ch.queue_declare(f"{name}-dead", exclusive=True).method.queue
    ch.queue_bind(dead, f"{name}-dlx")
    ttl = ch.queue_declare(
        f"{name}-ttl",
        exclusive=True,
        arguments={"x-message-ttl": 200, "x-dead-letter-exchange": f"{name}-dlx"},
    ).method.queue
    capped = ch.queue_declare(
        f"{name}-cap", exclusive=True, arguments={"x-max-length": 2}
    ).method.queue
    ch.queue_declare(f"{name}-exp", arguments={"x-expires": 500})
    ch.confirm_delivery()
    ch.basic_publish("", ttl, b"old")
    for i in range(5):
        ch.basic_publish("", capped, str(i).encode())
    ch.basic_publish("", f"{name}-exp", b"whatever")
    # expired at the head, dead-lettered without anyone reading the queue
    dead_letters = _drain(ch, dead, 1, timeout=5)
    assert [b for _, _, b in dead_letters] == [b"old"]
    assert dead_letters[0][1].headers["x-death"][0]["reason"] == "expired"
    assert ch.basic_get(ttl) == (None, None, None)
    assert [b for _, _, b in _drain(ch, capped, 2)] == [b"3", b"4"]
    wait_until(
        lambda: not _queue_exists(conn, f"{name}-exp"),
        10,
        message="x-expires to delete the unused queue",
    )
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(f"{name}-exp", passive=True)
    assert info.value.reply_code == 404
    conn.channel().exchange_delete(f"{name}-dlx")


def test_single_active_consumer(conn, name) -> None:
    ch = conn.channel()
    ch.queue_declare(name, exclusive=True, arguments={"x-single-active-consumer": True})
    ch.confirm_delivery()
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    tag_a = ch.basic_consume(name, lambda c, m, p, b: got["a"].append(b), auto_ack=True)
    ch.basic_consume(name, lambda c, m, p, b: got["b"].append(b), auto_ack=True)
    for i in range(4):
        ch.basic_publish("", name, str(i).encode())
    pump_until(conn, lambda: len(got["a"]) + len(got["b"]) >= 4, "four deliveries")
    round_trip(conn)
    assert len(got["a"]) == 4 and not got["b"]
    ch.basic_cancel(tag_a)
    ch.basic_publish("", name, b"next")
    pump_until(conn, lambda: got["a"][4:] or got["b"], "a delivery after the cancel")
    round_trip(conn)
    assert got["b"] == [b"next"] and len(got["a"]) == 4


def test_exclusive_and_auto_delete_queues_vanish_with_owner(gateway, conn, name) -> None:
    other = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    och = other.channel()
    och.queue_declare(f"{name}-x", exclusive=True)
    och.queue_declare(f"{name}-ad", auto_delete=True)
    tag = och.basic_consume(f"{name}-ad", lambda *a: None)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(f"{name}-x", passive=True)
    assert info.value.reply_code == 405
    och.basic_cancel(tag)
    other.close()
    for queue in (f"{name}-x", f"{name}-ad"):
        wait_until(
            lambda queue=queue: _declare_refused(conn, queue) == 404,
            10,
            message=lambda queue=queue: (
                f"{queue} to vanish (refused with {_declare_refused(conn, queue)})"
            ),
        )


def test_purge_and_delete_report_counts(conn, name) -> None:
    ch = conn.channel()
    ch.queue_declare(name)
    ch.confirm_delivery()
    for _ in range(7):
        ch.basic_publish("", name, b"p")
    assert ch.queue_purge(name).method.message_count == 7
    assert ch.queue_declare(name, passive=True).method.message_count == 0
    ch.basic_publish("", name, b"q")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_delete(name, if_empty=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    assert ch.queue_delete(name).method.message_count == 1
    ch.queue_declare(name)  # a new queue of the same name starts empty
    assert ch.queue_declare(name, passive=True).method.message_count == 0
    assert ch.basic_get(name) == (None, None, None)
    ch.queue_delete(name)


@pytest.mark.parametrize(
    ("action", "code"),
    [
        (lambda ch, n: ch.queue_declare(n, passive=True), 404),
        (lambda ch, n: ch.basic_publish(f"{n}-nope", "k", b""), 404),
        (lambda ch, n: ch.exchange_declare("amq.direct", "fanout"), 406),
        (lambda ch, n: ch.basic_ack(99), 406),
        (lambda ch, n: ch.queue_declare("amq.reserved"), 403),
    ],
)
def test_channel_errors(conn, name, action, code) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        action(ch, name)
        ch.queue_declare(name, passive=True)  # forces a round trip after async methods
    assert info.value.reply_code == code
    assert conn.channel().is_open  # the connection survives a channel error


def test_connection_errors(gateway, name) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    ch = connection.channel()
    ch.basic_consume(ch.queue_declare("", exclusive=True).method.queue, lambda *a: None, "t")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        ch.exchange_declare(name, "x-unknown-type")
    assert info.value.reply_code == 503
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(
            pika.URLParameters(f"amqp://guest:wrong@127.0.0.1:{gateway.amqp_port}/%2F")
        )


def test_big_message_and_any_queue_name(conn) -> None:
    ch = conn.channel()
    odd = f"orders/eu west:{uuid.uuid4().hex[:6]}=é"
    assert ch.queue_declare(odd, exclusive=True).method.queue == odd
    ch.confirm_delivery()
    big = bytes(range(256)) * (6 * 4096 + 7)  # over 6 MiB: chunked in Pulsar, many AMQP frames
    ch.basic_publish("", odd, big)
    ch.basic_publish("", odd, b"")
    got = _drain(ch, odd, 2)
    assert [len(b) for _, _, b in got] == [len(big), 0] and got[0][2] == big


def test_heartbeats_keep_an_idle_connection_alive(gateway) -> None:
    params = pika.URLParameters(gateway.amqp_url + "?heartbeat=1")
    connection = pika.BlockingConnection(params)
    try:
        # kept on purpose: the behaviour is a duration, idle through three heartbeat intervals
        connection.sleep(3.5)
        assert connection.is_open
        assert connection.channel().queue_declare("", exclusive=True).method.queue
    finally:
        connection.close()


def test_x_max_length_bytes_drops_the_oldest_bodies(conn, name) -> None:
    """10 bytes of 4-byte bodies: the newest two stay, as RabbitMQ keeps them."""
    ch = conn.channel()
    queue = ch.queue_declare(
        name, exclusive=True, arguments={"x-max-length-bytes": 10}
    ).method.queue
    ch.confirm_delivery()
    for body in (b"aaaa", b"bbbb", b"cccc", b"dddd"):
        ch.basic_publish("", queue, body)
    assert [b for _, _, b in _drain(ch, queue, 2)] == [b"cccc", b"dddd"]
    assert ch.basic_get(queue) == (None, None, None)


def test_users_and_limits_come_from_the_config_file(tmp_path) -> None:
    conf = tmp_path / "gateway.toml"
    conf.write_text('[amqp]\nframe_max = 8192\n[amqp.users]\nalice = "s3cret"\n')
    gw = GatewayProcess(tmp_path / "gw", extra=["--config", str(conf)]).start()
    try:
        url = f"amqp://alice:s3cret@127.0.0.1:{gw.amqp_port}/%2F"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        assert connection._impl.params.frame_max == 8192
        ch = connection.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"y" * 20000)  # split into frames of at most 8 KiB
        assert ch.basic_get(queue, auto_ack=True)[2] == b"y" * 20000
        connection.close()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.URLParameters(gw.amqp_url))  # guest is not listed
    finally:
        gw.stop()


def test_no_ack_consumer_gets_more_than_the_write_buffer_holds(conn, name) -> None:
    ch = conn.channel()
    ch.queue_declare(name, exclusive=True)
    ch.confirm_delivery()
    body = b"z" * 100_000
    for _ in range(100):  # 10 MB: more than the socket buffer limit of 4 MiB
        ch.basic_publish("", name, body)
    got: list[int] = []
    ch.basic_consume(name, lambda c, m, p, b: got.append(len(b)), auto_ack=True)
    pump_until(conn, lambda: len(got) >= 100, "100 deliveries", timeout=15)
    round_trip(conn)
    assert got == [len(body)] * 100
