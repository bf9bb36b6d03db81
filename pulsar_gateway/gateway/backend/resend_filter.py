"""Drops messages that the Pulsar client resent after a broker crash (Kafka partitions:
`ResendFilter`; AMQP queues: `ResendCopies`).

After a reconnect the client resends every message the broker had not acknowledged;
pulsar-lite has no deduplication, so a message stored just before a crash is stored
twice. The gateway stamps each message it writes with its producer's running
sequence (`__gw.seq`); a message whose sequence its producer already passed is a
resend and gets no offset of its own. Pulsar's own producers carry no stamp and
are never filtered.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from pulsar_gateway.gateway.messages import StoredMessage

SEQ = "__gw.seq"
MAX_PRODUCERS = 64
RECENT = 20000  # resends come within the send timeout; keep this many offsets per producer


class ResendFilter:
    def __init__(self, state: dict[str, int] | None = None) -> None:
        # producer name -> last sequence passed; recent sequences -> their offsets
        self._last: OrderedDict[str, int] = OrderedDict(state or {})
        self._offsets: dict[str, OrderedDict[int, int]] = {}

    def original_offset(self, message: StoredMessage, offset: int) -> int | None:
        """None for a new message (recorded at `offset`); else the first copy's offset (-1
        when that copy is older than what is remembered)."""
        stamp = message.properties.get(SEQ)
        if stamp is None:
            return None
        sequence = int(stamp)
        last = self._last.get(message.producer)
        if last is not None and sequence <= last:
            return self._offsets.get(message.producer, {}).get(sequence, -1)
        self._last[message.producer] = sequence
        self._last.move_to_end(message.producer)
        if len(self._last) > MAX_PRODUCERS:
            gone, _ = self._last.popitem(last=False)
            self._offsets.pop(gone, None)
        recent = self._offsets.setdefault(message.producer, OrderedDict())
        recent[sequence] = offset
        if len(recent) > RECENT:
            recent.popitem(last=False)
        return None

    def snapshot(self) -> dict[str, int]:
        return dict(self._last)


class ResendCopies:
    """For a queue's Shared subscription, where the same message comes again after a
    reconnect (unacknowledged, same id) and messages arrive out of order: a message is a
    resend copy when the (producer, sequence) it carries was seen on a message with a
    different id. Remembers the `RECENT` last ones: resends come within the send timeout."""

    def __init__(self, recent: int = RECENT) -> None:
        self.recent = recent
        self._first: OrderedDict[tuple[str, str], Hashable] = OrderedDict()

    def is_copy(self, producer: str, properties: dict[str, str], message_id: Hashable) -> bool:
        stamp = properties.get(SEQ)
        if stamp is None or not producer:
            return False
        key = (producer, stamp)
        first = self._first.get(key)
        if first is None:
            self._first[key] = message_id
            if len(self._first) > self.recent:
                self._first.popitem(last=False)
            return False
        return first != message_id
