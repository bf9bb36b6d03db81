"""Message ids as plain tuples, ordered as Pulsar orders messages within a topic.

`MessageId` compares like the gateway's `MessageKey` (ledger, entry, batch index) and is
one: a whole entry (unbatched, or a send receipt) has batch index -1, the messages of a
batched entry 0..n-1.
"""

from __future__ import annotations

from typing import NamedTuple

from pulsar_gateway.gateway.backend.wire.messages import MessageIdData

_U64 = (1 << 64) - 1
_I64_MAX = (1 << 63) - 1


class MessageId(NamedTuple):
    ledger_id: int
    entry_id: int
    batch_index: int = -1

    @property
    def entry(self) -> tuple[int, int]:
        return (self.ledger_id, self.entry_id)

    def to_data(self, partition: int = -1) -> MessageIdData:
        return MessageIdData(
            ledger_id=self.ledger_id & _U64,
            entry_id=self.entry_id & _U64,
            partition=partition,
            batch_index=self.batch_index,
        )

    @classmethod
    def from_data(cls, data: MessageIdData) -> MessageId:
        return cls(_signed(data.ledger_id), _signed(data.entry_id), data.batch_index)


def partition_index(topic: str) -> int:
    """The partition a topic named `<name>-partition-<n>` is (n), else -1: Pulsar's own
    naming of a partitioned topic's partitions, which message ids carry."""
    _name, mark, index = topic.rpartition("-partition-")
    return int(index) if mark and index.isdigit() else -1


def _signed(value: int) -> int:
    return value - (1 << 64) if value > _I64_MAX else value


# Pulsar's two special positions: before the first message, after the last.
EARLIEST = MessageId(-1, -1, -1)
LATEST = MessageId(_I64_MAX, _I64_MAX, -1)
