"""Where a durable Pulsar subscription must sit for a Kafka committed offset N.

`acknowledge_cumulative(id)` moves a subscription's cursor past the whole Pulsar
entry holding `id`: pulsar-lite ignores the batch index (seen in a test: acking
index 4 of a 10-message batch acknowledged all ten). So the id returned is the last
message BEFORE the entry that holds offset N. A Pulsar consumer on the subscription
then receives every record from N on, and, when N is in the middle of a batch entry,
also the earlier records of that one entry (never fewer records than the group has
yet to read: at least once, never a gap). Records produced one per entry, as
separate sends, give an exact position; a stored Kafka record batch is one entry.
"""

from __future__ import annotations

from pulsar_gateway.gateway.messages import WHOLE_ENTRY, MessageKey, last_id
from pulsar_gateway.gateway.topic_names import (
    UnknownPartition,
    logical_topic,
    split_partition_topic,
)
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from pulsar_gateway.storage.kafka.topics import TopicService


async def ack_position(
    topics: TopicService, partition_topic: str, offset: int
) -> MessageKey | None:
    """The id to acknowledge cumulatively for a commit of `offset` on the Pulsar topic that
    stores a partition (`TopicService.stored_partition`); None: nothing to ack."""
    stored, index = split_partition_topic(partition_topic)
    name, incarnation = logical_topic(stored)
    record = topics.get(name)
    if record is None or record.incarnation != incarnation or index >= record.partitions:
        raise UnknownPartition(partition_topic)
    log = await topics.partition_of(record, index)
    return await entry_start_position(log, offset)


async def entry_start_position(log: PartitionLog, offset: int) -> MessageKey | None:
    end = min(offset, log.next_offset)
    if end <= log.log_start:
        return None
    if end == log.next_offset:
        return await message_id_at(log, end - 1)  # its entry is complete: ack it whole
    # the last message before the Pulsar entry that holds offset `end`: that entry may
    # hold earlier records too (a Pulsar batch, or a stored Kafka record batch). Message ids
    # grow with offsets, so the entry's first record is found by steps back that double,
    # then halving: a walk back record by record held the loop for seconds on batches of
    # thousands (issue 31's ETL), and the steps stay near the entry (history reads cost)
    holder = await log.entry_at(end)
    entry = holder.message.id[:2]
    high, step = holder.offset, 1  # the entry's first record is at or before `high`
    low = max(log.log_start, high - step)
    while low > log.log_start and (await log.entry_at(low)).message.id[:2] >= entry:
        high, step = low, step * 2
        low = max(log.log_start, high - step)
    while low < high:  # the entry starts in (low, high], or at low == log_start
        middle = (low + high) // 2
        if (await log.entry_at(middle)).message.id[:2] < entry:
            low = middle + 1
        else:
            high = middle
    if low <= log.log_start:
        return None
    previous = await log.entry_at(low - 1)
    return last_id(previous.message)  # an item for a whole entry: its last message


async def message_id_at(log: PartitionLog, offset: int) -> MessageKey:
    """The Pulsar message id holding `offset`: of a message the tailer took for a whole
    entry (`WHOLE_ENTRY`), the entry's message at that record (one record each)."""
    at, message = await log.entry_at(offset)
    mid = message.id
    if WHOLE_ENTRY in message.properties:
        return (mid[0], mid[1], mid[2] + offset - at)
    return mid
