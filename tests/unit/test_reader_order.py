"""The reader stream's fast path agrees with its general checks.

`ReaderStream._drain` passes a message on without `_accept`'s checks when it `follows` the
last one (the next of the same batch, or the first of the next entry). That shortcut must
never let through what the general path refuses: a replay (not after the last) or a gap.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.backend.reader_stream import ReaderStream, follows
from pulsar_gateway.gateway.messages import StoredMessage

ids = st.tuples(st.integers(0, 3), st.integers(0, 6), st.one_of(st.just(-1), st.integers(0, 4)))


def _stored(key: tuple[int, int, int], size: int) -> StoredMessage:
    return StoredMessage(key, b"x" * size, "", {}, 0, 0, "p")


@given(last=ids, key=ids, size=st.integers(0, 10))
def test_a_message_that_follows_passes_the_general_checks(last, key, size) -> None:
    if not follows(last, key):
        return
    assert key > last  # not a replay
    ReaderStream._check_dense(last, _stored(key, size))  # no gap: does not raise


def test_follows_the_next_of_a_batch_and_the_first_of_the_next_entry() -> None:
    assert follows((1, 5, 2), (1, 5, 3))
    assert follows((1, 5, 2), (1, 6, 0))
    assert follows((1, 5, -1), (1, 6, -1))
    assert not follows((1, 5, 2), (1, 5, 2))  # a replay
    assert not follows((1, 5, 2), (1, 5, 4))  # a message of the batch skipped
    assert not follows((1, 5, 2), (1, 7, 0))  # an entry skipped
    assert not follows((1, 5, 2), (1, 6, 1))  # the next entry entered mid-batch
    assert not follows((1, 5, 2), (2, 0, 0))  # a new ledger: the general checks decide
