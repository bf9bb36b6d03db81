"""Signed users-store records (security/record_signing.py, storage/users.py): what a store
with a key applies, refuses and how two stores converge, without a broker."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.security.record_signing import (
    RecordSigner,
    load_or_create_key,
    read_key,
)
from pulsar_gateway.storage.users import SIGNATURE, VERSION, UsersStore, users_topic

KEY = bytes(range(32))
NAMESPACE = "public/__gateway"
SIGNER = RecordSigner(KEY, users_topic(NAMESPACE))
_ids = itertools.count()


def _store(key: bytes | None = KEY) -> UsersStore:
    return UsersStore(None, NAMESPACE, key)  # type: ignore[arg-type]


def _signed(key: str, payload: bytes, version: int, deleted: bool = False) -> StoredMessage:
    properties = {VERSION: str(version), SIGNATURE: SIGNER.sign(key, version, deleted, payload)}
    if deleted:
        properties["deleted"] = "1"
    return StoredMessage((1, next(_ids), -1), payload, key, properties, 0, 0)


def _plain(key: str, payload: bytes, **properties: str) -> StoredMessage:
    return StoredMessage((1, next(_ids), -1), payload, key, properties, 0, 0)


RECORD = b'{"SCRAM-SHA-256": {}}'


def test_only_signed_newer_records_apply() -> None:
    store = _store()
    assert not store._apply(_plain("user/mallory", RECORD))  # unsigned
    forged = _signed("user/mallory", RECORD, 1)
    tampered = forged._replace(payload=b'{"SCRAM-SHA-256": {"x": 1}}')
    assert not store._apply(tampered)
    moved = forged._replace(key="user/alice")  # another key's signature
    assert not store._apply(moved)
    assert store.lookup("mallory") is None and store.lookup("alice") is None
    first = _signed("user/alice", RECORD, 1)
    assert store._apply(first)
    assert not store._apply(first)  # the same again (its own write read back): nothing
    removal = _signed("user/alice", b"", 2, deleted=True)
    assert store._apply(removal)
    assert not store._apply(_signed("user/alice", RECORD, 1))  # a replay of the old one
    assert store.lookup("alice") is None
    superuser = b'{"superuser": true, "grants": []}'
    assert store._apply(_signed("rights/alice", superuser, 1))
    assert store.rights_of("alice").superuser
    assert store._apply(_signed("rights/alice", b"", 2, deleted=True))
    assert not store._apply(_signed("rights/alice", superuser, 1))  # revoked stays revoked
    assert not store.rights_of("alice").superuser


def test_a_store_without_a_key_applies_as_before() -> None:
    store = _store(None)
    assert store._apply(_plain("user/alice", RECORD))
    assert store.lookup("alice") is not None


@given(st.permutations(range(4)))
def test_two_stores_seeing_records_in_any_order_agree(order: list[int]) -> None:
    """Two writers at once give two records of one version; the greater signature wins
    whatever order a store reads them in."""
    records = [
        _signed("user/alice", b'{"SCRAM-SHA-256": {"n": %d}}' % n, version)
        for n, version in ((1, 1), (2, 1), (3, 2), (4, 2))
    ]
    one, other = _store(), _store()
    for index in range(4):
        one._apply(records[index])
    for index in order:
        other._apply(records[index])
    assert one.lookup("alice") == other.lookup("alice")


def test_the_key_is_made_once_even_by_racing_processes(tmp_path: Path) -> None:
    path = tmp_path / "users.key"
    results: list[tuple[bytes, bool]] = []

    def make() -> None:
        results.append(load_or_create_key(path))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({key for key, _ in results}) == 1
    assert [made for _, made in results].count(True) == 1
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["users.key"]  # nothing left aside


def test_a_file_that_is_not_a_key_is_refused_without_showing_it(tmp_path: Path) -> None:
    path = tmp_path / "users.key"
    path.write_text("hunter2\n")
    with pytest.raises(ValueError) as refused:
        read_key(path)
    assert "hunter2" not in str(refused.value) and str(path) in str(refused.value)
