"""ResendCopies: a queue's resent copy is recognised by its producer and sequence stamp on
a different message id; the same message coming again (a redelivery) is not a copy."""

from __future__ import annotations

import tracemalloc

from pulsar_gateway.gateway.backend.resend_filter import MAX_QUEUE_PRODUCERS, SEQ, ResendCopies


def test_a_second_id_with_the_same_stamp_is_a_copy_and_a_redelivery_is_not() -> None:
    copies = ResendCopies()
    assert not copies.is_copy("p", {SEQ: "1"}, (1, 0, -1))
    assert not copies.is_copy("p", {SEQ: "1"}, (1, 0, -1))  # redelivered: same message
    assert copies.is_copy("p", {SEQ: "1"}, (2, 0, -1))  # stored again: the copy
    assert not copies.is_copy("q", {SEQ: "1"}, (3, 0, -1))  # another producer's sequence


def test_stamps_arriving_out_of_order_are_each_remembered() -> None:
    """A Shared subscription hands messages over out of order (redeliveries, several
    consumers): a stamp lower than the highest seen is still looked up and remembered."""
    copies = ResendCopies()
    for sequence in (5, 2, 9, 3):
        assert not copies.is_copy("p", {SEQ: str(sequence)}, (1, sequence, -1))
    for sequence in (2, 3, 5, 9):
        assert not copies.is_copy("p", {SEQ: str(sequence)}, (1, sequence, -1))
        assert copies.is_copy("p", {SEQ: str(sequence)}, (2, sequence, -1))
    assert not copies.is_copy("p", {SEQ: "4"}, (2, 4, -1))


def test_unstamped_and_foreign_messages_are_never_copies_and_memory_is_bounded() -> None:
    copies = ResendCopies(recent=4)
    assert not copies.is_copy("p", {}, (1, 0, -1)) and not copies.is_copy("p", {}, (2, 0, -1))
    assert not copies.is_copy("", {SEQ: "1"}, (1, 0, -1))
    assert not copies.is_copy("p", {SEQ: "x"}, (1, 0, -1))  # a native producer's property
    assert not copies.is_copy("p", {SEQ: str(2**70)}, (1, 0, -1))
    for n in range(6):
        copies.is_copy("p", {SEQ: str(n)}, (10 + n, 0, -1))
    assert not copies.is_copy("p", {SEQ: "0"}, (99, 0, -1))  # forgotten: the oldest went
    assert copies.is_copy("p", {SEQ: "5"}, (98, 0, -1))


def test_only_the_producers_seen_last_are_remembered() -> None:
    copies = ResendCopies()
    names = [f"gw-{n}" for n in range(MAX_QUEUE_PRODUCERS + 1)]
    for name in names:
        copies.is_copy(name, {SEQ: "1"}, (1, 0, -1))
    assert not copies.is_copy(names[0], {SEQ: "1"}, (2, 0, -1))  # the least recent went
    assert copies.is_copy(names[-1], {SEQ: "1"}, (2, 0, -1))


def test_a_remembered_stamp_costs_tens_of_bytes_and_no_object_of_its_own() -> None:
    """A busy queue remembers 20,000 stamps; as Python objects they cost about 200 bytes
    each and pinned the small-object allocator's arenas after the queue went quiet. The
    client builds a new producer-name string per message, so none may be kept per stamp."""
    copies = ResendCopies()
    properties = [{SEQ: str(sequence)} for sequence in range(20_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for sequence, props in enumerate(properties):
            name = "".join(["gw-", "producer-7"])  # equal, but a new object each time
            assert not copies.is_copy(name, props, (7, sequence, -1))
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 40 * len(properties), f"{kept / len(properties):.0f} bytes per stamp"
