"""partial_acks: which messages of a batched queue entry were acknowledged, until all are
(then the entry is acknowledged whole), bounded, kept a while once done when asked, and
written to and read from records (what the AMQP store keeps in the metadata store)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.backend.partial_acks import PartialBatches, QueueAcks


def test_an_entry_is_done_once_every_message_is_acknowledged() -> None:
    acks = QueueAcks()
    assert not acks.add(7, 3, 2, 3)
    assert acks.get(7, 3) == {2}
    assert not acks.add(7, 3, 2, 3)  # the same message twice counts once
    assert not acks.add(7, 3, 0, 3)
    assert acks.add(7, 3, 1, 3)
    assert acks.get(7, 3) is None and len(acks) == 0


def test_a_batch_of_one_is_done_at_once_and_never_kept() -> None:
    acks = QueueAcks()
    assert acks.add(7, 3, 0, 1)
    assert len(acks) == 0


def test_the_oldest_entries_are_forgotten_past_the_bound() -> None:
    acks = QueueAcks(max_entries=2)
    for entry_id in range(3):
        acks.add(1, entry_id, 0, 5)
    assert len(acks) == 2
    assert acks.get(1, 0) is None
    assert acks.get(1, 2) == {0}


def test_an_entry_done_is_kept_for_its_time_when_asked() -> None:
    acks = QueueAcks(keep_done=1.0)
    assert not acks.add(1, 1, 0, 2)
    assert acks.add(1, 1, 1, 2)
    assert acks.done(1, 1) and acks.get(1, 1) == {0, 1} and acks.keeps_done
    assert not acks.add(1, 1, 1, 2)  # acknowledged again (a redelivery): nothing new
    changes = acks.changes
    acks.prune()
    assert acks.done(1, 1)  # not yet
    acks.prune(now=float("inf"))
    assert acks.get(1, 1) is None and not acks.keeps_done and acks.changes > changes


def test_records_load_back_what_was_acknowledged_in_part() -> None:
    acks = QueueAcks(keep_done=1.0)
    acks.add(3, 4, 0, 70)
    acks.add(3, 4, 69, 70)
    acks.add(3, 5, 0, 1)  # done: its ACK is sent before a record is written, so not in it
    assert acks.done(3, 5)
    copy = QueueAcks()
    copy.load(acks.records(), keep_done=5.0)
    assert copy.get(3, 4) == {0, 69} and not copy.done(3, 4)
    assert copy.get(3, 5) is None
    assert copy.records() == acks.records() == [[3, 4, 70, format(1 << 69 | 1, "x")]]


def test_a_record_of_an_entry_all_acknowledged_loads_as_done() -> None:
    acks = QueueAcks()
    acks.load([[1, 2, 3, "7"]], keep_done=1.0)
    assert acks.done(1, 2) and acks.keeps_done


def test_malformed_records_are_skipped() -> None:
    acks = QueueAcks()
    acks.add(9, 9, 1, 3)
    acks.load(
        [[1, 2], ["x", 1, 2, "1"], [1, 1, 2, "zz"], [1, 1, 2, "4"], [1, 1, 0, "0"], [2, 2, 3, "5"]],
        keep_done=1.0,
    )
    assert acks.get(9, 9) is None  # replaced
    assert len(acks) == 1 and acks.get(2, 2) == {0, 2}


@given(
    size=st.integers(1, 300),
    indexes=st.lists(st.integers(0, 299), max_size=50),
)
def test_any_acknowledged_set_survives_a_record(size: int, indexes: list[int]) -> None:
    acks = QueueAcks(keep_done=1.0)
    for index in indexes:
        if index < size:
            acks.add(5, 6, index, size)
    copy = QueueAcks()
    copy.load(acks.records(), keep_done=1.0)
    if acks.done(5, 6):
        assert copy.get(5, 6) is None
    else:
        assert copy.get(5, 6) == acks.get(5, 6)


def test_forget_drops_one_subscription_only() -> None:
    partial = PartialBatches()
    partial.of("t", "amqp").add(1, 1, 0, 2)
    partial.of("t", "other").add(1, 1, 0, 2)
    partial.of("u", "amqp").add(1, 1, 0, 2)
    assert len(partial) == 3
    partial.forget("t", "amqp")
    assert partial.of("t", "amqp").get(1, 1) is None
    assert partial.of("t", "other").get(1, 1) == {0}
    assert partial.of("u", "amqp").get(1, 1) == {0}
