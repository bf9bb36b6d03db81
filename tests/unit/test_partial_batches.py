"""native_queue_consumer.PartialBatches: which messages of a batched queue entry were
acknowledged, until all are (then the entry is acknowledged whole), bounded."""

from __future__ import annotations

from pulsar_gateway.gateway.backend.native_queue_consumer import PartialBatches

ENTRY = ("persistent://public/default/q", "amqp", 7, 3)


def test_an_entry_is_done_once_every_message_is_acknowledged() -> None:
    partial = PartialBatches()
    assert not partial.add(ENTRY, 2, 3)
    assert partial.get(ENTRY) == {2}
    assert not partial.add(ENTRY, 2, 3)  # the same message twice counts once
    assert not partial.add(ENTRY, 0, 3)
    assert partial.add(ENTRY, 1, 3)
    assert partial.get(ENTRY) is None and len(partial) == 0


def test_a_batch_of_one_is_done_at_once_and_never_kept() -> None:
    partial = PartialBatches()
    assert partial.add(ENTRY, 0, 1)
    assert len(partial) == 0


def test_the_oldest_entries_are_forgotten_past_the_bound() -> None:
    partial = PartialBatches(max_entries=2)
    for entry_id in range(3):
        partial.add(("t", "s", 1, entry_id), 0, 5)
    assert len(partial) == 2
    assert partial.get(("t", "s", 1, 0)) is None
    assert partial.get(("t", "s", 1, 2)) == {0}


def test_forget_drops_one_subscription_only() -> None:
    partial = PartialBatches()
    partial.add(("t", "amqp", 1, 1), 0, 2)
    partial.add(("t", "other", 1, 1), 0, 2)
    partial.add(("u", "amqp", 1, 1), 0, 2)
    partial.forget("t", "amqp")
    assert partial.get(("t", "amqp", 1, 1)) is None
    assert partial.get(("t", "other", 1, 1)) == {0}
    assert partial.get(("u", "amqp", 1, 1)) == {0}
