"""Steps of a partition's appends run in the order the appends were sent.

A produced batch is kept beside its records in the tail cache only after every batch kept
before it (tail_store.py: kept batches are in offset order), but appends finish in whatever
order their waits end. A later batch's send receipt often reaches the loop after the tailer
has numbered that batch while an earlier append still waits to resume, so the later one was
kept first and the earlier one turned away: 38 of 49 produced batches in one 200k-record run,
whose records a tail fetch then had to unpack and encode again one by one.

Each append that may keep its batch takes a ticket before it sends; when it is done it
hands in its step (or nothing), which runs once every earlier ticket's has run. No append
waits for another: a step whose turn has not come is held, with what it refers to, until
the earlier appends finish, which each of them does, stored or failed.
"""

from __future__ import annotations

from collections.abc import Callable


class SendOrder:
    def __init__(self) -> None:
        self._issued = 0
        self._turn = 0  # the ticket whose step runs next
        self._held: dict[int, Callable[[], None] | None] = {}

    def ticket(self) -> int:
        """Taken right before the send, so tickets follow the order of the sends."""
        ticket = self._issued
        self._issued += 1
        return ticket

    def done(self, ticket: int, step: Callable[[], None] | None) -> None:
        """The append holding `ticket` is finished; `step` (None: nothing to do) runs now
        if every earlier ticket's has, otherwise right after the last of those."""
        self._held[ticket] = step
        while self._turn in self._held:
            ready = self._held.pop(self._turn)
            self._turn += 1
            if ready is not None:
                ready()

    @property
    def held(self) -> int:
        """Steps waiting for an earlier append."""
        return len(self._held)
