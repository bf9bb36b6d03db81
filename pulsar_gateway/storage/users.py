"""The users store: every gateway's users, shared through Pulsar, followed live.

Records are the metadata store's (gateway/metadata_store.py): key `user/<name>`, a JSON
value (credentials.make_record: SCRAM salted keys, never a password), a `deleted`
property for a removal, `__gw.meta` control records to skip. They live in their own topic,
`persistent://<metadata_namespace>/users`, beside the metadata topic, so that a gateway
can follow them without re-reading every offset checkpoint: each gateway keeps a reader at
the topic's tail and applies a change as it arrives, so `pulsar-gateway users add|remove|
passwd` (which writes from outside the process) takes effect on every gateway within
a second or so, without a restart.

Each user's rights (security/rights.py) are records of their own, key `rights/<name>`, in
the same topic: followed the same way, so `pulsar-gateway users grant|revoke` and Kafka's
CreateAcls/DeleteAcls apply on every gateway without a restart, and changing a password
(which rewrites the user's record) leaves the rights alone. This class implements the
authorizer's `RightsStore` port (handlers/authorization.py).

Loading stops at a marker record written first (as the metadata store does: the end of the
log even where "last message id" is unreliable); listeners start only after it, so a user
removed long ago is never briefly present.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.backend.reader_stream import EARLIEST
from pulsar_gateway.gateway.messages import OutMessage, StoredMessage
from pulsar_gateway.gateway.metadata_store import CONTROL, DELETED
from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.security.credentials import SCRAM_MECHANISMS, make_record
from pulsar_gateway.security.rights import (
    NO_RIGHTS,
    Rights,
    from_record,
    to_record,
)

log = logging.getLogger("gateway.users")

PREFIX = "user/"
RIGHTS_PREFIX = "rights/"
FOLLOW_WAIT_SECONDS = 1.0


def users_topic(metadata_namespace: str) -> str:
    return f"persistent://{metadata_namespace}/users"


class UsersStore:
    """Users by name, loaded then followed; implements the listeners' `UserDirectory`."""

    def __init__(self, backend: PulsarBackend, metadata_namespace: str) -> None:
        self.backend = backend
        self.topic = users_topic(metadata_namespace)
        self._users: dict[str, dict[str, Any]] = {}
        self._rights: dict[str, Rights] = {}
        self._follower: asyncio.Task[None] | None = None
        self.changes_applied = 0

    # ---- reading ---------------------------------------------------------------------------

    def lookup(self, name: str) -> Mapping[str, Any] | None:
        return self._users.get(name)

    def names(self) -> list[str]:
        return sorted(self._users)

    def rights_of(self, user: str) -> Rights:
        return self._rights.get(user, NO_RIGHTS)

    def all_rights(self) -> Mapping[str, Rights]:
        return dict(self._rights)

    async def load(self, follow: bool = True) -> None:
        """Read to the end of the log; then, with `follow`, keep applying what comes."""
        marker = OutMessage(b"", key="__gw.users__", properties={CONTROL: "marker", DELETED: "1"})
        end, _ = await self.backend.send(self.topic, [marker], batching=False)
        stream = await self.backend.open_reader(self.topic, EARLIEST)
        try:
            while True:
                batch = await stream.read_batch(5000, timeout=10, expect_more=True)
                if not batch:
                    raise TimeoutError(f"users store {self.topic} did not reach its end")
                for message in batch:
                    self._apply(message)
                if batch[-1].id >= end:
                    break
        except BaseException:
            await stream.close()
            raise
        log.info("users store loaded: %d users", len(self._users))
        if not follow:
            await stream.close()
            return
        self._follower = asyncio.ensure_future(self._follow(stream))

    async def _follow(self, stream: Any) -> None:
        try:
            while True:
                try:
                    batch = await stream.read_batch(1000, timeout=FOLLOW_WAIT_SECONDS)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the backend reconnects; keep following
                    log.warning("users store: reading changes failed (%s); retrying", exc)
                    await asyncio.sleep(FOLLOW_WAIT_SECONDS)
                    continue
                for message in batch:
                    if self._apply(message):
                        self.changes_applied += 1
                        log.info("users store: %s changed", message.key)
        finally:
            with contextlib.suppress(Exception):
                await stream.close()

    def _apply(self, message: StoredMessage) -> bool:
        properties = message.properties or {}
        if CONTROL in properties:
            return False
        if message.key.startswith(RIGHTS_PREFIX):
            return self._apply_rights(message.key[len(RIGHTS_PREFIX) :], message)
        if not message.key.startswith(PREFIX):
            return False
        name = message.key[len(PREFIX) :]
        if properties.get(DELETED):
            return self._users.pop(name, None) is not None
        try:
            record = json.loads(message.payload or b"null")
        except ValueError:
            log.warning("users store: skipping an unreadable record for %s", name)
            return False
        if not isinstance(record, dict):
            return False
        self._users[name] = record
        return True

    def _apply_rights(self, name: str, message: StoredMessage) -> bool:
        if (message.properties or {}).get(DELETED):
            return self._rights.pop(name, None) is not None
        try:
            rights = from_record(json.loads(message.payload or b"null"))
        except (ValueError, AttributeError) as exc:  # RightsError is a ValueError too
            # a record this gateway cannot read grants nothing (never more than before)
            log.warning("users store: skipping unreadable rights of %s (%s)", name, exc)
            self._rights.pop(name, None)
            return True
        self._rights[name] = rights
        return True

    async def close(self) -> None:
        await cancel_and_wait(self._follower)

    # ---- writing (the users command) -------------------------------------------------------

    async def set_password(self, name: str, password: str) -> None:
        """Add the user, or change its password: fresh salts and keys, durable on return."""
        check_name(name)
        await self._write(name, make_record(password))

    async def set_credential(self, name: str, mechanism: str, keys: dict[str, Any]) -> None:
        """Add or replace one SCRAM mechanism's keys of a user (creating the user), leaving
        its other mechanism alone: Kafka's AlterUserScramCredentials upsertion."""
        check_name(name)
        record = {**self._users.get(name, {}), mechanism: keys}
        await self._write(name, record)

    async def remove_credential(self, name: str, mechanism: str) -> bool:
        """Drop one mechanism's keys; a user left with none is removed. False if absent."""
        record = dict(self._users.get(name, {}))
        if record.pop(mechanism, None) is None:
            return False
        if any(key in record for key in SCRAM_MECHANISMS):
            await self._write(name, record)
        else:
            await self.remove(name)
        return True

    async def _write(self, name: str, record: dict[str, Any]) -> None:
        payload = json.dumps(record, separators=(",", ":")).encode()
        await self.backend.send(
            self.topic, [OutMessage(payload, key=PREFIX + name)], batching=False
        )
        self._users[name] = json.loads(payload)

    async def remove(self, name: str) -> bool:
        """Remove the user; False if there was none."""
        existed = name in self._users
        deletion = OutMessage(b"", key=PREFIX + name, properties={DELETED: "1"})
        await self.backend.send(self.topic, [deletion], batching=False)
        self._users.pop(name, None)
        return existed

    async def set_rights(self, user: str, rights: Rights) -> None:
        """Replace the user's rights (none: the record is deleted), durable on return.
        Last writer wins: two tools changing one user's rights at once may lose one change."""
        check_name(user)
        if rights.empty:
            record = OutMessage(b"", key=RIGHTS_PREFIX + user, properties={DELETED: "1"})
        else:
            payload = json.dumps(to_record(rights), separators=(",", ":")).encode()
            record = OutMessage(payload, key=RIGHTS_PREFIX + user)
        await self.backend.send(self.topic, [record], batching=False)
        if rights.empty:
            self._rights.pop(user, None)
        else:
            self._rights[user] = rights


def check_name(name: str) -> None:
    """SASL names travel in PLAIN (NUL separated) and SCRAM (`,` and `=` escaped) messages:
    refuse the characters that could not be told apart, and empty names."""
    if not name or any(ch in name for ch in "\x00,=") or name != name.strip():
        raise ValueError(
            "a user name must be non-empty, without surrounding spaces, NUL, ',' or '='"
        )
