"""How an append learns its offsets (`PartitionLog.append`): it learns its message ids from
the send receipts and asks for their offsets; only the tailer numbers messages, so the
append waits for the tailer to get there (`IdWaiters`), or, when the tailer was quicker,
finds what it numbered (`NumberedWhileAppending`) even if the tail cache dropped it since."""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools

from pulsar_gateway.gateway.messages import MessageKey

# Ids numbered while appends wait, kept so each append finds its offsets even after the tail
# cache dropped them; beyond this many (about 200 bytes each) the oldest half goes, and an
# append that needs one of those scans the log as before.
NUMBERED_KEPT_MAX = 200_000


class NumberedWhileAppending:
    """(message id, offset) of every message the tailer numbers while an append waits.

    An append learns its ids from the send receipts, and the tailer may number those
    messages and the tail cache drop them before the append asks for their offsets: under
    overload (a busy loop, a small cache) it then had to scan the log from a checkpoint with
    a reader of its own for each append, and those readers held what pulsar-lite sent them
    (gigabytes in a 2x overload). This index answers instead. Kept only while an append
    waits, from where the tailer was when the oldest waiting append began (`floors`), and
    bounded by `NUMBERED_KEPT_MAX`; ids arrive in order."""

    def __init__(self) -> None:
        self.ids: list[MessageKey] = []
        self.offsets: list[int] = []
        # per waiting append, the last id the tailer had numbered when it began (None:
        # nothing yet): its own messages come after that
        self.floors: list[MessageKey | None] = []

    @property
    def wanted(self) -> bool:
        """Whether an append waits (what the idle sweep and the tailer's pace ask too)."""
        return bool(self.floors)

    def begin(self, last_numbered: MessageKey | None) -> None:
        self.floors.append(last_numbered)

    def end(self, floor: MessageKey | None) -> None:
        self.floors.remove(floor)
        if not self.floors:
            self.clear()

    def trim(self) -> None:
        """Forget ids numbered before every waiting append began."""
        floors = [floor for floor in self.floors if floor is not None]
        if len(floors) < len(self.floors) or not self.ids:
            return
        cut = bisect.bisect_right(self.ids, min(floors))
        if cut:
            del self.ids[:cut], self.offsets[:cut]

    def add(self, mid: MessageKey, offset: int, last: MessageKey | None = None) -> None:
        """`mid` numbered `offset`; `last`: it stands for the messages of its entry up to
        `last` (an item for a whole entry), one offset each, noted by its first and last
        (an append asks for those two only)."""
        if len(self.ids) >= NUMBERED_KEPT_MAX:
            half = NUMBERED_KEPT_MAX // 2
            del self.ids[:half], self.offsets[:half]
        self.ids.append(mid)
        self.offsets.append(offset)
        if last is not None and last != mid:
            self.ids.append(last)
            self.offsets.append(offset + last[2] - mid[2])

    def offset_of(self, mid: MessageKey) -> int | None:
        """Offset of the first message at or after `mid`, when this index spans it."""
        ids = self.ids
        if not ids or mid < ids[0] or mid > ids[-1]:
            return None
        return self.offsets[bisect.bisect_left(ids, mid)]

    def clear(self) -> None:
        self.ids.clear()
        self.offsets.clear()


class IdWaiters:
    """Appends waiting for the tailer to number a message id, each resolved with the offset
    of the first message numbered at or after its id; the nearest id first."""

    def __init__(self) -> None:
        # (message id, tie-breaker, future); `_index` looks at heap[0] itself, per message
        self.heap: list[tuple[MessageKey, int, asyncio.Future[int]]] = []
        self._seq = itertools.count()

    def wait(self, mid: MessageKey) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        heapq.heappush(self.heap, (mid, next(self._seq), future))
        return future

    def numbered(self, mid: MessageKey, offset: int, last: MessageKey | None = None) -> None:
        """Message `mid` got `offset` (a resend: its first copy's): resolve every wait for
        an id up to it. `last`: `mid` stands for the messages of its entry up to `last`
        (an item for a whole entry), the one at batch index i getting `offset + i - mid's`."""
        heap = self.heap
        end = mid if last is None else last
        while heap and heap[0][0] <= end:
            waited, _, future = heapq.heappop(heap)
            if not future.done():
                inside = waited > mid and waited[:2] == mid[:2]
                future.set_result(offset + waited[2] - mid[2] if inside else offset)

    @property
    def first(self) -> MessageKey | None:
        """The lowest id waited for (None: no wait)."""
        return self.heap[0][0] if self.heap else None

    @property
    def pending(self) -> bool:
        return any(not future.done() for _, _, future in self.heap)

    def fail(self, error: Exception) -> None:
        for _, _, future in self.heap:
            if not future.done():
                future.set_exception(error)
        self.heap.clear()


def at_once(value: int) -> asyncio.Future[int]:
    """An append's offset known at once (a producer's batch already stored whole)."""
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
