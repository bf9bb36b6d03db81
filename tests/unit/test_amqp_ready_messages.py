"""A queue's ready messages in delivery order (ready_messages.py): priorities, requeue to
the original place, expiry and drop-head at the head."""

from __future__ import annotations

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.handlers.amqp.ready_messages import ReadyMessages


def _delivery(n: int, priority: int = 0, ttl: int | None = None, size: int = 1) -> StoredDelivery:
    message = AmqpMessage("", "q", b"\x00\x00", b"x" * size, False, ttl, 1000, priority)
    return StoredDelivery("q", (1, n, -1), message)


def _numbers(ready: ReadyMessages) -> list[int]:
    return [d.message_id[1] for d in ready]  # type: ignore[index]


def test_higher_priority_first_equal_ones_in_queue_order_capped_at_the_maximum() -> None:
    ready = ReadyMessages(max_priority=10)
    for n, priority in enumerate([1, 9, 5, 0, 200, 9, 10]):
        ready.append(_delivery(n, priority))
    assert _numbers(ready) == [4, 6, 1, 5, 2, 0, 3]  # 200 counts as 10, before a later 10
    assert [ready.popleft().message_id[1] for _ in range(3)] == [4, 6, 1]  # type: ignore[index]
    assert len(ready) == 4


def test_without_max_priority_the_order_is_the_queue_order() -> None:
    ready = ReadyMessages()
    for n, priority in enumerate([1, 9, 5]):
        ready.append(_delivery(n, priority))
    assert _numbers(ready) == [0, 1, 2]


def test_a_requeued_message_goes_back_to_its_place_among_its_priority() -> None:
    ready = ReadyMessages(max_priority=5)
    items = [_delivery(n, p) for n, p in enumerate([5, 1, 5, 1])]
    for item in items:
        ready.append(item)
    taken = [ready.popleft(), ready.popleft(), ready.popleft()]  # 0, 2, 1
    ready.put_back([taken[2], taken[0]])
    assert _numbers(ready) == [0, 1, 3]
    assert len(ready) == 3


def test_expiry_and_drop_head_act_on_the_head_only() -> None:
    ready = ReadyMessages()
    for item in (_delivery(0, ttl=100), _delivery(1), _delivery(2, ttl=10)):
        ready.append(item)
    assert ready.head_expiry(None) == 1100
    assert [d.message_id[1] for d in ready.pop_expired(None, 5000)] == [0]  # type: ignore[index]
    assert ready.pop_expired(None, 5000) == []  # 1 has no TTL and holds 2 back
    assert ready.pop_expired(50, 5000)  # the queue's TTL covers 1 too
    ready.append(_delivery(3, size=10))
    ready.append(_delivery(4, size=10))
    assert len(ready.pop_over(0, 15)) == 2


def test_a_message_fetched_late_goes_to_its_place_among_the_ready() -> None:
    """A Shared subscription can hand a message over after later ones (its first consumer
    closed): it still goes out before them, and a requeue merges into queue order."""
    ready = ReadyMessages()
    for n in (0, 1, 3, 4):
        ready.append(_delivery(n))
    ready.append(_delivery(2))
    assert _numbers(ready) == [0, 1, 2, 3, 4]
    head = ready.popleft()
    ready.append(_delivery(5))
    ready.put_back([head])
    assert _numbers(ready) == [0, 1, 2, 3, 4, 5]
    prioritised = ReadyMessages(max_priority=5)
    for n, priority in ((0, 1), (2, 1), (3, 5), (1, 1)):
        prioritised.append(_delivery(n, priority))
    assert _numbers(prioritised) == [3, 0, 1, 2]
