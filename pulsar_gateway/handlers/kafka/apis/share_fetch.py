"""ShareFetch and ShareAcknowledge: records acquired from a share partition, and the
acknowledgements that settle them (KIP-932; share_partition.py holds the states).

A ShareFetch first applies the acknowledgements it carries, then, for every partition of
the member's share session, reads the log from the first record it could acquire and
acquires what it read: the answer carries the whole stored batches (as Fetch serves them)
and the offset ranges acquired, with their delivery counts; a share consumer hands only
those to the application. With nothing to acquire it waits up to `max_wait_ms` for the log
to grow or a lock to lapse. Every change is stored through the port before the answer.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.messages import LogEntry, records_in
from pulsar_gateway.handlers.kafka.apis.configs import COMPRESSION_TYPE
from pulsar_gateway.handlers.kafka.apis.share_groups import NOT_OFFERED, coordinator
from pulsar_gateway.handlers.kafka.authorization import group_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import PartitionLog, StorageError
from pulsar_gateway.handlers.kafka.read_committed import below_stable
from pulsar_gateway.handlers.kafka.share_broker import BrokerHold
from pulsar_gateway.handlers.kafka.share_groups import ShareGroups, ShareSession
from pulsar_gateway.handlers.kafka.share_partition import Acquired, SharePartition
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic, open_partition, topic_with_id
from pulsar_gateway.kafka_codec.control_batch import MARKER, TXN, parse_txn_value
from pulsar_gateway.kafka_codec.entry_format import BATCH, FETCH_CODECS, encode_entry_parts
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import READ

OPEN, CLOSE = 0, -1
DEFAULT_MAX_RECORDS = 500
# (group, the Pulsar topic of the topic's incarnation, partition): a topic deleted and
# created again starts its share groups afresh
Key = tuple[str, str, int]
Where = tuple[uuid.UUID, int]  # (topic id, partition) as the request names it


def _leader() -> dict[str, int]:
    return {"leader_id": -1, "leader_epoch": -1}


def _answer(code: int, message: str | None = None) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "acquisition_lock_timeout_ms": 0,
        "responses": [],
        "node_endpoints": [],
    }


async def _session(groups: ShareGroups, request: dict[str, Any]) -> tuple[ShareSession | None, int]:
    """The request's share session: opened (epoch 0), found, or an error code."""
    group_id, member_id, epoch = (
        request["group_id"],
        request["member_id"],
        request["share_session_epoch"],
    )
    if epoch == OPEN:
        return await groups.open_session(group_id, member_id), ErrorCode.NONE
    if epoch == CLOSE:
        return None, ErrorCode.NONE
    found = groups.session(group_id, member_id, epoch)
    if isinstance(found, int):
        return None, found
    return found, ErrorCode.NONE


async def _open(context: KafkaContext, topic_id: uuid.UUID, index: int) -> PartitionLog | int:
    record = topic_with_id(context, topic_id)
    if record is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    found, code = await find_topic(context, context.kafka_name(record.name), False, READ)
    return await open_partition(context, found, code, index)


async def _acknowledge(
    context: KafkaContext,
    groups: ShareGroups,
    group_id: str,
    member_id: str,
    topics: list[dict[str, Any]],
    deferred: dict[Key, Where] | None = None,
) -> dict[tuple[uuid.UUID, int], int]:
    """Apply every acknowledgement batch; each partition's error code. With `deferred`,
    the partitions to store are added to it instead (a ShareFetch stores each partition
    once, after acquiring: one write per partition and request, before the answer)."""
    codes: dict[tuple[uuid.UUID, int], int] = {}
    for topic in topics:
        for part in topic["partitions"]:
            batches = part.get("acknowledgement_batches") or []
            where = (topic["topic_id"], part["partition_index"])
            if not batches:
                continue
            log = await _open(context, *where)
            if isinstance(log, int):
                codes[where] = log
                continue
            record = topic_with_id(context, topic["topic_id"])
            assert record is not None
            key = (group_id, record.stored_name, part["partition_index"])
            async with groups.lock(key):
                partition = groups.partition(key, log.log_start, log.next_offset, record.topic_id)
                partition.expire(groups.clock())
                code: int = ErrorCode.NONE
                for batch in batches:
                    result = partition.acknowledge(
                        member_id,
                        batch["first_offset"],
                        batch["last_offset"],
                        list(batch["acknowledge_types"]),
                    )
                    code = code or result
                try:
                    if deferred is None:
                        await groups.save(key)
                    else:
                        deferred[key] = where
                except StorageError:
                    code = ErrorCode.KAFKA_STORAGE_ERROR
            codes[where] = code
    return codes


_PRODUCER_ID = struct.Struct(">q")
_BATCH_HEADER = 61  # a v2 record batch's header, up to its record count
_TRANSACTIONAL = 0x10  # in a record batch's attributes


def _transactional_producer(entry: LogEntry) -> int | None:
    """The producer id of a transactional entry: a one-record message carries it in its
    `TXN` property (control_batch.py); a Kafka batch stored whole has it in its header
    (attributes at byte 21, producer id at byte 43)."""
    value = entry.message.properties.get(TXN)
    if value is not None:
        parsed = parse_txn_value(value)
        return parsed[0] if parsed else None
    payload = entry.message.payload
    if BATCH not in entry.message.properties or not payload or len(payload) < _BATCH_HEADER:
        return None
    if not int.from_bytes(payload[21:23], "big") & _TRANSACTIONAL:
        return None
    return int(_PRODUCER_ID.unpack_from(payload, 43)[0])


def _present(
    entries: list[LogEntry], aborted: list[tuple[int, int]] | None = None
) -> tuple[list[int], int]:
    """The offsets of the records among the entries read, and one past the last entry.
    With `aborted` (read_committed: the aborted transactions, (producer id, first offset),
    with records among the entries), their records are left out too: gaps, archived."""
    offsets: list[int] = []
    end = entries[-1].offset + records_in(entries[-1].message) if entries else 0
    starts = set(aborted or ())
    # aborted transactions that began before the first entry read: under way at its start
    active = {pid for pid, first in starts if entries and first < entries[0].offset}
    for entry in entries:
        properties = entry.message.properties
        producer_id = _transactional_producer(entry) if aborted else None
        if MARKER in properties:
            if producer_id is not None:
                active.discard(producer_id)  # its transaction ends here
            continue  # a transaction marker holds no record of the topic
        if producer_id is not None and (producer_id, entry.offset) in starts:
            active.add(producer_id)
        if producer_id is not None and producer_id in active:
            continue  # a record of an aborted transaction: never delivered
        offsets.extend(range(entry.offset, entry.offset + records_in(entry.message)))
    return offsets, end


async def _fetch_one(
    context: KafkaContext,
    groups: ShareGroups,
    key: Key,
    topic_id: str,
    log: PartitionLog,
    member_id: str,
    max_bytes: int,
    max_records: int,
    codec: int | None,
    deferred: dict[Key, Where],
) -> tuple[Any, list[dict[str, int]]]:
    """Acquire what can be acquired of one partition: (records bytes, acquired ranges)."""
    async with groups.lock(key):
        partition = groups.partition(key, log.log_start, log.next_offset, topic_id)
        changed = partition.expire(groups.clock())
        hold = await groups.hold(key, log)
        if hold is not None:  # the broker dispatches: only what it handed the gateway
            return await _fetch_handed(
                groups,
                key,
                partition,
                hold,
                changed,
                log,
                member_id,
                max_bytes,
                max_records,
                codec,
                deferred,
            )
        entries, present, read_end = await _read_from(
            groups, key, log, partition.next_wanted(), max_bytes
        )
        acquired = partition.acquire(present, read_end, member_id, groups.clock(), max_records)
        if acquired or changed or read_end or key in deferred:
            deferred.pop(key, None)
            await groups.save(key)
    return _answer_records(entries, acquired, codec)


async def _fetch_handed(
    groups: ShareGroups,
    key: Key,
    partition: SharePartition,
    hold: BrokerHold,
    changed: bool,
    log: PartitionLog,
    member_id: str,
    max_bytes: int,
    max_records: int,
    codec: int | None,
    deferred: dict[Key, Where],
) -> tuple[Any, list[dict[str, int]]]:
    """`_fetch_one` when the broker dispatches (share_broker.py): take what the broker
    handed the gateway, acquire the available records of the entries it holds. Called
    under the share partition's lock."""
    # what was released (lately, or by a lapsed lock) goes back to the broker first, which
    # hands it to any consumer of the subscription: this gateway or another
    hold.reconcile(partition, settle=False)
    handed = hold.take(partition, max_records, groups.settings.max_in_flight)
    available = partition.available_in(hold.ranges())
    start = max(available[0], log.log_start) if available else None
    entries, records, read_end = await _read_from(groups, key, log, start, max_bytes)
    # a transaction marker, an aborted transaction's record: the broker hands out their
    # entries too; archived as gaps, so that the entry can be settled
    kept = set(records)
    gaps = partition.archive([o for o in available if o < read_end and o not in kept])
    wanted = set(available)
    present = [offset for offset in records if offset in wanted]
    acquired = partition.acquire(present, 0, member_id, groups.clock(), max_records)
    if acquired or changed or handed or gaps or key in deferred:
        deferred.pop(key, None)
        await groups.save(key)
    return _answer_records(entries, acquired, codec)


async def _read_from(
    groups: ShareGroups, key: Key, log: PartitionLog, start: int | None, max_bytes: int
) -> tuple[list[LogEntry], list[int], int]:
    """The stored entries from `start` (none for None) a share consumer may see: up to the
    last stable offset and without an aborted transaction's records when the group reads
    committed. Returns (entries, offsets of the records present, where the read ended)."""
    committed = groups.read_committed(key[0])
    limit = log.last_stable_offset if committed else log.next_offset
    entries: list[LogEntry] = []
    if start is not None and start < limit:
        entries = await log.read(start, max(max_bytes, 1))
    aborted = None
    if committed:  # decided transactions only, and none of an aborted one's records
        entries = below_stable(entries, limit)
        if entries:
            end = entries[-1].offset + records_in(entries[-1].message)
            aborted = log.aborted_transactions(min(start or 0, entries[0].offset), end)
    present, read_end = _present(entries, aborted)
    return entries, present, read_end


def _answer_records(
    entries: list[LogEntry], acquired: list[Acquired], codec: int | None
) -> tuple[Any, list[dict[str, int]]]:
    """The stored batches holding the acquired records, and the acquired ranges."""
    if not acquired:
        return b"", []
    wanted = [(a.first, a.last) for a in acquired]
    chosen = [
        entry
        for entry in entries
        if any(
            entry.offset <= last and first < entry.offset + records_in(entry.message)
            for first, last in wanted
        )
    ]
    records, _count = encode_entry_parts(chosen, codec=codec)
    return records, [
        {"first_offset": a.first, "last_offset": a.last, "delivery_count": a.delivery_count}
        for a in acquired
    ]


async def share_fetch(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    groups = coordinator(context)
    if groups is None:
        return _answer(ErrorCode.UNSUPPORTED_VERSION, NOT_OFFERED)
    group_id, member_id = request["group_id"] or "", request["member_id"] or ""
    if not group_allowed(context, group_id, READ):
        return _answer(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed.")
    session, code = await _session(groups, request)
    if code:
        return _answer(code)
    deferred: dict[Key, Where] = {}
    acks = await _acknowledge(context, groups, group_id, member_id, request["topics"], deferred)
    unknown: dict[tuple[uuid.UUID, int], int] = {}
    if session is None:  # the session closes: what the member still holds is released
        await groups.close_session(group_id, member_id)
        await _store(groups, deferred, acks)
        body = _answer(ErrorCode.NONE)
        body["responses"] = _ack_only(acks, fetch=True)
        return body
    for topic in request["topics"]:
        record = topic_with_id(context, topic["topic_id"])
        for part in topic["partitions"]:
            index = part["partition_index"]
            if record is not None and 0 <= index < record.partitions:  # bounds the session
                session.partitions.add((topic["topic_id"], index))
            elif record is None:
                unknown[(topic["topic_id"], index)] = ErrorCode.UNKNOWN_TOPIC_ID
            else:
                unknown[(topic["topic_id"], index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for topic in request.get("forgotten_topics_data") or []:
        record = topic_with_id(context, topic["topic_id"])
        for index in topic["partitions"]:
            if (topic["topic_id"], index) not in session.partitions:
                continue
            session.partitions.discard((topic["topic_id"], index))
            if record is not None:  # what the member holds there goes back to the group
                await groups.release(member_id, (group_id, record.stored_name, index))
    deadline = time.monotonic() + max(0, request["max_wait_ms"]) / 1000
    if unknown and not session.partitions:
        deadline = time.monotonic()  # nothing to wait for: say so at once
    max_bytes = min(request.get("max_bytes") or 0x7FFFFFFF, context.settings.fetch_max_bytes)
    max_records = request.get("max_records") or DEFAULT_MAX_RECORDS
    while True:
        out: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
        waits: list[asyncio.Future[None]] = []
        got = 0
        for topic_id, index in sorted(session.partitions, key=lambda p: (str(p[0]), p[1])):
            part = _partition(index, acks.get((topic_id, index), ErrorCode.NONE))
            log = await _open(context, topic_id, index)
            if isinstance(log, int):
                part["error_code"] = log
                out[(topic_id, index)] = part
                continue
            record = topic_with_id(context, topic_id)
            assert record is not None
            key = (group_id, record.stored_name, index)
            codec = FETCH_CODECS.get(record.configs.get(COMPRESSION_TYPE, ""))
            try:
                records, acquired = await _fetch_one(
                    context,
                    groups,
                    key,
                    record.topic_id,
                    log,
                    member_id,
                    max_bytes,
                    max_records - got,
                    codec,
                    deferred,
                )
            except StorageError as exc:
                part.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc))
                if (topic_id, index) in acks:  # its acknowledgements were not stored either
                    acks[(topic_id, index)] = ErrorCode.KAFKA_STORAGE_ERROR
                    part["acknowledge_error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                records, acquired = b"", []
            if acquired:
                part.update(records=records, acquired_records=acquired)
                count = sum(a["last_offset"] - a["first_offset"] + 1 for a in acquired)
                got += count
                name = context.kafka_name(record.name)
                metrics.RECORDS_OUT.labels(name).inc(count)
                metrics.BYTES_OUT.labels(name).inc(len(records))
                max_bytes = max(max_bytes - len(records), 0)
            else:
                hold = groups.holds.get(key)
                if hold is not None:
                    waits.append(hold.future(groups.settings.max_in_flight))
                else:
                    waits.append(log.data_future())
            out[(topic_id, index)] = part
            if got >= max_records or max_bytes <= 0:
                break
        await _store(groups, deferred, acks)  # before an answer, or a wait
        remaining = deadline - time.monotonic()
        if got or remaining <= 0 or not waits:
            for future in waits:
                future.cancel()
            break
        lapse = _next_lapse(groups, group_id)
        if lapse is not None:
            remaining = min(remaining, max(lapse - groups.clock(), 0.1))
        try:
            await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in waits:
                future.cancel()
    for where, ack_code in acks.items():
        out.setdefault(where, _partition(where[1], ack_code))
        out[where]["acknowledge_error_code"] = ack_code  # as stored, or not (_store)
    for where, fetch_code in unknown.items():
        out.setdefault(where, _partition(where[1], acks.get(where, ErrorCode.NONE)))
        out[where]["error_code"] = fetch_code
    body = _answer(ErrorCode.NONE)
    body["acquisition_lock_timeout_ms"] = groups.lock_ms(group_id)
    body["responses"] = _by_topic(out)
    return body


async def _store(groups: ShareGroups, deferred: dict[Key, Where], acks: dict[Where, int]) -> None:
    """Store the acknowledged partitions the fetch did not store itself."""
    for key, where in list(deferred.items()):
        del deferred[key]
        try:
            await groups.save(key)
        except StorageError:
            acks[where] = ErrorCode.KAFKA_STORAGE_ERROR


def _next_lapse(groups: ShareGroups, group_id: str) -> float | None:
    deadlines = [
        deadline
        for key, partition in groups.partitions.items()
        if key[0] == group_id and (deadline := partition.next_deadline()) is not None
    ]
    return min(deadlines) if deadlines else None


def _partition(index: int, ack_code: int) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "acknowledge_error_code": ack_code,
        "acknowledge_error_message": None,
        "current_leader": _leader(),
        "records": b"",
        "acquired_records": [],
    }


def _by_topic(parts: dict[tuple[uuid.UUID, int], dict[str, Any]]) -> list[dict[str, Any]]:
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for (topic_id, _index), part in parts.items():
        topics.setdefault(topic_id, []).append(part)
    return [{"topic_id": topic_id, "partitions": found} for topic_id, found in topics.items()]


def _ack_only(acks: dict[tuple[uuid.UUID, int], int], fetch: bool) -> list[dict[str, Any]]:
    if fetch:
        return _by_topic({where: _partition(where[1], code) for where, code in acks.items()})
    parts = {
        where: {
            "partition_index": where[1],
            "error_code": code,
            "error_message": None,
            "current_leader": _leader(),
        }
        for where, code in acks.items()
    }
    return _by_topic(parts)


async def share_acknowledge(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    groups = coordinator(context)
    body: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "responses": [],
        "node_endpoints": [],
    }
    if groups is None:
        return {**body, "error_code": ErrorCode.UNSUPPORTED_VERSION, "error_message": NOT_OFFERED}
    group_id, member_id = request["group_id"] or "", request["member_id"] or ""
    if not group_allowed(context, group_id, READ):
        return {**body, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if request["share_session_epoch"] == OPEN:
        return {**body, "error_code": ErrorCode.INVALID_SHARE_SESSION_EPOCH}
    _session_found, code = await _session(groups, request)
    if code:
        return {**body, "error_code": code}
    acks = await _acknowledge(context, groups, group_id, member_id, request["topics"])
    if request["share_session_epoch"] == CLOSE:
        await groups.close_session(group_id, member_id)
    return {**body, "responses": _ack_only(acks, fetch=False)}
