"""Fetch: records from any offset, long-polled up to max_wait for min_bytes.

From v13 on, topics are named by topic id in the request and the answer (KIP-516); an id
no topic has is UNKNOWN_TOPIC_ID. Each partition's answer is record batches built from the
stored entries
(entry_format.py): stored batches as sent, one-record messages re-encoded and compressed
as the topic's `compression.type` says (`producer`: the codec each record came with). Fetch
sessions are not kept: session id 0 tells clients to send full requests.

Sizes follow Kafka's ReplicaManager: the records of the whole response stay within
`max_bytes` (itself capped by `kafka.fetch_max_bytes`, Kafka's `fetch.max.bytes`), each
partition's within `partition_max_bytes`, whole batches only; but the first batch of the
first partition with data comes back even when it alone is larger (KIP-74), so a consumer
always makes progress whatever its limits. A request naming a partition twice is refused
(INVALID_REQUEST), as nothing sensible can be answered to it. read_committed stops at the
last stable offset and lists the aborted transactions (read_committed.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.messages import LogEntry, records_in
from pulsar_gateway.handlers.kafka.apis.configs import (
    COMPRESSION_TYPE,
    LOG_APPEND_TIME,
    TIMESTAMP_TYPE,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import (
    OffsetOutOfRange,
    PartitionLog,
    StorageError,
    TopicRecord,
)
from pulsar_gateway.handlers.kafka.read_committed import READ_COMMITTED, aborted_in, below_stable
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic, topic_with_id
from pulsar_gateway.handlers.loop_turns import LoopTurns
from pulsar_gateway.kafka_codec.entry_format import FETCH_CODECS, encode_entry_parts
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import READ

Wanted = list[tuple[str, list[dict[str, Any]]]]
# partition logs a Fetch opens at once (`_open_logs`)
OPENS_AT_ONCE = 16
UNKNOWN_ID = "\x00unknown topic id "  # no Kafka topic name holds a NUL


async def handle(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + max(0, request["max_wait_ms"]) / 1000
    min_bytes = request["min_bytes"]
    max_bytes = min(request.get("max_bytes", 0x7FFFFFFF), context.settings.fetch_max_bytes)
    wanted, ids = _wanted(context, header.api_version, request)
    if _repeats_a_partition(wanted):
        return _with_ids(_refused(wanted), ids)
    logs: dict[tuple[str, int], PartitionLog | int] = {}
    append_time: set[str] = set()  # topics whose batches are marked LogAppendTime
    codecs: dict[str, int | None] = {}  # each topic's compression.type (entry_format.py)
    to_open: list[tuple[str, TopicRecord, int]] = []
    for name, partitions in wanted:
        if name.startswith(UNKNOWN_ID):
            code: int  # find_topic's codes are ints
            record, code = None, ErrorCode.UNKNOWN_TOPIC_ID
        else:
            record, code = await find_topic(context, name, auto_create=False, operation=READ)
        if record is not None and record.configs.get(TIMESTAMP_TYPE) == LOG_APPEND_TIME:
            append_time.add(name)
        if record is not None:
            codecs[name] = FETCH_CODECS.get(record.configs.get(COMPRESSION_TYPE, ""))
        for partition in partitions:
            index = partition["partition"]
            if record is None:
                logs[(name, index)] = code
            elif not 0 <= index < record.partitions:
                logs[(name, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not context.serves_partition(record.name, index):
                logs[(name, index)] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                log = context.topics.opened(record, index)
                if log is None:
                    to_open.append((name, record, index))
                else:
                    logs[(name, index)] = log
    if to_open:
        logs.update(await _open_logs(context, to_open))
    _prepare_reads(context.turns, wanted, logs, max_bytes)
    committed = request.get("isolation_level", 0) == READ_COMMITTED
    while True:
        body, total = await _collect(
            context.turns, wanted, logs, max_bytes, append_time, codecs, committed, min_bytes
        )
        remaining = deadline - time.monotonic()
        if total >= min_bytes or remaining <= 0 or _has_errors(body):
            return _with_ids(body, ids)
        waits = [log.data_future() for log in logs.values() if not isinstance(log, int)]
        if not waits:
            return _with_ids(body, ids)
        try:
            await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # also when the connection closed mid-poll and cancelled this request: a future
            # left pending counts as a waiter, and the idle sweep never closes a partition
            # with one (PartitionLog.busy), so its memory would be held for good
            for future in waits:
                future.cancel()


async def _open_logs(
    context: KafkaContext, to_open: list[tuple[str, TopicRecord, int]]
) -> dict[tuple[str, int], PartitionLog | int]:
    """The partitions' logs, opened together (OPENS_AT_ONCE at most at a time): a log not
    open yet (the first Fetch after a restart) catches up with its partition first, a few
    round trips to the broker, and a Fetch of many partitions waited for one after another
    (issue 32). KAFKA_STORAGE_ERROR for one that cannot be opened."""
    gate = asyncio.Semaphore(OPENS_AT_ONCE)

    async def one(record: TopicRecord, index: int) -> PartitionLog | int:
        async with gate:
            try:
                return await context.topics.partition_of(record, index)
            except StorageError:
                return ErrorCode.KAFKA_STORAGE_ERROR

    if len(to_open) == 1:
        name, record, index = to_open[0]
        return {(name, index): await one(record, index)}
    opened = await asyncio.gather(
        *(one(record, index) for _name, record, index in to_open), return_exceptions=True
    )
    logs: dict[tuple[str, int], PartitionLog | int] = {}
    for (name, _record, index), log in zip(to_open, opened, strict=True):
        if isinstance(log, BaseException):
            raise log
        logs[(name, index)] = log
    return logs


def _prepare_reads(
    turns: LoopTurns,
    wanted: Wanted,
    logs: dict[tuple[str, int], PartitionLog | int],
    max_bytes: int,
) -> None:
    """The partitions' reads may start what they will wait for (`PartitionLog.prepare_read`)
    before the first is read: the reads go one after another (the response's byte budget is
    shared in order), and after a restart each waited for its own reader from Pulsar (issue
    32). Only as many partitions as the response's budget may reach, in order."""
    left = max_bytes
    for name, partitions in wanted:
        for partition in partitions:
            if left <= 0:
                return
            log = logs[(name, partition["partition"])]
            if not isinstance(log, int):
                size = min(partition["partition_max_bytes"], turns.bytes_per_turn, left)
                log.prepare_read(partition["fetch_offset"], max(size, 1))
                left -= max(partition["partition_max_bytes"], 1)


def _wanted(
    context: KafkaContext, version: int, request: dict[str, Any]
) -> tuple[Wanted, dict[str, uuid.UUID]]:
    """(topic name, partitions) asked for, and for v13+ (which name topics by id, KIP-516)
    each name's topic id; an id no topic has gets a name no topic can have."""
    if version < 13:
        return [(topic["topic"], topic["partitions"]) for topic in request["topics"]], {}
    wanted: Wanted = []
    ids: dict[str, uuid.UUID] = {}
    for topic in request["topics"]:
        record = topic_with_id(context, topic["topic_id"])
        name = context.kafka_name(record.name) if record else f"{UNKNOWN_ID}{topic['topic_id']}"
        ids[name] = topic["topic_id"]
        wanted.append((name, topic["partitions"]))
    return wanted, ids


def _with_ids(body: dict[str, Any], ids: dict[str, uuid.UUID]) -> dict[str, Any]:
    """v13+ answers name each topic by its id again (the codec writes `topic_id` there and
    `topic` below v13)."""
    if ids:
        for topic in body["responses"]:
            topic["topic_id"] = ids[topic["topic"]]
    return body


def _repeats_a_partition(wanted: Wanted) -> bool:
    named = [
        (name, partition["partition"]) for name, partitions in wanted for partition in partitions
    ]
    return len(set(named)) != len(named)


def _refused(wanted: Wanted) -> dict[str, Any]:
    """INVALID_REQUEST for a request that names a partition twice (v7+ read the top-level
    code, older versions the one on every partition); each partition listed once."""
    responses = []
    for name, partitions in wanted:
        indexes = list(dict.fromkeys(partition["partition"] for partition in partitions))
        out = [_partition(index, ErrorCode.INVALID_REQUEST, -1, -1, b"") for index in indexes]
        responses.append({"topic": name, "partitions": out})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.INVALID_REQUEST,
        "session_id": 0,
        "responses": responses,
    }


def _has_errors(body: dict[str, Any]) -> bool:
    return any(p["error_code"] for t in body["responses"] for p in t["partitions"])


async def _collect(
    turns: LoopTurns,
    wanted: Wanted,
    logs: dict[tuple[str, int], PartitionLog | int],
    max_bytes: int,
    append_time: set[str],
    codecs: dict[str, int | None],
    committed: bool = False,
    min_bytes: int = 1,
) -> tuple[dict[str, Any], int]:
    """The response to one pass over the partitions, and its records' bytes. Reads wait
    for storage only while the response has less than `min_bytes`: after that it takes
    what is at hand (docs/offsets.md, "A Fetch answers with what is at hand")."""
    total = 0
    first = True  # no partition has returned records yet: KIP-74's minimum of one batch
    responses = []
    for name, partitions in wanted:
        out = []
        for partition in partitions:
            index = partition["partition"]
            log = logs[(name, index)]
            if isinstance(log, int):
                out.append(_partition(index, log, -1, -1, b""))
                continue
            budget = max(min(partition["partition_max_bytes"], max_bytes - total), 0)
            offset = partition["fetch_offset"]
            records: Any = b""  # empty, never null: librdkafka 2.0.2 rejects a null record set
            code = ErrorCode.NONE
            stable = log.last_stable_offset  # read first: what lies below it is decided
            aborted = None
            if budget > 0 or first:
                try:
                    messages = await _read(
                        turns, log, offset, max(budget, 1), first, min_bytes - total
                    )
                except OffsetOutOfRange:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                    messages = []
                except StorageError:
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                    messages = []
                if committed:
                    messages = below_stable(messages, stable)
                    aborted = aborted_in(log, offset, messages)
                if messages:
                    records, count = encode_entry_parts(
                        messages,
                        budget,
                        first,
                        log_append_time=name in append_time,
                        codec=codecs.get(name),
                    )
                    await turns.after_bytes(len(records))
                    if records:
                        first = False
                        total += len(records)
                        metrics.RECORDS_OUT.labels(name).inc(count)
                        metrics.BYTES_OUT.labels(name).inc(len(records))
            part = _partition(index, code, log.next_offset, log.log_start, records)
            part.update(last_stable_offset=stable, aborted_transactions=aborted)
            out.append(part)
        responses.append({"topic": name, "partitions": out})
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}
    return body, total


async def _read(
    turns: LoopTurns,
    log: PartitionLog,
    offset: int,
    budget: int,
    min_one: bool = True,
    needed: int = 1,
) -> list[LogEntry]:
    """`log.read(offset, budget)`, `turns.bytes_per_turn` at a time with a turn of the loop
    between reads, and before the first while other paced handlers wait for theirs
    (loop_turns.py): a read copies each message twice, and the 4 MiB reads of ten
    never-reading connections all ran in one turn. A read ends at a batch's end; the next
    starts after it. A read is the last when its next message would still have fitted in
    the step (the log had no more): one that stopped short of the step only because its
    next message did not fit is not the partition's end.

    Only the first read may return a message over what is left of `budget` (`min_one`:
    KIP-74's first batch of a response): the encoding drops any other such message, and a
    read below the tail that read one left its cursor past what the fetch served, so the
    next fetch counted again from a checkpoint (issue 32: every fetch after a restart of
    entries over half a step).

    The reads wait for storage only until `needed` bytes are read (the Fetch's min_bytes
    less what it has): a first Fetch after a restart waited for every partition's reader to
    bring its first entries, a read after a batch for the next one (issue 32)."""
    step = turns.bytes_per_turn
    await turns.turn_if_busy()
    room = None if min_one else budget
    entries = slice_ = await log.read(offset, min(budget, step), room, wait=needed > 0)
    size = 0
    while slice_:
        sizes = [entry.message.size for entry in slice_]
        got = sum(sizes)
        size += got
        # the last slice if its biggest message would still have fitted beside the others
        if got + max(sizes) <= step or size >= budget:
            break
        await turns.turn()
        last = entries[-1]
        after = last.offset + records_in(last.message)
        more = await log.read(after, min(budget - size, step), budget - size, size < needed)
        slice_ = [entry for entry in more if entry.offset > last.offset]
        entries += slice_
    return entries


def _partition(index: int, code: int, high: int, start: int, records: Any) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": high,
        "last_stable_offset": high,
        "log_start_offset": start,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }
