"""AMQP scenarios that run unchanged against RabbitMQ and against the gateway.

Each scenario takes a broker URL and a name prefix and returns a transcript of
what a client observed (deliveries in order, redelivered flags, returns,
confirm outcomes, message counts, error reply codes and texts); the
differential test asserts the two transcripts are equal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions

from harness.amqp_frame_trace import confirm_after_delivery, publish_and_consume_trace
from harness.amqp_pattern_scenarios import PATTERN_SCENARIOS
from harness.pika_waits import pump_until, round_trip
from harness.waiting import wait_until, wait_until_stable

Transcript = list[Any]


def _connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def _count(ch, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


def _settled_count(ch, queue: str) -> int:
    """The queue's message count once it stops moving: RabbitMQ applies nack and reject
    asynchronously, so a count read right after them may not include the requeues yet."""
    return wait_until_stable(lambda: _count(ch, queue), 2, message=f"the count of {queue}")


def _count_reaching(ch, queue: str, expected: int, wait: float = 5.0) -> int:
    """The queue's message count once it is `expected`, or as it is after `wait` seconds:
    RabbitMQ enqueues a fanned-out message on each queue asynchronously (the publish's nack
    from one full queue may come before another queue has it), so a count read right after
    was 0 where it is 1 a moment later (cc48, beside busy loops)."""
    deadline = time.time() + wait
    count = _count(ch, queue)
    while count != expected and time.time() < deadline:
        time.sleep(0.05)
        count = _count(ch, queue)
    return count


def _get_all(ch, queue: str, settle: bool = True, wait: float = 3.0) -> Transcript:
    out: Transcript = []
    deadline = time.time() + wait
    while time.time() < deadline:
        method, props, body = ch.basic_get(queue)
        if method is None:
            if not out or _count(ch, queue):
                time.sleep(0.05)
                continue
            break
        out.append((queue, body, method.redelivered, method.message_count))
        if settle:
            ch.basic_ack(method.delivery_tag)
        deadline = time.time() + 0.3  # stop once nothing more comes
    return out


def routing_and_returns(url: str, p: str) -> Transcript:
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(f"{p}.ae", "fanout")
    ch.exchange_declare(f"{p}.direct", "direct", arguments={"alternate-exchange": f"{p}.ae"})
    ch.exchange_declare(f"{p}.topic", "topic")
    ch.exchange_declare(f"{p}.headers", "headers")
    for q in ("qa", "qb", "qc", "qae"):
        ch.queue_declare(f"{p}.{q}")
    ch.queue_bind(f"{p}.qa", f"{p}.direct", "red")
    ch.queue_bind(f"{p}.qb", f"{p}.topic", "*.orange.*")
    ch.queue_bind(f"{p}.qb", f"{p}.topic", "lazy.#")
    ch.queue_bind(f"{p}.qc", f"{p}.headers", arguments={"x-match": "all", "a": 1, "b": "x"})
    ch.queue_bind(f"{p}.qae", f"{p}.ae")
    ch.exchange_bind(f"{p}.topic", f"{p}.direct", "green")
    sends = [
        (f"{p}.direct", "red", None),
        (f"{p}.direct", "blue", None),  # alternate exchange
        (f"{p}.direct", "green", None),  # e2e to topic: no match there -> unroutable
        (f"{p}.topic", "quick.orange.rabbit", None),
        (f"{p}.topic", "lazy", None),
        (f"{p}.topic", "quick.brown", None),
        (f"{p}.headers", "", {"a": 1, "b": "x", "c": 0}),
        (f"{p}.headers", "", {"a": 1}),
        ("", f"{p}.qa", None),
        ("", f"{p}.missing", None),
        ("amq.fanout", "", None),
    ]
    for i, (exchange, key, headers) in enumerate(sends):
        body = f"{i}".encode()
        try:
            ch.basic_publish(
                exchange, key, body, pika.BasicProperties(headers=headers), mandatory=True
            )
            log.append(("confirmed", i))
        except pika.exceptions.UnroutableError as error:
            returned = error.messages[0]
            log.append(
                (
                    "returned",
                    i,
                    returned.method.reply_code,
                    returned.method.reply_text,
                    returned.method.exchange,
                    returned.method.routing_key,
                    returned.body,
                )
            )
        except pika.exceptions.NackError:
            log.append(("nacked", i))
    for q in ("qa", "qb", "qc", "qae"):
        log.extend(_get_all(ch, f"{p}.{q}"))
        ch.queue_delete(f"{p}.{q}")
    for x in ("direct", "topic", "headers", "ae"):
        ch.exchange_delete(f"{p}.{x}")
    conn.close()
    return log


def settle_and_requeue(url: str, p: str) -> Transcript:
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    q = f"{p}.settle"
    ch.queue_declare(q)
    ch.confirm_delivery()
    for i in range(6):
        ch.basic_publish("", q, f"m{i}".encode())
    got = _get_all(ch, q, settle=False)
    log.extend(got)
    tags = list(range(1, 7))
    ch.basic_nack(tags[1], requeue=True)
    ch.basic_reject(tags[4], requeue=True)
    ch.basic_nack(tags[3], requeue=False)
    ch.basic_ack(tags[0])
    log.append(("count", _settled_count(ch, q)))
    ch.basic_nack(0, multiple=True, requeue=True)  # the rest back: m2, m5
    log.extend(_get_all(ch, q))
    log.append(("count", _count(ch, q)))
    ch.queue_delete(q)
    conn.close()
    return log


def consume_prefetch_and_close(url: str, p: str) -> Transcript:
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    q = f"{p}.consume"
    ch.queue_declare(q)
    ch.confirm_delivery()
    for i in range(6):
        ch.basic_publish("", q, f"c{i}".encode())
    a = conn.channel()
    a.basic_qos(prefetch_count=2)
    seen: Transcript = []
    a.basic_consume(q, lambda c, m, pr, b: seen.append(("a", b, m.redelivered)))
    pump_until(conn, lambda: len(seen) >= 2, "two deliveries", timeout=3)
    round_trip(conn)  # and no third one, past the prefetch
    log.extend(seen)
    a.close()
    seen.clear()
    b = conn.channel()
    b.basic_consume(q, lambda c, m, pr, body: seen.append(("b", body, m.redelivered)), True)
    deadline = time.time() + 3
    while len(seen) < 6 and time.time() < deadline:
        conn.process_data_events(time_limit=0.1)
    log.extend(seen)
    ch.queue_delete(q)
    conn.close()
    return log


def counts_limits_and_tx(url: str, p: str) -> Transcript:
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    capped = f"{p}.capped"
    ok = ch.queue_declare(capped, arguments={"x-max-length": 3})
    log.append(("declare", ok.method.message_count, ok.method.consumer_count))
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", capped, f"k{i}".encode())
    log.append(("count", _count(ch, capped)))
    method, _, body = ch.basic_get(capped, auto_ack=True)
    log.append(("get", body, method.message_count))
    log.append(("purge", ch.queue_purge(capped).method.message_count))
    ch.basic_publish("", capped, b"last")
    log.append(("delete", ch.queue_delete(capped).method.message_count))
    tx = conn.channel()
    q = f"{p}.tx"
    tx.queue_declare(q)
    tx.tx_select()
    tx.basic_publish("", q, b"no")
    tx.basic_publish("", q, b"no")
    tx.tx_rollback()
    tx.basic_publish("", q, b"yes")
    log.append(("before-commit", _count(tx, q)))
    tx.tx_commit()
    log.append(("after-commit", _count(tx, q)))
    method, _, body = tx.basic_get(q)
    tx.basic_ack(method.delivery_tag)
    tx.tx_rollback()
    log.append(("ack-rolled-back", _count(tx, q)))
    tx.close()
    ch.queue_delete(q)
    conn.close()
    return log


def ttl_and_dead_letters(url: str, p: str) -> Transcript:
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    ch.exchange_declare(f"{p}.dlx", "direct")
    ch.queue_declare(f"{p}.dead")
    ch.queue_bind(f"{p}.dead", f"{p}.dlx", "dl")
    ch.queue_declare(
        f"{p}.ttl",
        arguments={
            # long enough that the first message is still there for the basic.get on a
            # loaded machine (both publishes are confirmed first): 150 ms was not
            "x-message-ttl": 1000,
            "x-dead-letter-exchange": f"{p}.dlx",
            "x-dead-letter-routing-key": "dl",
        },
    )
    ch.confirm_delivery()
    ch.basic_publish("", f"{p}.ttl", b"expires")
    ch.basic_publish("", f"{p}.ttl", b"rejected")
    method, _, body = ch.basic_get(f"{p}.ttl")
    log.append(("got", body))
    ch.basic_reject(method.delivery_tag, requeue=False)
    wait_until(lambda: _count(ch, f"{p}.ttl") == 0, 10, message="the 1 s TTL to expire")
    log.append(("ttl-count", _count(ch, f"{p}.ttl")))
    for _, props_body in enumerate(_dead(ch, f"{p}.dead")):
        log.append(props_body)
    ch.queue_delete(f"{p}.ttl")
    ch.queue_delete(f"{p}.dead")
    ch.exchange_delete(f"{p}.dlx")
    conn.close()
    return log


def _dead(ch, queue: str, expect: int = 2) -> Transcript:
    out: Transcript = []
    deadline = time.time() + 3
    while len(out) < expect and time.time() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.05)
            continue
        death = props.headers["x-death"][0]
        out.append(
            (
                "dead",
                body,
                method.routing_key,
                death["reason"],
                death["count"],
                death["routing-keys"],
                props.headers.get("x-first-death-reason"),
            )
        )
    return sorted(out)


def errors(url: str, p: str) -> Transcript:
    log: Transcript = []
    conn = _connect(url)
    setup = conn.channel()
    setup.queue_declare(f"{p}.errq", arguments={"x-max-length": 5})
    setup.exchange_declare(f"{p}.errx", "topic")
    actions: list[tuple[str, Callable[[Any], Any]]] = [
        ("passive-missing", lambda ch: ch.queue_declare(f"{p}.nope", passive=True)),
        ("exchange-missing", lambda ch: ch.exchange_declare(f"{p}.nope", passive=True)),
        ("bind-missing", lambda ch: ch.queue_bind(f"{p}.errq", f"{p}.nope", "k")),
        ("redeclare-args", lambda ch: ch.queue_declare(f"{p}.errq")),
        ("redeclare-type", lambda ch: ch.exchange_declare(f"{p}.errx", "direct")),
        ("reserved", lambda ch: ch.queue_declare("amq.mine")),
        ("default-exchange", lambda ch: ch.exchange_delete("")),
        ("unknown-tag", lambda ch: (ch.basic_ack(7), ch.queue_declare(f"{p}.errq", True))),
        ("bad-arg", lambda ch: ch.queue_declare(f"{p}.q2", arguments={"x-max-length": "x"})),
        (
            "publish-missing",
            lambda ch: (
                ch.basic_publish(f"{p}.nope", "k", b""),
                ch.queue_declare(f"{p}.errq", True),
            ),
        ),
    ]
    for name, action in actions:
        ch = conn.channel()
        try:
            action(ch)
            log.append((name, "ok"))
            ch.close()
        except pika.exceptions.ChannelClosedByBroker as error:
            log.append((name, error.reply_code, error.reply_text))
    setup.queue_delete(f"{p}.errq")
    setup.exchange_delete(f"{p}.errx")
    conn.close()
    for name, action in [
        ("unknown-exchange-type", lambda ch: ch.exchange_declare(f"{p}.t", "x-nope")),
        ("recover-no-requeue", lambda ch: ch.basic_recover(requeue=False)),
    ]:
        conn = _connect(url)
        try:
            action(conn.channel())
            log.append((name, "ok"))
        except pika.exceptions.ConnectionClosedByBroker as error:
            log.append((name, "connection", error.reply_code, error.reply_text))
        except pika.exceptions.ChannelClosedByBroker as error:
            log.append((name, "channel", error.reply_code, error.reply_text))
        if conn.is_open:
            conn.close()
    return log


def consumers_round_robin_and_cancel(url: str, p: str) -> Transcript:
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    q = f"{p}.rr"
    ch.queue_declare(q)
    seen: Transcript = []
    ch.basic_qos(prefetch_count=1)
    for name in ("one", "two"):
        ch.basic_consume(
            q,
            lambda c, m, pr, b, who=name: (seen.append((who, b)), c.basic_ack(m.delivery_tag)),
            consumer_tag=name,
        )
    pub = conn.channel()
    pub.confirm_delivery()
    for i in range(6):
        pub.basic_publish("", q, f"r{i}".encode())
    deadline = time.time() + 3
    while len(seen) < 6 and time.time() < deadline:
        conn.process_data_events(time_limit=0.1)
    log.append(sorted(seen))
    log.append(
        ("per-consumer", sorted((w, sum(1 for x, _ in seen if x == w)) for w in ("one", "two")))
    )
    cancelled: Transcript = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    other = conn.channel()
    try:
        other.basic_consume(q, lambda *a: None, exclusive=True)
    except pika.exceptions.ChannelClosedByBroker as error:
        log.append(("exclusive", error.reply_code, error.reply_text))
    conn.channel().queue_delete(q)
    deadline = time.time() + 2
    while len(cancelled) < 2 and time.time() < deadline:
        conn.process_data_events(time_limit=0.1)
    log.append(("cancelled", sorted(cancelled)))
    conn.close()
    return log


def single_active_consumer_and_global_qos(url: str, p: str) -> Transcript:
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    q = f"{p}.sac"
    ch.queue_declare(q, arguments={"x-single-active-consumer": True})
    got: Transcript = []
    first = ch.basic_consume(q, lambda c, m, pr, b: got.append(("first", b)), auto_ack=True)
    ch.basic_consume(q, lambda c, m, pr, b: got.append(("second", b)), auto_ack=True)
    pub = conn.channel()
    pub.confirm_delivery()
    for i in range(3):
        pub.basic_publish("", q, f"s{i}".encode())
    deadline = time.time() + 3
    while len(got) < 3 and time.time() < deadline:
        conn.process_data_events(time_limit=0.1)
    ch.basic_cancel(first)
    pub.basic_publish("", q, b"s3")
    deadline = time.time() + 3
    while len(got) < 4 and time.time() < deadline:
        conn.process_data_events(time_limit=0.1)
    log.append(got)
    ch.queue_delete(q)
    g = conn.channel()
    qa, qb = f"{p}.ga", f"{p}.gb"
    for name in (qa, qb):
        g.queue_declare(name)
        for i in range(3):
            pub.basic_publish("", name, f"{name}{i}".encode())
    g.basic_qos(prefetch_count=3, global_qos=True)
    seen: Transcript = []
    g.basic_consume(qa, lambda c, m, pr, b: seen.append(b))
    g.basic_consume(qb, lambda c, m, pr, b: seen.append(b))
    pump_until(conn, lambda: len(seen) >= 3, "three deliveries", timeout=3)
    round_trip(conn)  # and no fourth one, past the channel's global prefetch
    log.append(("global-qos", len(seen)))
    conn.channel().queue_delete(qa)
    conn.channel().queue_delete(qb)
    conn.close()
    return log


def publish_then_get_same_channel(url: str, p: str) -> Transcript:
    """RabbitMQ orders one channel's methods: a basic.get right after an unconfirmed
    basic.publish on the same channel finds the message (no sleep, no confirm between).
    Also with confirms on (the get sent before the confirm arrives) and for a
    consumer started right after the publish."""
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    q = f"{p}.pubget"
    ch.queue_declare(q)
    for i in range(20):
        ch.basic_publish("", q, f"g{i}".encode())
        method, _props, body = ch.basic_get(q, auto_ack=True)
        log.append(("get", i, body if method is not None else None))
    for i in range(3):  # two published, two gets: both in publish order
        ch.basic_publish("", q, f"a{i}".encode())
        ch.basic_publish("", q, f"b{i}".encode())
        for _ in range(2):
            method, _props, body = ch.basic_get(q, auto_ack=True)
            log.append(("get2", i, body if method is not None else None))
    seen: Transcript = []
    ch.basic_publish("", q, b"c0")
    ch.basic_consume(q, lambda c, m, pr, b: seen.append(b), auto_ack=True)
    pump_until(conn, lambda: len(seen) >= 1, "the delivery", timeout=3)
    log.append(("consumed", seen))
    ch.queue_delete(q)
    conn.close()
    return log


def deliveries_before_confirms(url: str, p: str) -> Transcript:
    """On a channel that consumes the queue it publishes to, read byte-level off a raw
    socket, one publish at a time and five pipelined, with and without consumer acks: the
    deliveries in order and every publish confirmed. Whether each confirm follows its
    delivery is not compared: RabbitMQ 3.10 usually sends the delivery first, but lets an
    ack overtake it when its processes are scheduled the other way (seen for pipelined
    publishes on an idle machine and for single ones on a loaded one). The gateway's
    stricter order, always the delivery first, is tests/integration/test_amqp_frame_order.py."""
    log: Transcript = []
    rounds = [(1, True)] * 3 + [(1, False)] * 3 + [(5, True), (5, False)]
    for round_, (count, no_ack) in enumerate(rounds):
        bodies = [f"o{round_}.{i}".encode() for i in range(count)]
        trace = publish_and_consume_trace(url, f"{p}.order{round_}", bodies, no_ack)
        facts = confirm_after_delivery(trace)
        log.append([facts[0], sorted((kind, seq) for kind, seq, _after in facts[1:])])
    conn = _connect(url)
    ch = conn.channel()
    for round_ in range(len(rounds)):
        ch.queue_delete(f"{p}.order{round_}")
    conn.close()
    return log


def overflow_modes(url: str, p: str) -> Transcript:
    """x-overflow with x-max-length 2: drop-head drops the oldest, reject-publish nacks
    the newcomer (and, without confirms, drops it silently; a mandatory one is not
    returned), reject-publish-dlx also dead-letters it (reason maxlen); a message
    routed to a full queue and another is nacked and still reaches the other."""
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(f"{p}.odlx", "fanout")
    ch.queue_declare(f"{p}.odead")
    ch.queue_bind(f"{p}.odead", f"{p}.odlx")
    ch.exchange_declare(f"{p}.ofan", "fanout")
    for mode in ("drop-head", "reject-publish", "reject-publish-dlx"):
        q = f"{p}.of-{mode}"
        args = {"x-max-length": 2, "x-overflow": mode, "x-dead-letter-exchange": f"{p}.odlx"}
        ch.queue_declare(q, arguments=args)
        for i in range(4):
            try:
                ch.basic_publish("", q, f"{mode}{i}".encode(), mandatory=True)
                log.append((mode, i, "confirmed"))
            except pika.exceptions.NackError:
                log.append((mode, i, "nacked"))
            except pika.exceptions.UnroutableError:
                log.append((mode, i, "returned"))
        log.append((mode, "count", _count(ch, q)))
        log.extend(_get_all(ch, q, settle=False))  # unacked: ready is empty, not full
        for i in range(2):
            try:
                ch.basic_publish("", q, f"{mode}-again{i}".encode())
                log.append((mode, "again", i, "confirmed"))
            except pika.exceptions.NackError:
                log.append((mode, "again", i, "nacked"))
        log.append((mode, "count-again", _count(ch, q)))
    full = f"{p}.of-reject-publish"
    other = f"{p}.of-other"
    ch.queue_declare(other)
    ch.queue_bind(full, f"{p}.ofan")
    ch.queue_bind(other, f"{p}.ofan")
    try:
        ch.basic_publish(f"{p}.ofan", "", b"fan")
        log.append(("fanout", "confirmed"))
    except pika.exceptions.NackError:
        log.append(("fanout", "nacked"))
    log.append(("fanout-other", _count_reaching(ch, other, 1), _count(ch, full)))
    plain = conn.channel()  # no confirms: a refused publish just is not there
    plain.basic_publish("", full, b"unconfirmed")
    log.append(("unconfirmed", _count(ch, full)))
    log.extend(_dead(ch, f"{p}.odead", expect=4))
    round_trip(conn)  # and nothing more: reject-publish does not dead-letter
    log.append(("dead-left", _count(ch, f"{p}.odead")))
    for mode in ("drop-head", "reject-publish", "reject-publish-dlx", "other"):
        ch.queue_delete(f"{p}.of-{mode}")
    ch.queue_delete(f"{p}.odead")
    ch.exchange_delete(f"{p}.odlx")
    ch.exchange_delete(f"{p}.ofan")
    conn.close()
    return log


def byte_limits(url: str, p: str) -> Transcript:
    """x-max-length-bytes 10 under each x-overflow mode, with 4-byte bodies: drop-head
    keeps the newest that fit (a body over the limit by itself does not stay),
    reject-publish nacks the body that would go over, reject-publish-dlx also
    dead-letters it; unacknowledged bodies do not count."""
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(f"{p}.bdlx", "fanout")
    ch.queue_declare(f"{p}.bdead")
    ch.queue_bind(f"{p}.bdead", f"{p}.bdlx")
    for mode in ("drop-head", "reject-publish", "reject-publish-dlx"):
        q = f"{p}.by-{mode}"
        args = {"x-max-length-bytes": 10, "x-overflow": mode, "x-dead-letter-exchange": f"{p}.bdlx"}
        ch.queue_declare(q, arguments=args)
        for i, body in enumerate([b"aaaa", b"bbbb", b"cc", b"dddd", b"twelve-bytes", b"e"]):
            try:
                ch.basic_publish("", q, body)
                log.append((mode, i, "confirmed"))
            except pika.exceptions.NackError:
                log.append((mode, i, "nacked"))
        log.append((mode, "count", _settled_count(ch, q)))
        log.extend(_get_all(ch, q, settle=False))  # unacked: no bytes are ready
        try:
            ch.basic_publish("", q, b"ffffffff")
            log.append((mode, "again", "confirmed"))
        except pika.exceptions.NackError:
            log.append((mode, "again", "nacked"))
        log.append((mode, "count-again", _settled_count(ch, q)))
        ch.basic_recover(requeue=True)  # the unacked back: over the limit now
        log.append((mode, "count-requeued", _settled_count(ch, q)))
    log.extend(_dead(ch, f"{p}.bdead", expect=20))
    for mode in ("drop-head", "reject-publish", "reject-publish-dlx"):
        ch.queue_delete(f"{p}.by-{mode}")
    ch.queue_delete(f"{p}.bdead")
    ch.exchange_delete(f"{p}.bdlx")
    conn.close()
    return log


SCENARIOS = [
    routing_and_returns,
    settle_and_requeue,
    consume_prefetch_and_close,
    counts_limits_and_tx,
    ttl_and_dead_letters,
    errors,
    consumers_round_robin_and_cancel,
    single_active_consumer_and_global_qos,
    publish_then_get_same_channel,
    deliveries_before_confirms,
    overflow_modes,
    byte_limits,
    *PATTERN_SCENARIOS,
]
