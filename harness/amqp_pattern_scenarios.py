"""Scenarios of the patterns frameworks build on AMQP (issue 36), run unchanged against
RabbitMQ and against the gateway (tests/differential/test_amqp_vs_rabbitmq.py compares
the transcripts). Only behaviour RabbitMQ 3.10 shares with the versions the gateway
follows is compared here; the rest is in tests/integration/test_amqp_patterns.py.
"""

from __future__ import annotations

import datetime
import socket
import struct
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
from pamqp import commands

from harness.raw_amqp_socket import next_method, open_connection
from pulsar_gateway.handlers.amqp.frames import (
    FrameReader,
    HeaderFrame,
    encode_content,
    encode_method,
)
from pulsar_gateway.handlers.amqp.property_octets import split_array, split_properties, split_table

Transcript = list[Any]
REPLY_TO = "amq.rabbitmq.reply-to"


def _connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def _closed_by(call: Callable[[], object]) -> tuple[int, str]:
    try:
        call()
    except pika.exceptions.ChannelClosedByBroker as error:
        return (error.reply_code, error.reply_text)
    return (0, "no error")


def _typed(value: Any) -> Any:
    """A decoded header value with the class pika decoded it to (pika decodes `l` as its
    own long class): so a transcript shows a count typed long on one side and not the
    other."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in sorted(value.items()) if k != "time"}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


# --- direct reply-to --------------------------------------------------------------------


def direct_reply_to(url: str, p: str) -> Transcript:
    """RPC over the amq.rabbitmq.reply-to pseudo-queue, and its errors when misused. The
    reply address itself is the broker's own (only its prefix is compared); a reply
    published as mandatory is left out: RabbitMQ 3.10 returned it although it delivered it,
    later versions do not (the gateway follows them, tests/integration/test_amqp_patterns.py)."""
    log: Transcript = []
    requester = _connect(url)
    ch = requester.channel()
    ok = ch.queue_declare(REPLY_TO, passive=True).method
    log.append(("passive", ok.queue, ok.message_count, ok.consumer_count))
    ok = ch.queue_declare(REPLY_TO).method
    log.append(("declare", ok.queue, ok.message_count, ok.consumer_count))
    replies: list = []
    tag = ch.basic_consume(
        REPLY_TO, lambda _c, m, props, body: replies.append((m, props, body)), auto_ack=True
    )
    ch.queue_declare(f"{p}.rpc")
    headers = {"n": 5, "big": 2**40, "s": "x"}
    for i in range(3):
        properties = pika.BasicProperties(
            reply_to=REPLY_TO, correlation_id=f"c{i}", headers=headers
        )
        ch.basic_publish("", f"{p}.rpc", f"req{i}".encode(), properties)
    responder = _connect(url)
    rch = responder.channel()
    rch.confirm_delivery()
    requests = []
    deadline = time.time() + 5
    while len(requests) < 3 and time.time() < deadline:
        method, props, body = rch.basic_get(f"{p}.rpc", auto_ack=True)
        if method is None:
            time.sleep(0.05)
            continue
        requests.append((props, body))
        address = props.reply_to
        log.append(("request", body, address.startswith(REPLY_TO + "."), props.headers))
        answer = pika.BasicProperties(correlation_id=props.correlation_id)
        rch.basic_publish("", address, body.replace(b"req", b"answer"), answer)
    deadline = time.time() + 5
    while len(replies) < 3 and time.time() < deadline:
        requester.process_data_events(time_limit=0.05)
    for m, props, body in replies:
        log.append(
            (
                "reply",
                m.consumer_tag == tag,
                m.redelivered,
                m.exchange,
                m.routing_key == requests[0][0].reply_to,
                props.correlation_id,
                props.reply_to,
                body,
            )
        )
    try:
        rch.basic_publish("", REPLY_TO + ".nobody", b"lost", mandatory=True)
        log.append(("bogus", "confirmed"))
    except pika.exceptions.UnroutableError as error:
        log.append(("bogus", "returned", error.messages[0].method.reply_code))
    address = REPLY_TO + ".abc"
    passive = _closed_by(lambda: requester.channel().queue_declare(address, passive=True))
    log.append(("passive-address", passive))
    other = requester.channel()

    def request_without_consumer(channel: Any) -> None:
        channel.basic_publish("", f"{p}.rpc", b"x", pika.BasicProperties(reply_to=REPLY_TO))
        channel.queue_declare(f"{p}.rpc", passive=True)  # the error arrives by then

    log.append(("no-consumer", _closed_by(lambda: request_without_consumer(other))))
    acking = requester.channel()
    log.append(
        ("ack-mode", _closed_by(lambda: acking.basic_consume(REPLY_TO, print, auto_ack=False)))
    )
    twice = requester.channel()
    twice.basic_consume(REPLY_TO, print, auto_ack=True)
    log.append(("twice", _closed_by(lambda: twice.basic_consume(REPLY_TO, print, auto_ack=True))))
    ch.basic_cancel(tag)
    log.append(("after-cancel", _closed_by(lambda: request_without_consumer(ch))))
    # the pseudo-queue is no queue for the other queue methods
    log.append(("get", _closed_by(lambda: requester.channel().basic_get(REPLY_TO))))
    log.append(("bind", _closed_by(lambda: requester.channel().queue_bind(REPLY_TO, "amq.direct"))))
    log.append(("purge", _closed_by(lambda: requester.channel().queue_purge(REPLY_TO))))
    log.append(("delete", _closed_by(lambda: requester.channel().queue_delete(REPLY_TO))))
    rch.queue_delete(f"{p}.rpc")
    responder.close()
    requester.close()
    return log


# --- dead-lettering ---------------------------------------------------------------------


def _get(ch: Any, queue: str, wait: float = 5.0) -> tuple[Any, Any, bytes]:
    deadline = time.time() + wait
    while time.time() < deadline:
        method, props, body = ch.basic_get(queue)
        if method is not None:
            return method, props, body
        time.sleep(0.02)
    raise AssertionError(f"nothing arrived in {queue}")


def dead_letter_retry_loop(url: str, p: str) -> Transcript:
    """The retry loop of task frameworks: reject into a retry exchange, wait out a TTL in
    a wait queue, come back; three rounds. One x-death entry per (queue, reason), counted
    up (a long) and moved to the front; x-first-death-* set once; expiration removed and
    kept as original-expiration. (x-last-death-* came with RabbitMQ 3.13: not compared.)"""
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    ch.exchange_declare(f"{p}.back", "direct")
    ch.exchange_declare(f"{p}.retry", "direct")
    work_args = {"x-dead-letter-exchange": f"{p}.retry", "x-dead-letter-routing-key": "k"}
    ch.queue_declare(f"{p}.work", arguments=work_args)
    wait_args = {"x-dead-letter-exchange": f"{p}.back", "x-message-ttl": 100}
    ch.queue_declare(f"{p}.wait", arguments=wait_args)
    ch.queue_bind(f"{p}.work", f"{p}.back", "k")
    ch.queue_bind(f"{p}.wait", f"{p}.retry", "k")
    headers = {"app": 5, "big": 2**40, "text": "x", "nested": {"a": [1, "b"]}}
    properties = pika.BasicProperties(headers=headers, expiration="60000", priority=3)
    ch.basic_publish("", f"{p}.work", b"job", properties)
    for round_ in range(4):
        method, props, body = _get(ch, f"{p}.work")
        shown = {k: v for k, v in (props.headers or {}).items() if not k.startswith("x-last")}
        log.append(
            (
                round_,
                method.exchange,
                method.routing_key,
                method.redelivered,
                props.expiration,
                props.priority,
                _typed(shown),
            )
        )
        if round_ < 3:
            ch.basic_reject(method.delivery_tag, requeue=False)
        else:
            ch.basic_ack(method.delivery_tag)
    for queue in ("work", "wait"):
        ch.queue_delete(f"{p}.{queue}")
    for exchange in ("back", "retry"):
        ch.exchange_delete(f"{p}.{exchange}")
    conn.close()
    return log


# Every AMQP 0-9-1 field type RabbitMQ reads, as a publisher might write it (type octet and
# value): the dead-lettered copy must carry each one unchanged.
_TABLE_VALUES = {
    "t": b"t\x01",
    "b": b"b\xfe",
    "B": b"B\xfe",
    "s": b"s\xff\x00",
    "u": b"u\xff\x00",
    "I": b"I\x00\x00\x00\x05",
    "i": b"i\xff\xff\xff\xfe",
    "l": b"l" + struct.pack(">q", -(2**40)),
    "f": b"f" + struct.pack(">f", 1.5),
    "d": b"d" + struct.pack(">d", -2.25),
    "D": b"D\x02\x00\x00\x01\x00",
    "T": b"T" + struct.pack(">Q", 1_700_000_000),
    "V": b"V",
    "S": b"S\x00\x00\x00\x02hi",
    "x": b"x\x00\x00\x00\x03\x00\x01\x02",
    "A": b"A\x00\x00\x00\x0a" + b"I\x00\x00\x00\x07" + b"S\x00\x00\x00\x00",
    "F": b"F\x00\x00\x00\x07" + b"\x01kb\x01" + b"\x01vV",
}


def _raw_properties() -> bytes:
    body = b"".join(bytes((len(name),)) + name.encode() + v for name, v in _TABLE_VALUES.items())
    headers = struct.pack(">I", len(body)) + body
    flags = commands.Basic.Properties.flags["headers"]
    return struct.pack(">H", flags) + headers


def _raw_get(
    sock: socket.socket, reader: FrameReader, queue: str, no_ack: bool = True
) -> tuple[Any, bytes] | None:
    """basic.get on channel 1: (get-ok, property octets), or None when empty."""
    sock.sendall(encode_method(1, commands.Basic.Get(queue=queue, no_ack=no_ack)))
    method = next_method(sock, reader)
    if isinstance(method, commands.Basic.GetEmpty):
        return None
    assert isinstance(method, commands.Basic.GetOk), (method.reply_code, method.reply_text)
    header = None
    while header is None:
        frame = reader.next_frame()
        if frame is None:
            reader.feed(sock.recv(65536))
        elif isinstance(frame, HeaderFrame):
            header = frame
    return method, header.properties_raw


def dead_letter_keeps_header_types(url: str, p: str) -> Transcript:
    """A message whose headers hold every field type, rejected into a dead-letter queue:
    every header the publisher set comes back byte for byte (the type octet included)."""
    conn = _connect(url)
    ch = conn.channel()
    ch.exchange_declare(f"{p}.tdlx", "fanout")
    ch.queue_declare(f"{p}.typed", arguments={"x-dead-letter-exchange": f"{p}.tdlx"})
    ch.queue_declare(f"{p}.typed-dead")
    ch.queue_bind(f"{p}.typed-dead", f"{p}.tdlx")
    port = urllib.parse.urlparse(url).port
    assert port is not None
    sock = open_connection(port)
    reader = FrameReader(0)
    log: Transcript = []
    try:
        sock.sendall(encode_method(1, commands.Channel.Open()))
        assert isinstance(next_method(sock, reader), commands.Channel.OpenOk)
        publish = commands.Basic.Publish(exchange="", routing_key=f"{p}.typed")
        sock.sendall(encode_content(1, publish, b"typed", _raw_properties(), 131072))
        got = None
        deadline = time.time() + 5
        while got is None and time.time() < deadline:
            got = _raw_get(sock, reader, f"{p}.typed", no_ack=False)
        assert got is not None
        sock.sendall(encode_method(1, commands.Basic.Reject(delivery_tag=1, requeue=False)))
        dead = None
        deadline = time.time() + 5
        while dead is None and time.time() < deadline:
            dead = _raw_get(sock, reader, f"{p}.typed-dead")
        assert dead is not None
        _, fields = split_properties(dead[1])
        entries = dict(split_table(fields["headers"]))
        for name, value in _TABLE_VALUES.items():
            log.append((name, entries.get(name) == value))
        x_death = split_array(entries["x-death"])
        for entry in x_death:
            log.append(("x-death", sorted((k, v[:1]) for k, v in split_table(entry[1:]))))
        log.append(("first", sorted(k for k in entries if k.startswith("x-first"))))
    finally:
        sock.close()
    ch.queue_delete(f"{p}.typed")
    ch.queue_delete(f"{p}.typed-dead")
    ch.exchange_delete(f"{p}.tdlx")
    conn.close()
    return log


# --- TTL without consumers --------------------------------------------------------------


def _drain(ch: Any, queue: str, expect: int, wait: float = 5.0) -> list[bytes]:
    """Bodies of `expect` messages got (acked) from `queue`, waiting up to `wait` s."""
    out: list[bytes] = []
    deadline = time.time() + wait
    while len(out) < expect and time.time() < deadline:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.02)
            continue
        out.append(body)
    return out


def ttl_without_consumers(url: str, p: str) -> Transcript:
    """Messages expire at the head of a queue nobody reads and are dead-lettered, for
    per-message TTL (the delay queues of task frameworks) and x-message-ttl; a message
    with a TTL behind one without waits until it is at the head, as on RabbitMQ."""
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(f"{p}.tdlx", "fanout")
    ch.queue_declare(f"{p}.delay", arguments={"x-dead-letter-exchange": f"{p}.tdlx"})
    ttl_args = {"x-dead-letter-exchange": f"{p}.tdlx", "x-message-ttl": 150}
    ch.queue_declare(f"{p}.qttl", arguments=ttl_args)
    ch.queue_declare(f"{p}.expired")
    ch.queue_bind(f"{p}.expired", f"{p}.tdlx")
    sends = [("d1", "100"), ("d2", "50"), ("keep", None), ("d3", "100")]
    for body, expiration in sends:
        properties = pika.BasicProperties(expiration=expiration)
        ch.basic_publish("", f"{p}.delay", body.encode(), properties)
    ch.basic_publish("", f"{p}.qttl", b"q1")
    ch.basic_publish("", f"{p}.qttl", b"q2", pika.BasicProperties(expiration="60000"))
    log.append(("expired", sorted(_drain(ch, f"{p}.expired", 4))))
    log.append(("left", _drain(ch, f"{p}.delay", 1)))  # "keep"; d3 now at the head
    log.append(("then", _drain(ch, f"{p}.expired", 1)))
    log.append(("counts", ch.queue_declare(f"{p}.delay", passive=True).method.message_count))
    for queue in ("delay", "qttl", "expired"):
        ch.queue_delete(f"{p}.{queue}")
    ch.exchange_delete(f"{p}.tdlx")
    conn.close()
    return log


# --- priorities -------------------------------------------------------------------------


def priority_queue(url: str, p: str) -> Transcript:
    """x-max-priority: higher priorities first, equal ones in publish order, none as 0 and
    above the maximum as the maximum; a requeued message goes back to its place among its
    priority; a rejected one is dead-lettered with its priority; confirms as usual."""
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(f"{p}.pdlx", "fanout")
    args = {"x-max-priority": 10, "x-dead-letter-exchange": f"{p}.pdlx"}
    ch.queue_declare(f"{p}.prio", arguments=args)
    ch.queue_declare(f"{p}.pdead")
    ch.queue_bind(f"{p}.pdead", f"{p}.pdlx")
    sends = [("a", 1), ("b", 9), ("c", 5), ("d", None), ("e", 200), ("f", 9), ("g", 0)]
    for body, priority in sends:
        ch.basic_publish("", f"{p}.prio", body.encode(), pika.BasicProperties(priority=priority))
        log.append(("confirmed", body))
    log.append(("count", ch.queue_declare(f"{p}.prio", passive=True).method.message_count))
    first, _, body = _get(ch, f"{p}.prio")
    log.append(("first", body))
    ch.basic_nack(first.delivery_tag, requeue=True)
    order = []
    for _ in range(len(sends)):
        method, props, body = _get(ch, f"{p}.prio")
        order.append((body, method.redelivered, props.priority))
        if body == b"c":
            ch.basic_reject(method.delivery_tag, requeue=False)
        else:
            ch.basic_ack(method.delivery_tag)
    log.append(("order", order))
    _, props, body = _get(ch, f"{p}.pdead")
    log.append(("dead", body, props.priority))
    # a consumer after a backlog: the same order
    for body, priority in sends:
        ch.basic_publish("", f"{p}.prio", body.encode(), pika.BasicProperties(priority=priority))
    consumed: list[bytes] = []
    ch.basic_qos(prefetch_count=1)

    def take(channel: Any, method: Any, _props: Any, body: bytes) -> None:
        consumed.append(body)
        channel.basic_ack(method.delivery_tag)

    ch.basic_consume(f"{p}.prio", take)
    deadline = time.time() + 5
    while len(consumed) < len(sends) and time.time() < deadline:
        conn.process_data_events(time_limit=0.05)
    log.append(("consumed", consumed))
    for queue in ("prio", "pdead"):
        ch.queue_delete(f"{p}.{queue}")
    ch.exchange_delete(f"{p}.pdlx")
    conn.close()
    return log


# --- quorum queues ----------------------------------------------------------------------


def quorum_delivery_limit(url: str, p: str) -> Transcript:
    """A quorum queue counts returns (nack with requeue, a channel closed with the message
    unacked) in x-delivery-count and dead-letters a message returned more often than
    x-delivery-limit (reason delivery_limit). The default limit (none in 3.10, 20 in 4.x)
    is tested on the gateway alone."""
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    ch.exchange_declare(f"{p}.qdlx", "fanout")
    ch.queue_declare(f"{p}.qdead")
    ch.queue_bind(f"{p}.qdead", f"{p}.qdlx")
    args = {"x-queue-type": "quorum", "x-delivery-limit": 2, "x-dead-letter-exchange": f"{p}.qdlx"}
    ch.queue_declare(f"{p}.quorum", durable=True, arguments=args)
    ch.basic_publish("", f"{p}.quorum", b"poison", pika.BasicProperties(headers={"a": 1}))
    for _ in range(3):
        method, props, body = _get(ch, f"{p}.quorum")
        log.append(("nacked", body, method.redelivered, _typed(props.headers)))
        ch.basic_nack(method.delivery_tag, requeue=True)
    _, props, body = _get(ch, f"{p}.qdead")
    headers = {k: v for k, v in props.headers.items() if not k.startswith("x-last")}
    log.append(("dead", body, _typed(headers)))
    log.append(
        ("left", ch.queue_declare(f"{p}.quorum", durable=True, arguments=args).method.message_count)
    )
    ch.basic_publish("", f"{p}.quorum", b"closer")
    for _ in range(3):
        other = conn.channel()
        method, props, body = _get(other, f"{p}.quorum")
        log.append(("closed", body, method.redelivered, _typed(props.headers)))
        other.close()
    _, props, body = _get(ch, f"{p}.qdead")
    log.append(("dead", body, props.headers["x-death"][0]["reason"]))
    ch.queue_delete(f"{p}.quorum")
    ch.queue_delete(f"{p}.qdead")
    ch.exchange_delete(f"{p}.qdlx")
    conn.close()
    return log


# --- stream queues ----------------------------------------------------------------------


def _stream_read(conn: Any, queue: str, offset: Any, expect: int, prefetch: int = 3) -> list:
    """What one consumer at `offset` gets: (body, x-stream-offset, redelivered), acking
    each (with a prefetch below the count, acks are what lets it go on)."""
    got: list = []
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)

    def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
        offset_header = (props.headers or {}).get("x-stream-offset")
        got.append((body, _typed(offset_header), method.redelivered))
        channel.basic_ack(method.delivery_tag)

    arguments = {} if offset is None else {"x-stream-offset": offset}
    ch.basic_consume(queue, on_message, arguments=arguments)
    deadline = time.time() + 5
    while len(got) < expect and time.time() < deadline:
        conn.process_data_events(time_limit=0.05)
    conn.process_data_events(time_limit=0.2)  # nothing beyond `expect`
    ch.close()
    return got


def _connection_error(url: str, call: Callable[[Any], object]) -> tuple[int, str]:
    conn = _connect(url)
    try:
        call(conn.channel())
        conn.process_data_events(time_limit=0.3)
    except pika.exceptions.ConnectionClosedByBroker as error:
        return (error.reply_code, error.reply_text)
    except pika.exceptions.ChannelClosedByBroker as error:
        return (error.reply_code, error.reply_text)
    conn.close()
    return (0, "no error")


def stream_queue(url: str, p: str) -> Transcript:
    """x-queue-type stream over AMQP 0-9-1: append-only, each consumer at its own offset
    (first, last, next, a number, a timestamp, an interval), x-stream-offset on every
    delivery, acks as credit; the declare, consume, get and nack rules with their errors."""
    log: Transcript = []
    conn = _connect(url)
    ch = conn.channel()
    q = f"{p}.stream"
    args = {"x-queue-type": "stream"}
    log.append(("non-durable", _closed_by(lambda: conn.channel().queue_declare(q, arguments=args))))
    bad = {"x-queue-type": "stream", "x-max-length": 5}
    log.append(
        (
            "max-length",
            _closed_by(lambda: conn.channel().queue_declare(q, durable=True, arguments=bad)),
        )
    )
    retention = {"x-queue-type": "stream", "x-max-age": "1D", "x-max-length-bytes": 10**9}
    ok = ch.queue_declare(q, durable=True, arguments=retention).method
    log.append(("declare", ok.message_count, ok.consumer_count))
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", q, f"m{i}".encode(), pika.BasicProperties(headers={"i": i}))
    log.append(
        ("count", ch.queue_declare(q, durable=True, arguments=retention).method.message_count)
    )
    log.append(("no-qos", _closed_by(lambda: conn.channel().basic_consume(q, print))))
    log.append(("get", _connection_error(url, lambda c: c.basic_get(q))))

    def no_ack(c: Any) -> None:
        c.basic_qos(prefetch_count=1)
        c.basic_consume(q, print, auto_ack=True)

    log.append(("no-ack", _connection_error(url, no_ack)))
    an_hour_ago = datetime.datetime.now() - datetime.timedelta(hours=1)
    for offset, expect in (
        ("first", 10),
        ("last", 1),
        ("next", 0),
        (6, 4),
        (0, 10),
        (100, 0),
        (an_hour_ago, 10),
        ("10m", 10),
        (None, 0),
    ):
        shown = "timestamp" if isinstance(offset, datetime.datetime) else offset
        log.append(("offset", shown, _stream_read(conn, q, offset, expect)))
    # two consumers at once, each at its own offset, and what is appended meanwhile
    both: dict[str, list] = {"a": [], "b": []}
    channels = []
    for name, offset in (("a", 7), ("b", "next")):
        c = conn.channel()
        c.basic_qos(prefetch_count=2)

        def take(channel: Any, method: Any, props: Any, body: bytes, name: str = name) -> None:
            both[name].append((body, props.headers["x-stream-offset"]))
            channel.basic_ack(method.delivery_tag)

        c.basic_consume(q, take, arguments={"x-stream-offset": offset})
        channels.append(c)
    conn.process_data_events(time_limit=0.5)
    for i in range(10, 13):
        ch.basic_publish("", q, f"m{i}".encode())
    deadline = time.time() + 5
    while (len(both["a"]) < 6 or len(both["b"]) < 3) and time.time() < deadline:
        conn.process_data_events(time_limit=0.05)
    log.append(("together", both))
    for c in channels:
        c.close()

    def nack(c: Any) -> None:
        c.basic_qos(prefetch_count=1)
        c.basic_consume(
            q,
            lambda ch_, m, _p, _b: ch_.basic_nack(m.delivery_tag),
            arguments={"x-stream-offset": "first"},
        )
        c.connection.process_data_events(time_limit=1)

    log.append(("nack", _connection_error(url, nack)))
    ch.queue_delete(q)
    conn.close()
    return log


PATTERN_SCENARIOS = [
    direct_reply_to,
    dead_letter_retry_loop,
    dead_letter_keeps_header_types,
    ttl_without_consumers,
    priority_queue,
    quorum_delivery_limit,
    stream_queue,
]
