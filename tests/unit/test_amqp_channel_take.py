"""Which unacked deliveries an ack names (`Channel.take`): multiple=true takes every tag up
to the one named, skipping tags settled before, and only those; an unknown tag takes none."""

from __future__ import annotations

from typing import Any, cast

from pulsar_gateway.handlers.amqp.channel import Channel, Unacked


def _channel(tags: list[int]) -> Channel:
    channel = Channel(cast(Any, None), 1)
    for tag in tags:
        channel.unacked[tag] = Unacked(tag, cast(Any, None), cast(Any, None), None)
    channel.next_tag = max(tags, default=0) + 1
    return channel


def test_multiple_takes_every_tag_up_to_the_one_named() -> None:
    channel = _channel(list(range(1, 501)))
    assert [u.tag for u in channel.take(100, True)] == list(range(1, 101))
    assert [u.tag for u in channel.take(100, True)] == []
    assert next(iter(channel.unacked)) == 101 and len(channel.unacked) == 400


def test_multiple_skips_tags_settled_one_by_one() -> None:
    channel = _channel(list(range(1, 11)))
    assert [u.tag for u in channel.take(3, False)] == [3]
    assert [u.tag for u in channel.take(1, False)] == [1]
    assert [u.tag for u in channel.take(5, True)] == [2, 4, 5]
    # a tag between those left, or past them all: what is at or below it
    assert [u.tag for u in channel.take(7, True)] == [6, 7]
    assert [u.tag for u in channel.take(99, True)] == [8, 9, 10]
    assert channel.take(99, True) == [] and channel.take(4, False) == []


def test_multiple_with_tag_zero_takes_all() -> None:
    channel = _channel([2, 5, 9])
    assert [u.tag for u in channel.take(0, True)] == [2, 5, 9]
    assert not channel.unacked
