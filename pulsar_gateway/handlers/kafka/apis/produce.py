"""Produce: record batches in, stored in the topic's entry format, real base offsets out.

All partitions of a request are appended concurrently; the response waits until the
partition log has numbered what was appended, so the base offset returned is the one a
later Fetch shows (docs/offsets.md, invariant 3). Idempotent batches go through the
context's producer sequences, so a retried batch is stored once.

The topic's configs are applied as a Kafka broker's LogValidator applies them: a batch over
`max.message.bytes` is MESSAGE_TOO_LARGE before anything is decoded; a record without a key
on a compacted topic, or stamped outside `message.timestamp.before/after.max.ms`, fails the
whole batch with `record_errors` naming each bad record (KIP-467), so clients fail exactly
those; LogAppendTime topics stamp records on append. Records are looked at one by one only
when the topic sets such a rule.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any, NamedTuple

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.messages import OutMessage, payload_bytes
from pulsar_gateway.gateway.waiting import result_within
from pulsar_gateway.handlers.kafka.apis.configs import (
    COMPRESSION_TYPE,
    ProduceRules,
    produce_rules,
)
from pulsar_gateway.handlers.kafka.authorization import transactional_id_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.idempotence import ProducerSequences
from pulsar_gateway.handlers.kafka.port import (
    PartitionLog,
    ProducerStamp,
    StorageError,
    TopicRecord,
)
from pulsar_gateway.handlers.kafka.request_order import ProduceTurn
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic
from pulsar_gateway.kafka_codec.compression import InflateBudget
from pulsar_gateway.kafka_codec.control_batch import mark_transactional
from pulsar_gateway.kafka_codec.entry_format import (
    FETCH_CODECS,
    EntryFormat,
    topic_format,
)
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.record_batch import (
    ATTR_CODEC_MASK,
    DecodedBatch,
    RecordBatchError,
    check_produce_batches,
    decode_batches,
)
from pulsar_gateway.security.rights import WRITE

log = logging.getLogger("gateway.kafka.produce")


class PartitionResult(NamedTuple):
    """One partition's answer."""

    error: ErrorCode
    base_offset: int = -1
    log_start: int = -1
    message: str | None = None
    record_errors: list[dict[str, Any]] = []  # noqa: RUF012 - never mutated
    append_time: int = -1


class Stored(NamedTuple):
    """What storing a partition's messages gave: a base offset, or the error instead."""

    error: ErrorCode
    base_offset: int = -1


async def handle(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any] | None:
    acks = request["acks"]
    budget = InflateBudget(context.settings.max_produce_inflated_bytes, context.inflated)
    try:
        return await _produce(context, header, request, acks, budget)
    finally:
        budget.release()  # the connection's share, once the request is answered


async def _produce(
    context: KafkaContext,
    header: Any,
    request: dict[str, Any],
    acks: int,
    budget: InflateBudget,
) -> dict[str, Any] | None:
    jobs = []
    layout: list[tuple[str, list[int]]] = []
    turn = context.produce_turn
    entry = 0  # the partition entry's position in the request: its place in line (turn)
    for topic in request["topic_data"]:
        name = topic["name"]
        indexes = []
        for partition in topic["partition_data"]:
            indexes.append(partition["index"])
            place = None if turn is None else Place(turn, entry)
            entry += 1
            if acks not in (0, 1, -1):
                if place is not None:
                    place.handed_over()
                jobs.append(_fail(ErrorCode.INVALID_REQUIRED_ACKS))
            else:
                job = _append(
                    context,
                    name,
                    partition["index"],
                    partition["records"],
                    header.api_version,
                    budget,
                    request.get("transactional_id"),
                    place,
                )
                jobs.append(_within(request["timeout_ms"], job))
        layout.append((name, indexes))
    results: list[PartitionResult] = await asyncio.gather(*jobs)
    if acks == 0:
        return None
    answers = iter(results)
    responses = []
    for name, indexes in layout:
        partitions = []
        for index in indexes:
            result = next(answers)
            partitions.append(
                {
                    "index": index,
                    "error_code": result.error,
                    "base_offset": result.base_offset,
                    "log_append_time_ms": result.append_time,
                    "log_start_offset": result.log_start,
                    "record_errors": result.record_errors,
                    "error_message": result.message,
                }
            )
        responses.append({"name": name, "partition_responses": partitions})
    return {"responses": responses, "throttle_time_ms": 0}


def entry_format(context: KafkaContext, record: TopicRecord) -> EntryFormat:
    """The topic's own `pulsar.entry.format`, else the gateway's default."""
    return topic_format(record.configs, context.settings.entry_format)


async def _fail(code: ErrorCode) -> PartitionResult:
    return PartitionResult(code)


async def _within(timeout_ms: int, job: Coroutine[Any, Any, PartitionResult]) -> PartitionResult:
    """The partition's answer, or REQUEST_TIMED_OUT once `timeout_ms` passes (none if 0).

    The job is shielded: a timed-out append runs on to its end, so an idempotent batch is
    settled either way and the client's retry gets the first attempt's offset instead of
    storing the batch again (as Kafka's acks=all timeout, the outcome is unknown to the
    client, never a promise that nothing was written)."""
    task = asyncio.ensure_future(job)
    if timeout_ms <= 0:
        return await task
    try:
        return await result_within(task, timeout_ms / 1000)
    except TimeoutError:
        return PartitionResult(
            ErrorCode.REQUEST_TIMED_OUT, message=f"not stored in {timeout_ms} ms"
        )


class Place(NamedTuple):
    """A partition entry's place in its connection's line (handlers/kafka/request_order.py)."""

    turn: ProduceTurn
    entry: int

    async def wait(self) -> None:
        await self.turn.wait(self.entry)

    def handed_over(self) -> None:
        self.turn.handed_over(self.entry)


async def _append(
    context: KafkaContext,
    name: str,
    index: int,
    records: Any,
    version: int,
    budget: InflateBudget,
    transactional_id: str | None = None,
    place: Place | None = None,
) -> PartitionResult:
    """One partition's batch stored. Everything up to the hand-over to the partition log
    runs beside the connection's other requests; the hand-over itself waits for `place`,
    so the connection's batches reach each partition in the order they were sent."""
    try:
        return await _checked_append(
            context, name, index, records, version, budget, transactional_id, place
        )
    finally:
        if place is not None:
            place.handed_over()  # also when it stopped before: the next may go


async def _checked_append(
    context: KafkaContext,
    name: str,
    index: int,
    records: Any,
    version: int,
    budget: InflateBudget,
    transactional_id: str | None,
    place: Place | None,
) -> PartitionResult:
    record, code = await find_topic(context, name, auto_create=True, operation=WRITE)
    if record is None:
        return PartitionResult(ErrorCode(code))
    if not 0 <= index < record.partitions:
        return PartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if not context.serves_partition(record.name, index):  # another cluster member's
        return PartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if records is None or len(records) == 0:
        return PartitionResult(ErrorCode.CORRUPT_MESSAGE, message="no records")
    rules = produce_rules(record.configs, context.settings.message_max_bytes)
    if len(records) > rules.max_message_bytes:
        # one batch per request (checked below), so this is Kafka's batch size check
        return PartitionResult(
            ErrorCode.MESSAGE_TOO_LARGE,
            message=f"The record batch size in the append to {name}-{index} is {len(records)}"
            f" bytes which exceeds the maximum configured value of {rules.max_message_bytes}.",
        )
    form = entry_format(context, record)
    # a batch stored as sent is read to its header only, unless a rule looks at its records
    each_record = form.name != "kafka" or rules.checks_records
    try:
        # the `pulsar` format's messages decoded in the same pass as the records, unless a
        # rule looks at the records themselves
        as_messages = form.name == "pulsar" and not rules.checks_records
        batches = decode_batches(
            memoryview(records), budget=budget, records=each_record, messages=as_messages
        )
        check_produce_batches(batches, version)
    except RecordBatchError as exc:
        log.warning("rejected produce to %s-%d: %s", name, index, exc)
        return PartitionResult(ErrorCode(exc.code), message=str(exc))
    now = int(time.time() * 1000)
    if rules.checks_records:
        refused = _invalid_records(batches[0], rules, now, f"{name}-{index}")
        if refused is not None:
            return refused
    append_time = now if rules.log_append_time else None
    # one batch a request (check_produce_batches): its messages as the format gives them
    messages = form.encode(batches[0], append_time)
    count = sum(batch.record_count for batch in batches)
    try:
        partition = await context.topics.partition_of(record, index)
    except StorageError as exc:
        return PartitionResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
    if place is not None:
        await place.wait()  # the connection's earlier batches to this partition go first
    batch = batches[0]
    unread = await _read_to_end(context, partition, batch.producer_id)
    if unread is not None:
        return unread
    # from here to the hand-over nothing awaits: what is checked still holds when it is queued
    if not context.serves_partition(record.name, index):  # still, after the waits
        return PartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    # the batch as produced, for fetches at the tail, when the format wrote its records as
    # they are (one message each, their own timestamps: none unset, which reads back as the
    # publish time), and in the codec Fetch serves (the topic's compression.type)
    keep = (
        form.name == "pulsar"
        and append_time is None
        and batch.base_timestamp > 0
        and _served_as_produced(record.configs, batch.attributes & ATTR_CODEC_MASK)
    )
    encoded = batch.raw if keep else None
    if batch.is_transactional:
        # checked with no await before the append is queued: a marker queued after a fence
        # then lands after any batch this check let through (docs/transactions.md)
        fenced = _check_transaction(context, transactional_id, batch, (record.name, index))
        if fenced:
            return PartitionResult(fenced)
        mark_transactional(messages, batch.producer_id, batch.producer_epoch)
    if batch.producer_id < 0:
        pending = _store(partition, messages, name, index, None, encoded)
    else:
        pending = _store_once(context, partition, messages, count, name, index, batch, encoded)
    if place is not None:
        place.handed_over()
    stored = await pending
    if stored.error:
        return PartitionResult(stored.error)
    metrics.RECORDS_IN.labels(name).inc(count)
    metrics.BYTES_IN.labels(name).inc(payload_bytes(messages))
    return PartitionResult(
        ErrorCode.NONE,
        stored.base_offset,
        partition.log_start,
        append_time=-1 if append_time is None else append_time,
    )


async def _read_to_end(
    context: KafkaContext, partition: PartitionLog, producer_id: int
) -> PartitionResult | None:
    """An idempotent producer first seen in this partition is restored from its log, which
    must then hold every batch stored so far (another member's too): the log is read to its
    true end first, once per partition after this member starts serving it, never again for
    a producer already live (docs/cluster.md, "Idempotent producers after a takeover").
    Runs in the connection's turn for the partition, so its batches keep their order."""
    sequences = context.sequences
    for _ in range(3):  # ownership moving meanwhile voids a read: `check` then refuses
        if producer_id < 0 or not sequences.must_reach_end(producer_id, partition):
            return None
        numbered = partition.next_offset
        try:
            await sequences.reach_end(partition)
        except StorageError as exc:
            log.warning("produce to %s: %s", partition.topic, exc)
            return PartitionResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
        if partition.next_offset > numbered:  # what a restore would have missed: worth a line
            log.info(
                "%s: its log was %d records short of its end when producer %d came",
                partition.topic,
                partition.next_offset - numbered,
                producer_id,
            )
    return None


def _check_transaction(
    context: KafkaContext,
    transactional_id: str | None,
    batch: DecodedBatch,
    partition: tuple[str, int],
) -> ErrorCode:
    """A transactional batch is its producer's current epoch's, into a partition added to
    its open transaction (else a zombie's, or one sent out of order); docs/transactions.md."""
    coordinator = context.transactions
    if coordinator is None or transactional_id is None:
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not transactional_id_allowed(context, transactional_id, WRITE):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # another user's transaction
    return coordinator.check_produce(
        transactional_id, batch.producer_id, batch.producer_epoch, partition
    )


def _invalid_records(
    batch: DecodedBatch, rules: ProduceRules, now: int, partition: str
) -> PartitionResult | None:
    """Kafka's per-record validation (LogValidator.validateRecord): a compacted topic needs
    keys, a CreateTime stamp must lie within [now - before.max.ms, now + after.max.ms]. Any
    bad record fails the batch; `record_errors` names each one by its index (KIP-467)."""
    low = None if rules.before_ms is None else now - rules.before_ms
    high = None if rules.after_ms is None else now + rules.after_ms
    errors: list[dict[str, Any]] = []
    bad_timestamp = False
    for position, record in enumerate(batch.records):
        if rules.keys_required and record.key is None:
            problem = (
                f"Compacted topic cannot accept message without key in topic partition {partition}."
            )
        elif record.timestamp != -1 and (
            (low is not None and record.timestamp < low)
            or (high is not None and record.timestamp > high)
        ):
            bad_timestamp = True
            problem = (
                f"Timestamp {record.timestamp} of message with offset {position} is out of"
                f" range. The timestamp should be within [{_bound(low)}, {_bound(high)}]"
            )
        else:
            continue
        errors.append({"batch_index": position, "batch_index_error_message": problem})
    if not errors:
        return None
    if bad_timestamp:
        code = ErrorCode.INVALID_TIMESTAMP
        message = "One or more records have been rejected due to invalid timestamp"
    else:
        code = ErrorCode.INVALID_RECORD
        shown = "; ".join(error["batch_index_error_message"] for error in errors[:3])
        message = (
            f"One or more records have been rejected due to {len(errors)} record errors in"
            f" total, and only showing the first three errors at most: {shown}"
        )
    log.warning("rejected produce to %s: %s", partition, message)
    return PartitionResult(code, message=message, record_errors=errors)


def _bound(value: int | None) -> str:
    return "unbounded" if value is None else str(value)


def _store(
    partition: PartitionLog,
    messages: Sequence[OutMessage],
    name: str,
    index: int,
    producer: ProducerStamp | None = None,
    encoded: memoryview | None = None,
) -> Awaitable[Stored]:
    """Hand the messages to the partition log now (their place is fixed by this call); what
    it returns waits for the base offset."""
    try:
        appended = partition.append(messages, producer, encoded)
    except StorageError as exc:
        log.error("produce to %s-%d failed: %s", name, index, exc)
        return _done(Stored(ErrorCode.KAFKA_STORAGE_ERROR))
    return _stored(appended, name, index)


async def _stored(appended: Awaitable[int], name: str, index: int) -> Stored:
    try:
        return Stored(ErrorCode.NONE, await appended)
    except StorageError as exc:
        log.error("produce to %s-%d failed: %s", name, index, exc)
        return Stored(ErrorCode.KAFKA_STORAGE_ERROR)


async def _done(stored: Stored) -> Stored:
    return stored


def _store_once(
    context: KafkaContext,
    partition: PartitionLog,
    messages: Sequence[OutMessage],
    records: int,
    name: str,
    index: int,
    batch: DecodedBatch,
    encoded: memoryview | None,
) -> Awaitable[Stored]:
    """`_store` for an idempotent producer's batch, checked against its sequences first (in
    the order the batches are handed over). Sequence numbers count records: in the `kafka`
    format a message holds many."""
    sequences = context.sequences
    check = sequences.check(
        batch.producer_id, batch.producer_epoch, partition, batch.base_sequence, records
    )
    if check.code:
        # rare and fatal to the client (librdkafka, the Java producer): worth a line
        log.warning(
            "%s-%d: producer %d epoch %d, sequences %d+%d refused: %s %s",
            name,
            index,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            records,
            check.code.name,
            check.detail,
        )
        return _done(Stored(check.code))
    if check.duplicate is not None:
        return _duplicate(check.duplicate)
    pending = _store(partition, messages, name, index, check.stamp, encoded)
    return _settled(sequences, batch, partition, check.accepted, pending)


async def _duplicate(first_attempt: asyncio.Future[int]) -> Stored:
    """A retried batch: its first attempt's base offset."""
    try:
        return Stored(ErrorCode.NONE, await asyncio.shield(first_attempt))
    except asyncio.CancelledError:
        return Stored(ErrorCode.KAFKA_STORAGE_ERROR)


async def _settled(
    sequences: ProducerSequences,
    batch: DecodedBatch,
    partition: PartitionLog,
    accepted: Any,
    pending: Awaitable[Stored],
) -> Stored:
    stored = await pending
    sequences.settle(
        batch.producer_id, partition, accepted, None if stored.error else stored.base_offset
    )
    return stored


def _served_as_produced(configs: dict[str, str], codec: int) -> bool:
    """Whether Fetch serves a batch of this codec as it came (compression.type `producer`,
    or that codec itself)."""
    served = FETCH_CODECS.get(configs.get(COMPRESSION_TYPE, ""))
    return served is None or served == codec
