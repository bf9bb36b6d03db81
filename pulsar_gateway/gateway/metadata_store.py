"""Durable gateway metadata, kept in Pulsar itself.

A keyed changelog topic in a system namespace: loaded into memory at start
(table-view style, last write per key wins) and appended to on every change, so
the state survives a gateway restart and can be shared by several gateways.
Values are JSON; a delete is a message with the `deleted` property. Writes are not
batched by the Pulsar producer: a commit or a declare waits for them, and the batching
delay would be most of that wait.

Group commit, as a database's log does it: the changes of every write started in one
event-loop turn (the offset commits a pipelining client sent in one read, the commits of
many groups at once) go out as ONE record, so they share one durable append and one
round trip, and each writer returns once that record is stored. A group of one key is
written as the plain per-key record; a group of several is a `changes` record whose
payload maps each key to `[value]` (set) or `[]` (deleted), applied in log order on load
like the per-key records (docs/architecture.md, "Metadata store").

The log must stay cheap to load whatever its history, on a backend without compaction
or deletion (pulsar-lite, docs/backend.md), so:

- Only changes are written. A put of the value a key already holds, or a delete of an
  absent key, appends nothing (queue counts saved every second, commits of unchanged
  offsets); it still waits for a write of that key in flight, so "durable once this
  returns" holds. A key whose write failed is written again even if unchanged.
- Snapshots. Once `max(snapshot_every, keys held)` records were appended since the last
  snapshot began, the whole table is appended as one: a `begin` record, chunks of keys,
  an `end` record naming the chunk count. Then the id of `begin` goes to a second, small
  topic (`metadata-snapshots`, a record per snapshot). A load finds the newest pointer
  there, writes a marker into the log (its end), and reads the log from that `begin` on:
  the chunks, and every change after `begin`, applied over them. So a load reads about
  one snapshot and `max(snapshot_every, keys)` records, not the history. The old records
  stay on disk but are not read again.
- Finding the newest pointer: a marker goes into the pointer topic too, and the few
  records before it are read by id (entry ids are dense within a ledger). Where that
  window holds no pointer or would cross into an earlier ledger (pulsar-lite rolls them
  every 50,000 entries, Apache Pulsar also whenever it loads the topic), the whole pointer
  topic is read: one small record per snapshot or load.
- The table is copied only once `begin` is stored. A change stored before `begin` was
  applied to the table before it was sent, so it is in the copy; one stored after
  `begin` is read again and applied over the copy, in log order. Either way the last
  write of each key wins, as in a full replay.
- Followed live (`load(follow=True)`, in a cluster: docs/cluster.md): after the load a
  reader stays at the log's end and applies every other writer's record in log order, so
  every member sees the topics, commits and topology the others write. Each record names
  its writer (`__gw.writer`); a writer's own records were applied before they were sent
  and are not applied again, and another writer's record of a key this one has a write
  of not yet read back is skipped: that write comes later in the log, so it wins, as in
  a replay. `catch_up()` returns once everything stored before it is applied (a member
  does this before serving a group or partition it took over), and a snapshot copies
  the table only once the follower has applied everything before its `begin`.
- A log without snapshots (written by an older version), or with an incomplete one, is
  replayed in full, as before; the snapshot taken right after such a load makes the next
  one short. Control records (marker, begin, chunk, end) look like deletes of a reserved
  key to an older version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pulsar_gateway.gateway.backend.pulsar_backend import BackendError, PulsarBackend
from pulsar_gateway.gateway.backend.reader_stream import EARLIEST
from pulsar_gateway.gateway.messages import MessageKey, OutMessage
from pulsar_gateway.gateway.metadata_records import (
    CHUNK_BYTES,
    CHUNK_KEYS,
    CONTROL,
    DELETED,
    GONE,
    IF_ABSENT,
    INDEX,
    PART_OF,
    RESERVED_KEY,
    UNREADABLE,
    WRITER,
    LogReplay,
    change_records,
    chunks,
    encode,
    format_id,
    loads,
    parse_id,
    signed,
)
from pulsar_gateway.gateway.waiting import cancel_and_wait

log = logging.getLogger("gateway.metadata")

SNAPSHOT_EVERY = 10_000  # records appended before the next snapshot (at least the key count)
TAIL_WINDOW = 64  # pointer records read before the marker, before reading them all

FOLLOW_WAIT_SECONDS = 1.0


@dataclass(slots=True)
class _Group:
    """The changes of the writes of one event-loop turn, appended as one record."""

    changes: list[tuple[str, bytes | None]]  # each key's JSON; None deletes it
    outcome: asyncio.Future[BaseException | None]


class MetadataStore:
    """The gateway's keyed metadata: a table in memory, a changelog with snapshots in Pulsar.

    `snapshot_every` and `chunk_keys` are there for tests and benches; the defaults keep a
    load under a second for tables up to some 100,000 keys.
    """

    def __init__(
        self,
        backend: PulsarBackend,
        namespace: str,
        snapshot_every: int = SNAPSHOT_EVERY,
        chunk_keys: int = CHUNK_KEYS,
    ) -> None:
        self.backend = backend
        self.topic = f"persistent://{namespace}/metadata"
        self.pointers = f"persistent://{namespace}/metadata-snapshots"
        self.snapshot_every = snapshot_every
        self.chunk_keys = chunk_keys
        self._table: dict[str, Any] = {}
        # keys grouped by everything up to their last "/", so that listing one partition's
        # checkpoints does not scan every key of every partition
        self._groups: dict[str, dict[str, Any]] = {}
        self._loaded = False
        self.newest_snapshot = ""  # begin id of the newest complete snapshot; "" for none
        self._since = 0  # records appended since that snapshot began
        self._snapshot_task: asyncio.Task[None] | None = None
        # per key, the outcome (None or the error) of its write in flight
        self._in_flight: dict[str, asyncio.Future[BaseException | None]] = {}
        self._unsure: set[str] = set()  # keys whose last write failed
        self._group: _Group | None = None  # changes waiting for this loop turn's append
        self._group_sends: set[asyncio.Task[Any]] = set()
        self.groups_appended = 0  # group records (of several keys) this store appended
        self.appended = 0  # records this store appended
        self.loaded_records = 0  # records its load read
        self.unreadable_records = 0  # records its load skipped: not JSON
        # following the log live (a cluster): who this store is among the log's writers,
        # its writes not yet read back per key, how far the follower has applied, and
        # who waits for it to get somewhere
        self.writer_id = uuid.uuid4().hex[:16]
        self._signing = False  # sign records from the load on, when following
        self._own_unread: dict[str, int] = {}
        self._follower: asyncio.Task[None] | None = None
        self._applied: MessageKey | None = None
        self._waiters: list[tuple[MessageKey, asyncio.Future[None]]] = []
        self._watchers: list[Callable[[str, Any], None]] = []
        self.followed_records = 0  # other writers' records the follower applied

    def _set(self, key: str, value: Any) -> None:
        self._table[key] = value
        self._groups.setdefault(key[: key.rfind("/") + 1], {})[key] = value

    def _unset(self, key: str) -> None:
        self._table.pop(key, None)
        folder = key[: key.rfind("/") + 1]
        group = self._groups.get(folder)
        if group is not None:
            group.pop(key, None)
            if not group:
                # folders come and go with what they hold (a deleted topic's checkpoints):
                # an empty one kept would grow the index for ever
                del self._groups[folder]

    # ---- loading ---------------------------------------------------------------------------

    async def load(self, follow: bool = False) -> None:
        """Read the newest complete snapshot and the changes after it, up to the log's end;
        with `follow`, then keep applying what other writers append."""
        self._signing = follow
        if await self.backend.is_empty(self.topic):
            log.info("metadata store %s is empty", self.topic)
            self._loaded = True
            if follow:
                end, _ = await self._append_control("marker")
                await self._start_following(end)
            return
        newest = await self._find_newest()
        # Write a marker and read until it comes back: the end of the log, even on pulsar-lite
        # where "last message id" calls are unreliable.
        end, _ = await self._append_control("marker")
        replayed = await self._replay(newest, end) if newest else None
        if replayed is None:
            newest = ""
            replayed = await self._replay("", end)
            assert replayed is not None, "the whole log holds no snapshot to be incomplete"
        table, since = replayed
        for key, value in table.items():
            self._set(key, value)
        self.newest_snapshot, self._since, self._loaded = newest, since, True
        log.info(
            "metadata store loaded: %d keys from %d records (%s)",
            len(self._table),
            self.loaded_records,
            f"snapshot at {newest} and what followed" if newest else "the whole log",
        )
        if follow:
            await self._start_following(end)
        self._maybe_snapshot()

    async def _find_newest(self) -> str:
        """The `begin` id of the newest snapshot named in the pointer topic, or ""."""
        if await self.backend.is_empty(self.pointers):
            return ""
        marker = OutMessage(b"", properties={CONTROL: "marker"})
        end, _ = await self.backend.send(self.pointers, [marker], batching=False)
        ledger, entry, _ = end
        newest = ""
        if entry >= TAIL_WINDOW:
            newest = await self._last_pointer((ledger, entry - TAIL_WINDOW, -1), end)
        return newest or await self._last_pointer(EARLIEST, end)

    async def _last_pointer(self, start: MessageKey, end: MessageKey) -> str:
        stream = await self.backend.open_reader(self.pointers, start)
        newest = ""
        try:
            while True:
                batch = await stream.read_batch(5000, timeout=10, expect_more=True)
                if not batch:
                    raise TimeoutError(f"{self.pointers} did not reach its end")
                for message in batch:
                    if message.id >= end:
                        return newest
                    if CONTROL not in message.properties and message.payload:
                        with contextlib.suppress(ValueError):  # not an id: not a pointer
                            newest = format_id(parse_id(message.payload.decode()))
        finally:
            await stream.close()

    async def _replay(self, newest: str, end: MessageKey) -> tuple[dict[str, Any], int] | None:
        """The table and the number of records read, from the snapshot that begins at
        `newest` (or from the start when "") up to `end`; None if that snapshot is not
        complete."""
        stream = await self.backend.open_reader(
            self.topic, parse_id(newest) if newest else EARLIEST
        )
        replay = LogReplay(newest, self._unreadable)
        try:
            while True:
                batch = await stream.read_batch(5000, timeout=10, expect_more=True)
                if not batch:
                    raise TimeoutError(f"metadata store {self.topic} did not reach its end")
                for message in batch:
                    replay.add(message)
                if batch[-1].id >= end:
                    break
        finally:
            await stream.close()
        self.loaded_records = replay.count
        if not replay.complete():
            log.warning("metadata snapshot at %s is incomplete: reading the whole log", newest)
            return None
        return replay.table(), replay.count

    def _unreadable(self, key: str) -> None:
        if not self.unreadable_records:
            log.warning(
                "metadata store %s: skipping a record that is not JSON (%s)", self.topic, key
            )
        self.unreadable_records += 1

    # ---- following other writers -----------------------------------------------------------

    def watch(self, callback: Callable[[str, Any], None]) -> None:
        """Hear of every change another writer made, as the follower applies it: (key, the
        new value, or None when deleted)."""
        self._watchers.append(callback)

    async def _start_following(self, start: MessageKey) -> None:
        stream = await self.backend.open_reader(self.topic, start)
        self._applied = None
        self._follower = asyncio.ensure_future(self._follow(stream))

    @property
    def following(self) -> bool:
        return self._follower is not None and not self._follower.done()

    async def _follow(self, stream: Any) -> None:
        try:
            while True:
                try:
                    batch = await stream.read_batch(1000, timeout=FOLLOW_WAIT_SECONDS)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the backend reconnects; keep following
                    log.warning("metadata store: following the log failed (%s); retrying", exc)
                    await asyncio.sleep(FOLLOW_WAIT_SECONDS)
                    continue
                for message in batch:
                    self._apply_followed(message)
                if batch:
                    self._applied = batch[-1].id
                    self._wake_waiters()
        finally:
            with contextlib.suppress(Exception):
                await stream.close()

    def _apply_followed(self, message: Any) -> None:
        properties = message.properties or {}
        kind = properties.get(CONTROL)
        conditional = bool(properties.get(IF_ABSENT))
        # a conditional record is decided here, where it is read: the writer's too
        mine = properties.get(WRITER) == self.writer_id and not conditional
        if conditional and message.key in self._table:
            return  # not the first of its key: the one before it stands
        if kind is None:
            changes: dict[str, Any] = {
                message.key: GONE if properties.get(DELETED) else loads(message.payload)
            }
        elif kind == "changes":
            group = loads(message.payload)
            if not isinstance(group, dict):
                return
            changes = {
                key: value[0] if isinstance(value, list) and value else GONE
                for key, value in group.items()
            }
        else:
            if kind == "end" and not mine:
                self._since = 0  # another member's snapshot bounds the next load too
            return
        for key, value in changes.items():
            if mine:
                left = self._own_unread.get(key, 0) - 1
                if left > 0:
                    self._own_unread[key] = left
                else:
                    self._own_unread.pop(key, None)
                continue
            if key in self._own_unread or value is UNREADABLE:
                continue  # this store's own later write of the key wins, as in a replay
            if value is GONE:
                self._unset(key)
            else:
                self._set(key, value)
            self.followed_records += 1
            for watcher in self._watchers:
                try:
                    watcher(key, None if value is GONE else value)
                except Exception:
                    log.exception("metadata store: a watcher failed on %s", key)
        if not mine:
            self._since += len(changes)

    def _wake_waiters(self) -> None:
        applied = self._applied
        if applied is None:
            return
        waiting = []
        for target, future in self._waiters:
            if target <= applied:
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((target, future))
        self._waiters = waiting

    async def _reach(self, target: MessageKey) -> None:
        """Until the follower has applied everything up to `target` (a stored record)."""
        if not self.following or (self._applied is not None and self._applied >= target):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        await future

    async def catch_up(self) -> None:
        """Once this returns, every record stored before the call is applied here (a
        member taking over a group or partition calls it before serving it)."""
        if not self.following:
            return
        end, _ = await self._append_control("marker")
        await self._reach(end)

    # ---- reading ---------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        return self._table.get(key, default)

    def children(self, folder: str) -> list[tuple[str, Any]]:
        """Keys directly below `folder` (which ends with "/"), without scanning the rest."""
        return list(self._groups.get(folder, {}).items())

    def items(self, prefix: str) -> Iterator[tuple[str, Any]]:
        for key, value in list(self._table.items()):
            if key.startswith(prefix):
                yield key, value

    # ---- writing ---------------------------------------------------------------------------

    async def put(self, key: str, value: Any) -> None:
        """Durable once this returns."""
        await self._write({key: value})

    async def put_many(self, items: dict[str, Any]) -> None:
        """Several keys in one append (one round trip); durable once this returns."""
        await self._write(items)

    async def delete(self, key: str) -> None:
        await self._write({key: GONE})

    async def create_if_absent(self, key: str, value: Any) -> Any:
        """Set `key` to `value` unless it has a value; returns the value it has now.

        Alone, the store decides at once. Following other writers (a cluster), two members
        may create the same key at the same instant, each before it has read the other's
        record, and the last-write-wins rule of plain puts would let the later one replace
        the earlier (a topic created with 12 partitions replaced by an auto-created one
        with 1). A conditional record is instead decided where it is read, in log order,
        the same way on every member and on every load: the first one of a key sets it,
        later ones are ignored. The writer waits until its follower has read its own record
        and answers with whatever won (docs/cluster.md, "Creating topics").
        """
        existing = self._table.get(key)
        if existing is not None or not self.following:
            if existing is None:
                await self.put(key, value)
                return value
            return existing
        message = OutMessage(encode(value), key=key, properties={IF_ABSENT: "1"})
        _, last = await self.backend.send(
            self.topic, [signed(message, self.writer_id)], batching=False
        )
        self.appended += 1
        self._since += 1
        await self._reach(last)
        self._maybe_snapshot()
        return self._table.get(key)

    def _holds(self, key: str, value: Any) -> bool:
        """Whether the log already has (or is about to have) `value` for `key`."""
        if key in self._unsure:
            return False
        old = self._table.get(key, GONE)
        if value is GONE or old is GONE:
            return value is old
        # == alone takes 1 for True and 1.0 for 1, which JSON stores differently
        return bool(old == value) and encode(old) == encode(value)

    async def _write(self, changes: dict[str, Any]) -> None:
        """Append the changes that change something, with this loop turn's other writes in
        one record (group commit); GONE deletes a key. Durable once this returns."""
        new: list[tuple[str, bytes | None]] = []
        earlier: list[asyncio.Future[BaseException | None]] = []
        for key, value in changes.items():
            if self._holds(key, value):
                if key in self._in_flight:
                    earlier.append(self._in_flight[key])
                continue
            if value is GONE:
                self._unset(key)
                new.append((key, None))
            else:
                payload = encode(value)  # a value JSON cannot hold fails here, unstored
                self._set(key, value)
                new.append((key, payload))
        if new:
            earlier.append(self._join_group(new))
        for outcome in earlier:
            error = await asyncio.shield(outcome)
            if isinstance(error, BackendError):
                raise error
            if error is not None:
                raise BackendError(f"metadata write failed: {error}") from error

    def _join_group(
        self, changes: list[tuple[str, bytes | None]]
    ) -> asyncio.Future[BaseException | None]:
        """Add changes to this loop turn's group; its outcome is theirs (and, while in
        flight, that of identical puts of the same keys). The group's send starts as a task
        whose first step runs on the next loop turn, once this turn's writers have joined."""
        group = self._group
        if group is None:
            group = self._group = _Group([], asyncio.get_running_loop().create_future())
            send = asyncio.ensure_future(self._send_group(group))
            self._group_sends.add(send)  # the loop keeps only weak references to tasks
            send.add_done_callback(self._group_sent)
        group.changes += changes
        for key, _ in changes:
            self._in_flight[key] = group.outcome
        return group.outcome

    async def _send_group(self, group: _Group) -> None:
        if self._group is group:
            self._group = None  # later writes start the next group
        keys = [key for key, _ in group.changes]
        try:
            records = change_records(group.changes)
        except BaseException as error:
            group.outcome.set_result(error)
            raise
        if len(group.changes) > 1:
            self.groups_appended += 1
        await self._append(records, keys, group.outcome)

    def _group_sent(self, send: asyncio.Task[Any]) -> None:
        self._group_sends.discard(send)
        if not send.cancelled():
            send.exception()  # the writers heard of it through the group's outcome

    async def _append(
        self,
        messages: list[OutMessage],
        keys: list[str],
        outcome: asyncio.Future[BaseException | None] | None = None,
    ) -> tuple[MessageKey, MessageKey]:
        """Send in order; while in flight, the keys' identical puts wait for the outcome."""
        if outcome is None:
            outcome = asyncio.get_running_loop().create_future()
        for key in keys:
            self._in_flight[key] = outcome
        if self._signing:
            messages = [signed(message, self.writer_id) for message in messages]
            for key in set(keys):
                self._own_unread[key] = self._own_unread.get(key, 0) + 1
        error: BaseException | None = None
        try:
            return await self.backend.send(self.topic, messages, batching=False)
        except BaseException as exc:  # cancelled too: the write may or may not be stored
            error = exc
            raise
        finally:
            if error is None:
                self._unsure.difference_update(keys)
            else:
                self._unsure.update(keys)
                for key in set(keys):  # most likely never stored, so never read back
                    if self._own_unread.get(key, 0) > 1:
                        self._own_unread[key] -= 1
                    else:
                        self._own_unread.pop(key, None)
            outcome.set_result(error)
            for key in keys:
                if self._in_flight.get(key) is outcome:
                    del self._in_flight[key]
            # counted in keys: what a load reads after the snapshot stays bounded in keys
            self.appended += max(len(messages), len(keys))
            self._since += max(len(messages), len(keys))
            self._maybe_snapshot()

    async def _append_control(
        self, kind: str, properties: dict[str, str] | None = None, payload: bytes = b""
    ) -> tuple[MessageKey, MessageKey]:
        """A record of the store's own: a delete of a reserved key to an older version."""
        message = OutMessage(
            payload,
            key=RESERVED_KEY,
            properties={DELETED: "1", CONTROL: kind, **(properties or {})},
        )
        return await self._append([message], [])

    # ---- snapshots -------------------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        if not self._loaded or (self._snapshot_task and not self._snapshot_task.done()):
            return
        if self._since >= max(self.snapshot_every, len(self._table)):
            self._snapshot_task = asyncio.ensure_future(self.snapshot())
            self._snapshot_task.add_done_callback(_log_snapshot_failure)

    async def snapshot(self) -> None:
        """Append the whole table; loads from now on start at its `begin` record."""
        begin, _ = await self._append_control("begin")
        appended_before = self.appended
        snapshot_id = format_id(begin)
        # other writers' records stored before `begin` must be in the copy
        await self._reach(begin)
        items = list(self._table.items())  # copied only now: see the module docstring
        count = 0
        for payload in chunks(items, self.chunk_keys, CHUNK_BYTES):
            await self._append_control("chunk", {PART_OF: snapshot_id, INDEX: str(count)}, payload)
            count += 1
        await self._append_control("end", {PART_OF: snapshot_id, INDEX: str(count)})
        pointer = OutMessage(snapshot_id.encode(), properties={PART_OF: snapshot_id})
        await self.backend.send(self.pointers, [pointer], batching=False)
        self.newest_snapshot = snapshot_id
        self._since = self.appended - appended_before
        log.info("metadata snapshot at %s: %d keys in %d chunks", snapshot_id, len(items), count)

    async def close(self) -> None:
        """Stop a snapshot in progress (an incomplete one is never used), and following."""
        await cancel_and_wait(self._snapshot_task, self._follower)


def _log_snapshot_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning(
            "metadata snapshot failed (the previous one stays in use): %s", task.exception()
        )
