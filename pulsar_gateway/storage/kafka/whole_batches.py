"""The tailer's hold on Kafka batches that have not ended yet (docs/offsets.md, "A batch is
numbered whole").

In the `pulsar` entry format a Kafka record batch is one Pulsar message per record, and the
reader may pass on its first records in one read and the rest in the next. The gateway stamps
every message of a batch but the last as having more to follow, so the tailer numbers what
it reads only up to where the first batch that has not ended begins, and holds the rest.

A batch is its writer's: the backend sends a batch's first message alone on one producer
when it opens a ledger and the rest on another, so batches are told apart by the writer the
producers belong to (`writer_of`), not by the producer. Messages of other writers that land
inside a batch are held with it, so the offsets are those of numbering all at once. Each
read is scanned once: what is held keeps where its open batches begin.
"""

from __future__ import annotations

import time

from pulsar_gateway.gateway.backend.resend_filter import writer_of
from pulsar_gateway.gateway.messages import MORE, SEQ, StoredMessage, last_id


class WholeBatches:
    """What may be numbered now, and what waits for its batch's last message."""

    def __init__(self, max_held: int) -> None:
        self.max_held = max_held  # more held than this is no batch of ours: numbered as is
        self.held: list[StoredMessage] = []
        self.since = 0.0  # when the oldest held message was held (0: none is)
        self._open: dict[str, int] = {}  # writer -> where its open batch begins in `held`

    def take(self, messages: list[StoredMessage]) -> list[StoredMessage]:
        """`messages` (the next the reader passed on) added; what may be numbered now, in
        order, up to where the first batch that has not ended begins."""
        open_at = self._open
        producer = writer = ""  # the last message's producer and its writer: mostly the same
        for position, message in enumerate(messages, len(self.held)):
            stamp = message.properties.get(SEQ)
            if stamp is None:
                continue
            if message.producer != producer:
                producer = message.producer
                writer = writer_of(producer)
            if stamp.endswith(MORE):
                if writer not in open_at:
                    open_at[writer] = position
            elif open_at:
                open_at.pop(writer, None)
        combined = self.held + messages if self.held else messages
        cut = min(open_at.values()) if open_at else len(combined)
        if len(combined) - cut > self.max_held:
            cut = len(combined)  # a run this long of "more follows" is no batch of ours
            open_at.clear()
        ready, self.held = combined[:cut], combined[cut:]
        if cut and open_at:
            self._open = {writer: at - cut for writer, at in open_at.items()}
        if not self.held:
            self.since = 0.0
        elif not self.since or cut:
            self.since = time.monotonic()
        return ready

    def release(self) -> list[StoredMessage]:
        """Everything held, ended or not (a batch whose rest will not come)."""
        ready, self.held = self.held, []
        self._open = {}
        self.since = 0.0
        return ready

    @property
    def last_id(self) -> tuple[int, int, int] | None:
        """The id of the last message held (an item for a whole entry: its last's)."""
        return last_id(self.held[-1]) if self.held else None


# How far past its byte limit a read goes to end a batch: more than any batch the gateway
# takes (its message size limit), so only a batch whose rest never came is cut by it.
BATCH_SLACK_BYTES = 16 * 1024 * 1024


class BatchEdges:
    """Where a fetch may stop: after a message that leaves no writer's batch open.

    A read cut by its byte limit inside a batch would hand a consumer part of a batch that
    Kafka makes visible whole (docs/offsets.md, "A batch is numbered whole"); a read keeps
    going past its limit to the batch's end instead, as Kafka returns a whole first batch
    larger than the limit. A read that starts inside a batch sees its rest close nothing."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: set[str] = set()

    def saw(self, message: StoredMessage) -> None:
        """`message` is the next one the read returns."""
        stamp = message.properties.get(SEQ)
        if stamp is None:
            return
        if stamp.endswith(MORE):
            self._open.add(writer_of(message.producer))
        elif self._open:
            self._open.discard(writer_of(message.producer))

    @property
    def at_edge(self) -> bool:
        return not self._open

    def may_stop(self, size: int, max_bytes: int) -> bool:
        """Whether a read that has `size` bytes and would pass `max_bytes` stops here."""
        return not self._open or size > max_bytes + BATCH_SLACK_BYTES
