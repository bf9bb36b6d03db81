"""The ownership function: rendezvous hashing over the live members (docs/cluster.md)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.cluster.view import (
    Member,
    SingleMemberView,
    group_key,
    owner_of,
    partition_key,
    score,
)


def member(name: str, node: int = 0) -> Member:
    return Member(name, node, "127.0.0.1", 9092 + node, "127.0.0.1", 5672, 9404)


names = st.lists(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=20), min_size=1, max_size=8
).map(lambda found: sorted(set(found)))
keys = st.lists(st.text(max_size=80), min_size=1, max_size=50)


@given(names, keys)
def test_the_owner_depends_only_on_the_set_of_members(ids: list[str], found: list[str]) -> None:
    members = [member(name, i) for i, name in enumerate(ids)]
    for key in found:
        assert owner_of(key, members) == owner_of(key, list(reversed(members)))


def test_the_weight_is_the_same_in_every_process() -> None:
    # a fixed value: a salted hash (Python's hash()) would differ between two members
    assert score("kafka/group/g", "host-a/1") == 0x87054FB23D2AF393
    assert owner_of("k", [member("a"), member("b")]).member_id in {"a", "b"}


def test_keys_are_spread_evenly() -> None:
    members = [member(f"host-{i}/1", i) for i in range(3)]
    counts = Counter(owner_of(partition_key("orders", p), members).member_id for p in range(3000))
    assert set(counts) == {m.member_id for m in members}
    assert all(800 <= count <= 1200 for count in counts.values()), counts


@settings(max_examples=examples(50))
@given(names, st.text(min_size=1, max_size=20), keys)
def test_a_join_moves_only_the_keys_the_newcomer_wins(
    ids: list[str], newcomer: str, found: list[str]
) -> None:
    before = [member(name, i) for i, name in enumerate(ids) if name != newcomer]
    if not before:
        return
    after = [*before, member(newcomer, 99)]
    for key in found:
        old, new = owner_of(key, before), owner_of(key, after)
        assert new == old or new.member_id == newcomer


@settings(max_examples=examples(50))
@given(names, keys)
def test_a_leave_moves_only_the_leavers_keys(ids: list[str], found: list[str]) -> None:
    if len(ids) < 2:
        return
    members = [member(name, i) for i, name in enumerate(ids)]
    leaver, rest = members[0], members[1:]
    for key in found:
        old = owner_of(key, members)
        if old != leaver:
            assert owner_of(key, rest) == old


def test_one_gateway_alone_owns_and_serves_everything() -> None:
    me = member("solo/9092")
    view = SingleMemberView(me)
    assert view.members() == [me]
    assert view.owner(group_key("g")) == me
    assert view.serves(partition_key("t", 7))
    assert view.status()["members"][0]["member_id"] == "solo/9092"
