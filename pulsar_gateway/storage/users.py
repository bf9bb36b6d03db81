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
CreateAcls/DeleteAcls apply on every gateway without a restart (`rights/*` holds
`User:*`'s rules), and changing a password (which rewrites the user's record) leaves the
rights alone. This class implements the
authorizer's `RightsStore` port (handlers/authorization.py).

Loading stops at a marker record written first (as the metadata store does: the end of the
log even where "last message id" is unreliable); listeners start only after it, so a user
removed long ago is never briefly present.

With a signer (security/record_signing.py; always with the embedded broker, whose topics
anyone on the host can write), every record carries a version and a signature: a record
without a valid signature, or not newer than the one applied for its key (a replay), is
refused (logged, counted in gateway_users_store_refused_total), so users and rights change
only through the gateway's own authenticated paths (Kafka's AlterUserScramCredentials and
ACL APIs, the bootstrap user) and `pulsar-gateway users` run with access to the key. Of
two records with the same version (two writers at once), the one with the greater
signature wins everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter

from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.backend.reader_stream import EARLIEST
from pulsar_gateway.gateway.messages import OutMessage, StoredMessage
from pulsar_gateway.gateway.metadata_records import CONTROL, DELETED
from pulsar_gateway.gateway.metrics import REGISTRY
from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.security.credentials import SCRAM_MECHANISMS, make_record, shown
from pulsar_gateway.security.record_signing import RecordSigner
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
VERSION = "__gw.version"
SIGNATURE = "__gw.signature"
REFUSED = Counter(
    "gateway_users_store_refused_total",
    "Users-store records not applied: unsigned, a bad signature, or not newer (a replay)",
    ["reason"],
    registry=REGISTRY,
)


def users_topic(metadata_namespace: str) -> str:
    return f"persistent://{metadata_namespace}/users"


class UsersStore:
    """Users by name, loaded then followed; implements the listeners' `UserDirectory`."""

    def __init__(
        self, backend: PulsarBackend, metadata_namespace: str, key: bytes | None = None
    ) -> None:
        """With `key`, records are signed and only signed ones are applied (see above)."""
        self.backend = backend
        self.topic = users_topic(metadata_namespace)
        self.signer = RecordSigner(key, self.topic) if key is not None else None
        self._users: dict[str, dict[str, Any]] = {}
        self._rights: dict[str, Rights] = {}
        # per record key: the (version, signature) applied, deletions included
        self._versions: dict[str, tuple[int, str]] = {}
        self._adopting: set[str] | None = None  # keys read unsigned while adopting
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

    async def load(self, follow: bool = True, adopt: bool = False) -> None:
        """Read to the end of the log; then, with `follow`, keep applying what comes.
        `adopt` (the signing key was just made): records written before signing are taken
        as they are, once, and written back signed."""
        marker = OutMessage(b"", key="__gw.users__", properties={CONTROL: "marker", DELETED: "1"})
        end, _ = await self.backend.send(self.topic, [marker], batching=False)
        stream = await self.backend.open_reader(self.topic, EARLIEST)
        self._adopting = set() if adopt and self.signer is not None else None
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
        adopted, self._adopting = self._adopting, None
        if adopted:
            await self._sign_adopted(adopted)
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
        if not message.key.startswith((PREFIX, RIGHTS_PREFIX)):
            return False
        if self.signer is not None and not self._authentic(message):
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

    def _authentic(self, message: StoredMessage) -> bool:
        """Signed with the key and newer than what was applied for its key; else refused
        (unless adopting, for a record without a signature)."""
        assert self.signer is not None
        properties = message.properties or {}
        signature = properties.get(SIGNATURE)
        if signature is None and self._adopting is not None:
            self._adopting.add(message.key)
            return True
        deleted = bool(properties.get(DELETED))
        try:
            version = int(properties.get(VERSION, ""))
        except ValueError:
            version = -1
        payload = message.payload or b""
        if signature is None or version < 1:
            return self._refuse(message.key, "unsigned")
        if not self.signer.verify(message.key, version, deleted, payload, signature):
            return self._refuse(message.key, "bad_signature")
        applied = self._versions.get(message.key, (0, ""))
        if (version, signature) == applied:
            return False  # already applied: this store's own write, read back
        if (version, signature) < applied:
            return self._refuse(message.key, "not_newer")
        self._versions[message.key] = (version, signature)
        if self._adopting is not None:
            self._adopting.discard(message.key)  # signed since: nothing to adopt
        return True

    def _refuse(self, key: str, reason: str) -> bool:
        REFUSED.labels(reason).inc()
        log.warning(
            "users store: record %s refused (%s): not written by a holder of the users key",
            shown(key, 200),
            reason.replace("_", " "),
        )
        return False

    async def _sign_adopted(self, keys: set[str]) -> None:
        """Write back, signed, the records taken unsigned while adopting."""
        for key in sorted(keys):
            if key.startswith(PREFIX) and key[len(PREFIX) :] in self._users:
                name = key[len(PREFIX) :]
                await self._write(name, self._users[name])
            elif key.startswith(RIGHTS_PREFIX) and key[len(RIGHTS_PREFIX) :] in self._rights:
                name = key[len(RIGHTS_PREFIX) :]
                await self.set_rights(name, self._rights[name])
        log.info("users store: %d records written before signing adopted and signed", len(keys))

    async def close(self) -> None:
        await cancel_and_wait(self._follower)

    # ---- writing (the users command) -------------------------------------------------------

    async def set_password(self, name: str, password: str) -> None:
        """Add the user, or change its password: fresh salts and keys, durable on return."""
        check_user_name(name)
        await self._write(name, make_record(password))

    async def set_credential(self, name: str, mechanism: str, keys: dict[str, Any]) -> None:
        """Add or replace one SCRAM mechanism's keys of a user (creating the user), leaving
        its other mechanism alone: Kafka's AlterUserScramCredentials upsertion."""
        check_user_name(name)
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
        await self._send(PREFIX + name, payload, deleted=False)
        self._users[name] = json.loads(payload)

    async def _send(self, key: str, payload: bytes, deleted: bool) -> None:
        """Append one record, signed (next version of its key) when there is a key."""
        properties = {DELETED: "1"} if deleted else {}
        if self.signer is not None:
            version = self._versions.get(key, (0, ""))[0] + 1
            signature = self.signer.sign(key, version, deleted, payload)
            properties.update({VERSION: str(version), SIGNATURE: signature})
        await self.backend.send(
            self.topic, [OutMessage(payload, key=key, properties=properties)], batching=False
        )
        if self.signer is not None:
            self._versions[key] = (version, signature)

    async def remove(self, name: str) -> bool:
        """Remove the user; False if there was none."""
        existed = name in self._users
        await self._send(PREFIX + name, b"", deleted=True)
        self._users.pop(name, None)
        return existed

    async def set_rights(self, user: str, rights: Rights) -> None:
        """Replace the user's rights (none: the record is deleted), durable on return.
        Last writer wins: two tools changing one user's rights at once may lose one change."""
        check_name(user)
        if rights.empty:
            await self._send(RIGHTS_PREFIX + user, b"", deleted=True)
        else:
            payload = json.dumps(to_record(rights), separators=(",", ":")).encode()
            await self._send(RIGHTS_PREFIX + user, payload, deleted=False)
        if rights.empty:
            self._rights.pop(user, None)
        else:
            self._rights[user] = rights


def check_user_name(name: str) -> None:
    """A name a user may have: not `*`, which names every user in the rights (`User:*`)."""
    check_name(name)
    if name == "*":
        raise ValueError("'*' is not a user name: in rights it stands for every user")


def check_name(name: str) -> None:
    """SASL names travel in PLAIN (NUL separated) and SCRAM (`,` and `=` escaped) messages:
    refuse the characters that could not be told apart, and empty names."""
    if not name or any(ch in name for ch in "\x00,=") or name != name.strip():
        raise ValueError(
            "a user name must be non-empty, without surrounding spaces, NUL, ',' or '='"
        )
