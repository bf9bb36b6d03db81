"""The records of the metadata changelog (metadata_store.py): their properties, the
`changes` record that carries a group commit, snapshot chunks, and the JSON both are in.

Split from the store so that the store reads as the protocol (load, follow, write,
snapshot) and this as the format; docs/architecture.md, "Metadata store".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from pulsar_gateway.gateway.messages import MessageKey, OutMessage

CHUNK_KEYS = 2_000  # keys per snapshot chunk...
CHUNK_BYTES = 1024 * 1024  # ...fewer when they would make a chunk bigger than this

DELETED = "deleted"
CONTROL = "__gw.meta"  # marker | begin | chunk | end | changes
PART_OF = "__gw.snapshot"  # chunk and end records: the id of their snapshot's begin
INDEX = "__gw.chunk"  # a chunk's number; on the end record, how many chunks there are
RESERVED_KEY = "__gw.metadata__"
WRITER = "__gw.writer"  # which store instance appended a record (followers skip their own)
# A record that sets its key only where the key is absent at its place in the log: the first
# such record of a key wins on every reader, whoever wrote it (`create_if_absent`).
IF_ABSENT = "__gw.if_absent"


class _Gone:
    """The value of a deleted key in a batch of changes."""


GONE = _Gone()


# one encoder for every write: json.dumps with non-default separators builds a new one per
# call, which cost more than the encoding of a small offset record
_JSON = json.JSONEncoder(separators=(",", ":"))


def encode(value: Any) -> bytes:
    return _JSON.encode(value).encode()


def format_id(mid: MessageKey) -> str:
    return ":".join(str(part) for part in mid)


def parse_id(text: str) -> MessageKey:
    ledger, entry, batch = (int(part) for part in text.split(":"))
    return (ledger, entry, batch)


def chunks(items: list[tuple[str, Any]], keys: int, max_bytes: int) -> Iterator[bytes]:
    """The items as JSON objects of at most `keys` keys, halved while over `max_bytes`."""
    parts = [items[i : i + keys] for i in reversed(range(0, len(items), keys))]
    while parts:
        part = parts.pop()
        payload = encode(dict(part))
        if len(payload) > max_bytes and len(part) > 1:
            half = len(part) // 2
            parts += [part[half:], part[:half]]
            continue
        yield payload


def apply_changes(table: dict[str, Any], changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if value is GONE:
            table.pop(key, None)
        else:
            table[key] = value


def change_records(changes: list[tuple[str, bytes | None]]) -> list[OutMessage]:
    """The log records of a group of changes (each key's JSON, None for a delete), in order:
    the plain per-key record for one key; for several, `changes` records of at most
    CHUNK_KEYS keys and about CHUNK_BYTES, made of the values as they were encoded when
    written. A key changed twice in the group keeps its last change (only the last one
    counts on load either way)."""
    if len(changes) == 1:
        key, payload = changes[0]
        if payload is None:
            return [OutMessage(b"", key=key, properties={DELETED: "1"})]
        return [OutMessage(payload, key=key)]
    latest = dict(changes)
    properties = {DELETED: "1", CONTROL: "changes"}
    records: list[OutMessage] = []
    members: list[bytes] = []
    size = 0
    for key, payload in latest.items():
        member = encode(key) + (b":[]" if payload is None else b":[" + payload + b"]")
        if members and (len(members) >= CHUNK_KEYS or size + len(member) > CHUNK_BYTES):
            records.append(_changes_record(members, properties))
            members, size = [], 0
        members.append(member)
        size += len(member) + 1
    records.append(_changes_record(members, properties))
    return records


def _changes_record(members: list[bytes], properties: dict[str, str]) -> OutMessage:
    return OutMessage(b"{" + b",".join(members) + b"}", key=RESERVED_KEY, properties=properties)


def _count(text: str) -> int:
    """An end record's number of chunks; -1 (the snapshot incomplete) when not a number."""
    try:
        return int(text)
    except ValueError:
        return -1


class _Unreadable:
    """A followed record that is not JSON: skipped."""


UNREADABLE = _Unreadable()


def loads(payload: bytes | None) -> Any:
    try:
        return json.loads(payload or b"null")
    except (ValueError, RecursionError):
        return UNREADABLE


def signed(message: OutMessage, writer: str) -> OutMessage:
    return OutMessage(
        message.payload,
        key=message.key,
        properties={**(message.properties or {}), WRITER: writer},
        event_time=message.event_time,
    )


class LogReplay:
    """The table a run of changelog records leaves, folded in log order: per-key records,
    `changes` records and the chunks of the snapshot that begins at `newest` (none when
    ""; the chunks of other snapshots are skipped). A record that is not JSON (a `changes`
    record or a chunk: not a JSON object) is passed to `unreadable` and skipped, as the
    follower skips it; a skipped chunk leaves the snapshot incomplete. No record stops a
    load: the log is read at every start, and one bad record must not keep the gateway down."""

    def __init__(self, newest: str, unreadable: Callable[[str], None]) -> None:
        self.newest = newest
        self.unreadable = unreadable
        self.count = 0  # records read
        self.base: dict[str, Any] = {}  # the snapshot's chunks
        self.changes: dict[str, Any] = {}  # applied over them at the end
        # records that set a key only where absent, with the changes before each of them
        # (`changes` is applied over the snapshot at the end, so their test waits too)
        self.conditional: list[tuple[dict[str, Any], str, Any]] = []
        self.chunks: set[str] = set()
        self.chunk_count = -1

    def add(self, message: Any) -> None:
        """Fold in the next record of the log (a backend message: key, payload, properties)."""
        self.count += 1
        properties = message.properties
        kind = properties.get(CONTROL)
        if kind is None:
            if properties.get(DELETED):
                self.changes[message.key] = GONE
                return
            value = loads(message.payload)
            if value is UNREADABLE:
                self.unreadable(message.key)
                return
            if properties.get(IF_ABSENT):
                self.conditional.append((self.changes, message.key, value))
                self.changes = {}
            else:
                self.changes[message.key] = value
        elif kind == "changes":
            group = loads(message.payload or b"{}")
            if not isinstance(group, dict):  # as the follower (metadata_store.py) skips it
                self.unreadable(RESERVED_KEY)
                return
            for key, value in group.items():
                self.changes[key] = value[0] if isinstance(value, list) and value else GONE
        elif self.newest and properties.get(PART_OF) == self.newest:
            if kind == "chunk":
                chunk = loads(message.payload or b"{}")
                if not isinstance(chunk, dict):
                    # not counted: the snapshot is then incomplete and the load reads the
                    # whole log instead of a table with a hole in it
                    self.unreadable(RESERVED_KEY)
                    return
                self.base.update(chunk)
                self.chunks.add(properties.get(INDEX, ""))
            elif kind == "end":
                self.chunk_count = _count(properties.get(INDEX, "-1"))

    def complete(self) -> bool:
        """Whether the snapshot (if any) was read whole: its end record and every chunk."""
        if not self.newest:
            return True
        return self.chunk_count >= 0 and self.chunks == {str(i) for i in range(self.chunk_count)}

    def table(self) -> dict[str, Any]:
        """The table the records leave (call once, after the last `add`)."""
        base = self.base
        for before, key, value in self.conditional:
            apply_changes(base, before)
            base.setdefault(key, value)
        apply_changes(base, self.changes)
        return base
