"""ResendCopies: a queue's resent copy is recognised by its producer and sequence stamp on
a different message id; the same message coming again (a redelivery) is not a copy."""

from __future__ import annotations

from pulsar_gateway.gateway.backend.resend_filter import SEQ, ResendCopies


def test_a_second_id_with_the_same_stamp_is_a_copy_and_a_redelivery_is_not() -> None:
    copies = ResendCopies()
    assert not copies.is_copy("p", {SEQ: "1"}, (1, 0, -1))
    assert not copies.is_copy("p", {SEQ: "1"}, (1, 0, -1))  # redelivered: same message
    assert copies.is_copy("p", {SEQ: "1"}, (2, 0, -1))  # stored again: the copy
    assert not copies.is_copy("q", {SEQ: "1"}, (3, 0, -1))  # another producer's sequence


def test_unstamped_messages_are_never_copies_and_memory_is_bounded() -> None:
    copies = ResendCopies(recent=2)
    assert not copies.is_copy("p", {}, (1, 0, -1)) and not copies.is_copy("p", {}, (2, 0, -1))
    assert not copies.is_copy("", {SEQ: "1"}, (1, 0, -1))
    for n in range(3):
        copies.is_copy("p", {SEQ: str(n)}, (10 + n, 0, -1))
    assert not copies.is_copy("p", {SEQ: "0"}, (99, 0, -1))  # forgotten: the oldest went
    assert copies.is_copy("p", {SEQ: "2"}, (98, 0, -1))


def test_remembered_copies_share_one_producer_name() -> None:
    """The client builds a new producer-name string per message; thousands of remembered
    stamps per queue must not each keep their own."""
    copies = ResendCopies()
    for sequence in range(3):
        name = "".join(["pulsar-", "producer-7"])  # equal, but a new object each time
        assert not copies.is_copy(name, {SEQ: str(sequence)}, (1, sequence, -1))
    names = [producer for producer, _ in copies._first]
    assert len(names) == 3 and names[0] is names[1] is names[2]
