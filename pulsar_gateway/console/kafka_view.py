"""Kafka topics, messages and consumer groups for the console, read through the Kafka
storage port (handlers/kafka/port.py) and the group coordinators, filtered by the
caller's rights as the Kafka APIs filter them (handlers/kafka/authorization.py): a topic
is seen with DESCRIBE on its namespace, read with READ, a group seen with DESCRIBE on it.

Everything is bounded: a message page is at most MAX_RECORDS records of at most
MAX_FIELD_BYTES per key, value and header; partition offsets are read only for one topic
or one group at a time (opening a partition log reads it to its end), never for the list
of every topic. In a cluster, only the partitions and groups this member serves are read;
the others are named with their owner's absence ("elsewhere")."""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from pulsar_gateway.gateway.cluster.view import group_key, partition_key
from pulsar_gateway.gateway.reserved_names import namespace_of
from pulsar_gateway.gateway.topic_names import (
    InvalidTopicName,
    kafka_topic_name,
    partition_topic,
    pulsar_topic,
    split_partition_topic,
    validate_kafka_name,
)
from pulsar_gateway.handlers.authorization import Access
from pulsar_gateway.handlers.kafka.port import (
    CommittedOffset,
    KafkaStorage,
    PartitionLog,
    StorageError,
    TopicExists,
    TopicRecord,
    UnknownTopic,
)
from pulsar_gateway.kafka_codec.entry_format import StoredRecord, records_of, topic_format
from pulsar_gateway.security.rights import (
    CLUSTER,
    CLUSTER_NAME,
    CREATE,
    DELETE,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
)

MAX_RECORDS = 100
MAX_FIELD_BYTES = 16 * 1024
MAX_PARTITIONS_SHOWN = 256  # a topic page reads at most this many partitions' offsets
MAX_READ_BYTES = 1 << 20
MAX_TOPIC_PARTITIONS = 1000  # what the console may create at once
SCAN_SECONDS = 10.0  # a reset to a timestamp scans for at most this long per partition
EMPTY_STATES = ("Empty", "Dead")

Json = Any
# Pulsar names of Kafka partitions -> bytes stored, for those the backend can tell
# (gateway/backend/storage_sizes.py, handed over by the composition root)
Sizes = Callable[[list[str]], Awaitable[dict[str, int]]]


class ConsoleError(Exception):
    """A refused or impossible request: `status` and a sentence for the page."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Viewer(Protocol):
    """Who asks (handlers/http_login.py's HttpCaller)."""

    user: str
    access: Access

    @property
    def administrator(self) -> bool: ...


class ClassicGroups(Protocol):
    """The classic group coordinator (handlers/kafka/group_coordinator.py), as read here."""

    groups: dict[str, Any]

    def known_group_ids(self) -> list[str]: ...


class ConsumerGroups(Protocol):
    """The KIP-848 coordinator (handlers/kafka/consumer_groups.py), as read here."""

    def group_ids(self) -> list[str]: ...

    def describe(self, group_id: str) -> Any: ...

    def has_members(self, group_id: str) -> bool: ...


class KafkaView:
    """The console's Kafka pages and actions."""

    def __init__(
        self,
        storage: KafkaStorage,
        classic: ClassicGroups,
        consumer: ConsumerGroups | None,
        tenant: str,
        namespace: str,
        default_entry_format: str,
        max_partitions_total: int,
        sizes: Sizes | None = None,
    ) -> None:
        """`sizes`: None where the backend cannot tell topic sizes (an external Pulsar
        without `pulsar.admin_url`)."""
        self.storage = storage
        self.sizes = sizes
        self.classic = classic
        self.consumer = consumer
        self.tenant = tenant
        self.namespace = namespace
        self.default_entry_format = default_entry_format
        self.max_partitions_total = max_partitions_total

    # --- names and rights ---------------------------------------------------------------

    def kafka_name(self, record: TopicRecord) -> str:
        return kafka_topic_name(record.name, self.tenant, self.namespace)

    def topic_may(self, caller: Viewer, kafka_name: str, operation: str) -> bool:
        """As the Kafka APIs ask: the operation on the topic, by every name it has."""
        if caller.access.unrestricted:
            return True
        path = pulsar_topic(kafka_name, self.tenant, self.namespace).split("://", 1)[-1]
        namespace = namespace_of(path)
        short = path[len(namespace) + 1 :]
        names = (path, short) if namespace == f"{self.tenant}/{self.namespace}" else (path,)
        return caller.access.may(TOPIC, names, operation)

    def _topic(self, caller: Viewer, kafka_name: str, operation: str) -> TopicRecord:
        """The topic's record; 404 alike for one that does not exist and one not allowed."""
        try:
            validate_kafka_name(kafka_name)
        except InvalidTopicName as exc:
            raise ConsoleError(400, str(exc)) from exc
        record = None
        if self.topic_may(caller, kafka_name, operation):
            record = self.storage.topics.get(pulsar_topic(kafka_name, self.tenant, self.namespace))
        if record is None or record.deleted:
            raise ConsoleError(404, f"no topic '{kafka_name}' you may see")
        return record

    def _serves_partition(self, kafka_name: str, index: int) -> bool:
        cluster = self.storage.cluster
        return cluster is None or cluster.serves(partition_key(kafka_name, index))

    def _serves_group(self, group_id: str) -> bool:
        cluster = self.storage.cluster
        return cluster is None or cluster.serves(group_key(group_id))

    def visible_topic_names(self, caller: Viewer) -> set[str]:
        return {
            name
            for record in self.storage.topics.list()
            if not record.deleted
            and self.topic_may(caller, name := self.kafka_name(record), DESCRIBE)
        }

    # --- topics -------------------------------------------------------------------------

    def topics(self, caller: Viewer) -> list[Json]:
        """Every topic the caller may describe, without offsets (see the module's text)."""
        rows: list[Json] = []
        for record in self.storage.topics.list():
            if record.deleted:
                continue
            name = self.kafka_name(record)
            if not self.topic_may(caller, name, DESCRIBE):
                continue
            rows.append(
                {
                    "name": name,
                    "partitions": record.partitions,
                    "entry_format": self._format(record),
                    "configs": dict(record.configs),
                }
            )
        rows.sort(key=lambda row: row["name"])
        return rows

    async def add_sizes(self, rows: list[Json]) -> list[Json]:
        """Each listed topic's bytes stored: the sum over the partitions the backend
        names (None when it names none of them), and `sizes` on whether it can tell."""
        names = {
            row["name"]: [
                partition_topic(pulsar_topic(row["name"], self.tenant, self.namespace), i)
                for i in range(row["partitions"])
            ]
            for row in rows
        }
        found = await self._sizes([n for ns in names.values() for n in ns])
        for row in rows:
            known = [found[n] for n in names[row["name"]] if n in found]
            row["bytes"] = sum(known) if known else None
        return rows

    async def _sizes(self, names: list[str]) -> dict[str, int]:
        if self.sizes is None or not names:
            return {}
        try:
            return await self.sizes(names)
        except StorageError:
            return {}

    def _format(self, record: TopicRecord) -> str:
        return topic_format(record.configs, self.default_entry_format).name

    async def topic(self, caller: Viewer, kafka_name: str) -> Json:
        """One topic with each partition's log start and high watermark."""
        record = self._topic(caller, kafka_name, DESCRIBE)
        partitions = []
        for index in range(min(record.partitions, MAX_PARTITIONS_SHOWN)):
            row: Json = {"partition": index, "log_start": None, "high_watermark": None}
            if self._serves_partition(kafka_name, index):
                log = await self._log(record, index)
                row.update(log_start=log.log_start, high_watermark=log.next_offset)
                row["records"] = log.next_offset - log.log_start
            else:
                row["served_here"] = False
            partitions.append(row)
        stored = [partition_topic(record.name, row["partition"]) for row in partitions]
        sizes = await self._sizes(stored)
        for row, name in zip(partitions, stored, strict=True):
            row["bytes"] = sizes.get(name)
        return {
            "name": kafka_name,
            "sizes": self.sizes is not None,
            "topic_id": record.topic_id,
            "partition_count": record.partitions,
            "entry_format": self._format(record),
            "configs": dict(record.configs),
            "partitions": partitions,
            "may_read": self.topic_may(caller, kafka_name, READ),
        }

    async def _log(self, record: TopicRecord, index: int) -> PartitionLog:
        try:
            return await self.storage.topics.partition_of(record, index)
        except StorageError as exc:
            raise ConsoleError(503, f"the partition cannot be read now: {exc}") from exc

    async def messages(
        self, caller: Viewer, kafka_name: str, partition: int, offset: int, limit: int
    ) -> Json:
        """Up to `limit` records of a partition from `offset` (clamped to the log), keys,
        values and header values base64-encoded (the page shows them as text, JSON or
        hex), each cut at MAX_FIELD_BYTES."""
        record = self._topic(caller, kafka_name, READ)
        if not 0 <= partition < record.partitions:
            raise ConsoleError(404, f"topic '{kafka_name}' has no partition {partition}")
        if not self._serves_partition(kafka_name, partition):
            raise ConsoleError(409, "another cluster member serves this partition")
        limit = max(1, min(limit, MAX_RECORDS))
        log = await self._log(record, partition)
        start = min(max(offset, log.log_start), log.next_offset)
        found: list[StoredRecord] = []
        position = start
        reads = 0
        while position < log.next_offset and len(found) < limit and reads < 8:
            reads += 1
            entries = await log.read(position, MAX_READ_BYTES)
            if not entries:
                break
            for entry in entries:
                for stored in records_of(entry):
                    if stored.offset >= position and len(found) < limit:
                        found.append(stored)
                        position = stored.offset + 1
            if found and found[-1].offset + 1 > position:
                position = found[-1].offset + 1
        return {
            "topic": kafka_name,
            "partition": partition,
            "from": start,
            "log_start": log.log_start,
            "high_watermark": log.next_offset,
            "records": [_record_json(r) for r in found],
        }

    # --- groups -------------------------------------------------------------------------

    def group_ids(self, caller: Viewer) -> list[str]:
        ids = set(self.classic.known_group_ids())
        if self.consumer is not None:
            ids.update(g for g in self.consumer.group_ids() if self._serves_group(g))
        return sorted(g for g in ids if self._group_may(caller, g, DESCRIBE))

    def _group_may(self, caller: Viewer, group_id: str, operation: str) -> bool:
        return caller.access.unrestricted or caller.access.may(GROUP, group_id, operation)

    def groups(self, caller: Viewer) -> list[Json]:
        rows = []
        for group_id in self.group_ids(caller):
            kind, state, members = self._state(group_id)
            committed = self.storage.offsets.offsets(group_id)
            rows.append(
                {
                    "group": group_id,
                    "kind": kind,
                    "state": state,
                    "members": len(members),
                    "partitions": len(committed),
                }
            )
        return rows

    def _state(self, group_id: str) -> tuple[str, str, list[Json]]:
        """(protocol kind, state, members with assignments) of a group; a group known only
        by its committed offsets is Empty."""
        if self.consumer is not None and self.consumer.has_members(group_id):
            group = self.consumer.describe(group_id)
            members = [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "assignment": {t: sorted(p) for t, p in sorted(m.assigned.items())},
                }
                for m in group.members.values()
            ]
            return "consumer", str(group.state), members
        group = self.classic.groups.get(group_id)
        if group is None:
            return "classic", "Empty", []
        members = [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "assignment": consumer_assignment(m.assignment),
            }
            for m in group.members.values()
        ]
        return "classic", str(group.state), members

    async def group(self, caller: Viewer, group_id: str) -> Json:
        """One group: state, members, and per partition its committed offset, the high
        watermark and the lag between them (topics the caller may not describe left out)."""
        if not self._group_may(caller, group_id, DESCRIBE) or group_id not in set(
            self.group_ids(caller)
        ):
            raise ConsoleError(404, f"no group '{group_id}' you may see")
        kind, state, members = self._state(group_id)
        visible = self.visible_topic_names(caller)
        for member in members:
            member["assignment"] = {t: p for t, p in member["assignment"].items() if t in visible}
        offsets = []
        for key, committed in sorted(self.storage.offsets.offsets(group_id).items()):
            pulsar_name, index = split_partition_topic(key)
            topic = kafka_topic_name(pulsar_name, self.tenant, self.namespace)
            if topic not in visible:
                continue
            row: Json = {"topic": topic, "partition": index, "committed": committed.offset}
            record = self.storage.topics.get(pulsar_name)
            if record is not None and self._serves_partition(topic, index):
                log = await self._log(record, index)
                row["high_watermark"] = log.next_offset
                row["lag"] = max(0, log.next_offset - max(committed.offset, log.log_start))
            offsets.append(row)
        return {
            "group": group_id,
            "kind": kind,
            "state": state,
            "members": members,
            "offsets": offsets,
            "lag": sum(row.get("lag", 0) for row in offsets),
        }

    # --- actions ------------------------------------------------------------------------

    async def create_topic(self, caller: Viewer, kafka_name: str, partitions: int) -> Json:
        try:
            validate_kafka_name(kafka_name)
        except InvalidTopicName as exc:
            raise ConsoleError(400, str(exc)) from exc
        access = caller.access
        if not (
            access.unrestricted
            or access.may(CLUSTER, CLUSTER_NAME, CREATE)
            or self.topic_may(caller, kafka_name, CREATE)
        ):
            raise ConsoleError(403, f"you may not create topic '{kafka_name}'")
        pulsar_name = pulsar_topic(kafka_name, self.tenant, self.namespace)
        if self.storage.reserved.holds_topic(pulsar_name):
            raise ConsoleError(403, f"topic '{kafka_name}' is in a namespace the gateway keeps")
        if not 1 <= partitions <= MAX_TOPIC_PARTITIONS:
            raise ConsoleError(400, f"partitions must be 1 to {MAX_TOPIC_PARTITIONS}")
        if self.storage.topics.total_partitions() + partitions > self.max_partitions_total:
            raise ConsoleError(400, "kafka.max_partitions_total would be exceeded")
        try:
            await self.storage.topics.create(pulsar_name, partitions)
        except TopicExists as exc:
            raise ConsoleError(409, f"topic '{kafka_name}' exists") from exc
        except StorageError as exc:
            raise ConsoleError(503, f"the topic could not be created: {exc}") from exc
        return {"created": kafka_name, "partitions": partitions}

    async def delete_topic(self, caller: Viewer, kafka_name: str) -> Json:
        if not self.topic_may(caller, kafka_name, DELETE):
            raise ConsoleError(403, f"you may not delete topic '{kafka_name}'")
        record = self._topic(caller, kafka_name, DELETE)
        try:
            await self.storage.topics.delete(record.name)
        except UnknownTopic as exc:
            raise ConsoleError(404, f"no topic '{kafka_name}'") from exc
        except StorageError as exc:
            raise ConsoleError(503, f"the topic could not be deleted: {exc}") from exc
        return {"deleted": kafka_name}

    async def reset_offsets(
        self, caller: Viewer, group_id: str, kafka_name: str, to: str, timestamp_ms: int
    ) -> Json:
        """`kafka-consumer-groups --reset-offsets --to-earliest|--to-latest|--to-datetime`
        for every partition of one topic: only for a group with no active member (as Kafka
        refuses a non-empty group), with READ on the group and the topic (OffsetCommit's)."""
        if not self._group_may(caller, group_id, READ):
            raise ConsoleError(403, f"you may not reset group '{group_id}'")
        if not group_id:
            raise ConsoleError(400, "a group id is required")
        record = self._topic(caller, kafka_name, READ)
        if to not in ("earliest", "latest", "timestamp"):
            raise ConsoleError(400, "reset to earliest, latest or timestamp")
        if not self._serves_group(group_id):
            raise ConsoleError(409, "another cluster member coordinates this group")
        kind, state, members = self._state(group_id)
        if members or state not in EMPTY_STATES:
            raise ConsoleError(409, f"group '{group_id}' has active members ({state}); stop them")
        now_ms = int(time.time() * 1000)
        entries: dict[str, CommittedOffset] = {}
        for index in range(record.partitions):
            if not self._serves_partition(kafka_name, index):
                raise ConsoleError(409, "another cluster member serves a partition of the topic")
            log = await self._log(record, index)
            if to == "earliest":
                offset = log.log_start
            elif to == "latest":
                offset = log.next_offset
            else:
                offset = await first_offset_at(log, timestamp_ms)
            entries[partition_topic(record.name, index)] = CommittedOffset(offset, "", now_ms)
        try:
            await self.storage.offsets.commit(group_id, entries)
        except StorageError as exc:
            raise ConsoleError(503, f"the offsets could not be stored: {exc}") from exc
        offsets = {split_partition_topic(k)[1]: v.offset for k, v in entries.items()}
        return {"group": group_id, "topic": kafka_name, "offsets": offsets}


async def first_offset_at(log: PartitionLog, wanted_ms: int) -> int:
    """The first offset whose timestamp is at or after `wanted_ms` (Kafka's answer to a
    time), the end of the log when none is; a forward scan bounded by SCAN_SECONDS."""
    offset = log.log_start
    deadline = time.monotonic() + SCAN_SECONDS
    while offset < log.next_offset and time.monotonic() < deadline:
        entries = await log.read(offset, MAX_READ_BYTES)
        if not entries:
            break
        for entry in entries:
            for stored in records_of(entry):
                if stored.offset >= offset and stored.timestamp >= wanted_ms:
                    return stored.offset
                offset = max(offset, stored.offset + 1)
    return log.next_offset


def _field(value: bytes | None) -> Json:
    if value is None:
        return None
    cut = value[:MAX_FIELD_BYTES]
    return {"b64": base64.b64encode(cut).decode(), "size": len(value)}


def _record_json(stored: StoredRecord) -> Json:
    return {
        "offset": stored.offset,
        "timestamp": stored.timestamp,
        "key": _field(stored.key),
        "value": _field(stored.value),
        "headers": [[key, _field(value)] for key, value in stored.headers],
    }


def consumer_assignment(raw: bytes) -> dict[str, list[int]]:
    """The topics and partitions of a classic `consumer` protocol assignment (version,
    then [topic, [partition]]; user data after is ignored); {} for bytes that do not
    parse, which a group of another protocol type (Kafka Connect's) sends."""
    try:
        return dict(_assignment(raw))
    except (struct.error, UnicodeDecodeError, ValueError):
        return {}


def _assignment(raw: bytes) -> Iterable[tuple[str, list[int]]]:
    if len(raw) < 6:
        return
    at = 2  # the version
    (topics,) = struct.unpack_from(">i", raw, at)
    at += 4
    if not 0 <= topics <= len(raw):
        raise ValueError("topic count")
    for _ in range(topics):
        (size,) = struct.unpack_from(">h", raw, at)
        at += 2
        if size < 0 or at + size > len(raw):
            raise ValueError("topic name")
        name = raw[at : at + size].decode()
        at += size
        (count,) = struct.unpack_from(">i", raw, at)
        at += 4
        if not 0 <= count <= (len(raw) - at) // 4:
            raise ValueError("partition count")
        partitions = list(struct.unpack_from(f">{count}i", raw, at))
        at += 4 * count
        yield name, sorted(partitions)
