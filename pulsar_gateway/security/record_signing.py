"""Signed users-store records: only who holds the key writes users and rights.

The users store lives in a Pulsar topic (storage/users.py). The embedded broker checks no
credentials, and any local account can reach its loopback port, so anyone on the host
could append `user/<name>` and `rights/<name>` records: add themselves, make themselves
superuser. With a key, every record carries an HMAC-SHA256 over the topic, its key, a
version and its content, and a gateway applies only records whose signature holds and
whose version is newer than the one it applied for that key (so an old record replayed,
a superuser grant since revoked say, changes nothing). Who holds the key: the gateway and
`pulsar-gateway users` run by the same account, from the 0700 data directory
(docs/security.md, "The embedded broker").

The key is 32 random bytes, hex in a file of its own (0600), made once. Whoever makes it
adopts the records already in the store (written before signing existed): they are read as
they are once and written back signed.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_BYTES = 32
DOMAIN = b"pulsar-gateway users record v1"


class RecordSigner:
    """Signs and checks the records of one users topic."""

    def __init__(self, key: bytes, topic: str) -> None:
        if len(key) < KEY_BYTES:
            raise ValueError("a users key is at least 32 bytes")
        self._key = key
        self._topic = topic.encode()

    def sign(self, record_key: str, version: int, deleted: bool, payload: bytes) -> str:
        message = b"\x00".join(
            (
                DOMAIN,
                self._topic,
                record_key.encode(),
                str(version).encode(),
                b"deleted" if deleted else b"put",
                hashlib.sha256(payload).digest(),
            )
        )
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def verify(
        self, record_key: str, version: int, deleted: bool, payload: bytes, signature: str
    ) -> bool:
        expected = self.sign(record_key, version, deleted, payload)
        return hmac.compare_digest(expected.encode(), signature.encode())


def load_or_create_key(path: Path) -> tuple[bytes, bool]:
    """The key in `path` and whether this call made it. Made atomically (a file written
    aside, then linked into place), so two processes starting at once end with one key."""
    with contextlib.suppress(FileNotFoundError):
        return read_key(path), False
    aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_hex(KEY_BYTES) + "\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(aside, path)
        except FileExistsError:  # another process made it first: theirs is the key
            return read_key(path), False
        return read_key(path), True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside)


def read_key(path: Path) -> bytes:
    """The key in `path`; ValueError (naming the file, never its content) if it is not one."""
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < KEY_BYTES:
        raise ValueError(f"users key file {path}: not a key ({KEY_BYTES * 2} hex digits)")
    return key
