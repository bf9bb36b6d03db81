"""Leases by an injected clock, and the heartbeat decoder (docs/cluster.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.cluster.leases import (
    MAX_HEARTBEAT_BYTES,
    Heartbeat,
    PeerTable,
    SelfLease,
    decode_heartbeat,
    encode_heartbeat,
)
from pulsar_gateway.gateway.cluster.view import Member


def member(name: str, node: int = 1) -> Member:
    return Member(name, node, "10.0.0.1", 9092, "10.0.0.1", 5672, 9404)


def test_own_lease_runs_from_the_send_of_the_last_stored_heartbeat() -> None:
    lease = SelfLease(lease_seconds=6, margin_seconds=1)
    assert not lease.fresh(0.0)  # nothing stored yet
    lease.stored(10.0)
    assert lease.fresh(14.9)
    assert not lease.fresh(15.0)  # lease minus margin after the send began
    lease.stored(9.0)  # an older send completing late does not extend it
    assert not lease.fresh(15.0)
    lease.stored(14.0)
    assert lease.fresh(18.9)
    lease.forget()
    assert not lease.fresh(14.0)


def test_a_member_stops_itself_before_the_others_declare_it_dead() -> None:
    own = SelfLease(lease_seconds=6, margin_seconds=1)
    others = PeerTable("b", lease_seconds=6)
    sent, read = 100.0, 100.2  # a heartbeat is read after it was sent
    own.stored(sent)
    others.seen(Heartbeat(member("a"), 1), read)
    now = sent
    while own.fresh(now):
        now += 0.01
    assert others.members() == [member("a")]  # still alive for the others when it stopped
    assert others.expire(read + 6) == [member("a")]


def test_peers_expire_one_lease_after_their_last_heartbeat_was_read() -> None:
    table = PeerTable("me", lease_seconds=6)
    assert table.seen(Heartbeat(member("a"), 1), 0.0)
    assert not table.seen(Heartbeat(member("a"), 1), 3.0)  # a renewal changes nothing
    assert table.expire(8.9) == []
    assert table.expire(9.0) == [member("a")]
    assert table.members() == []


def test_epochs_order_a_members_lives() -> None:
    table = PeerTable("me", lease_seconds=6)
    table.seen(Heartbeat(member("a"), 5), 0.0)
    assert not table.seen(Heartbeat(member("a"), 4), 1.0)  # an older life, read late
    assert table.seen(Heartbeat(member("a"), 6), 1.0)  # rejoined: its keys settle again
    assert not table.seen(Heartbeat(member("a"), 5, leaving=True), 1.0)
    assert table.seen(Heartbeat(member("a"), 6, leaving=True), 1.0)
    assert table.members() == []


def test_own_heartbeats_are_not_a_peer() -> None:
    table = PeerTable("me", lease_seconds=6)
    assert not table.seen(Heartbeat(member("me"), 1), 0.0)
    assert table.members() == []


def test_after_a_pause_known_members_count_as_seen_now() -> None:
    table = PeerTable("me", lease_seconds=6)
    table.seen(Heartbeat(member("a"), 1), 0.0)
    table.refresh_all(100.0)
    assert table.expire(101.0) == []


def test_a_heartbeat_round_trips() -> None:
    beat = Heartbeat(member("host-a/1", 3), 1234567, leaving=True)
    assert decode_heartbeat(encode_heartbeat(beat)) == beat


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"[]",
        b'{"member_id": ""}',
        b'{"member_id": "a", "node_id": -1}',
        b'{"member_id": "a", "node_id": true, "kafka_host": "h", "kafka_port": 1,'
        b' "amqp_host": "h", "amqp_port": 1, "http_port": 1, "epoch": 1}',
        b" " * (MAX_HEARTBEAT_BYTES + 1),
    ],
)
def test_bad_heartbeats_are_refused(payload: bytes) -> None:
    with pytest.raises(ValueError):
        decode_heartbeat(payload)


@given(st.binary(max_size=600))
def test_the_decoder_takes_any_bytes(payload: bytes) -> None:
    try:
        beat = decode_heartbeat(payload)
    except ValueError:
        return
    assert beat.member.member_id


@given(
    st.dictionaries(
        st.sampled_from(
            ["member_id", "node_id", "kafka_host", "kafka_port", "amqp_host", "epoch", "leaving"]
        ),
        st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none()),
    )
)
def test_the_decoder_takes_any_json_object(record: dict[str, object]) -> None:
    import json

    try:
        decode_heartbeat(json.dumps(record).encode())
    except ValueError:
        pass
