"""Resends after a broker crash get no offset of their own; other producers are untouched."""

from __future__ import annotations

from pulsar_gateway.gateway.backend.resend_filter import SEQ, ResendFilter
from pulsar_gateway.gateway.messages import StoredMessage


def _message(producer: str, sequence: int | None, entry: int) -> StoredMessage:
    props = {} if sequence is None else {SEQ: str(sequence)}
    return StoredMessage((1, entry, -1), b"x", "", props, 0, 0, producer)


def test_resent_messages_point_at_their_first_copy() -> None:
    seen = ResendFilter()
    offsets = []
    offset = 0
    stream = [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("a", 2), ("a", 3), ("a", 4), ("b", 1)]
    for entry, (producer, sequence) in enumerate(stream):
        original = seen.original_offset(_message(producer, sequence, entry), offset)
        if original is None:
            offsets.append(offset)
            offset += 1
        else:
            offsets.append(("resend of", original))
    assert offsets == [0, 1, 2, 3, ("resend of", 1), ("resend of", 3), 4, ("resend of", 2)]


def test_unstamped_messages_are_never_filtered() -> None:
    seen = ResendFilter()
    assert all(
        seen.original_offset(_message("pulsar-native", None, i), i) is None for i in range(5)
    )


def test_state_restored_from_a_checkpoint_keeps_filtering() -> None:
    first = ResendFilter()
    for i in range(1, 4):
        first.original_offset(_message("a", i, i), i)
    restored = ResendFilter(first.snapshot())
    assert restored.original_offset(_message("a", 3, 9), 9) == -1  # older than remembered
    assert restored.original_offset(_message("a", 4, 10), 10) is None
