"""KIP-848 consumer groups (handlers/kafka/consumer_groups.py): reconciliation never lets
two members own a partition, converges to the uniform target, fences stale epochs; and the
APIs on the in-memory storage (heartbeat by topic id, OffsetCommit v9, describe, listing)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.kafka.consumer_groups import (
    Assignment,
    ConsumerGroups,
    ConsumerMember,
    HeartbeatResult,
    preferred_assignor,
    range_assignment,
)
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from tests.unit.test_kafka_apis import TOPIC, Broker, run


class Catalog:
    def __init__(self, **topics: int) -> None:
        self.topics = dict(topics)

    def partitions(self, name: str) -> int | None:
        return self.topics.get(name)

    def names(self) -> list[str]:
        return list(self.topics)


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


class Client:
    """A member as a client runs it: heartbeats with its epoch and what it owns, and owns
    exactly what the last assignment it received said."""

    def __init__(self, groups: ConsumerGroups, catalog: Catalog, member_id: str) -> None:
        self.groups, self.catalog, self.member_id = groups, catalog, member_id
        self.epoch = 0
        self.owned: Assignment = {}

    def beat(self, topics: list[str] | None = None) -> HeartbeatResult:
        result = self.groups.heartbeat(
            "g",
            self.member_id,
            self.epoch,
            catalog=self.catalog,
            subscribed=topics if self.epoch == 0 else None,
            owned=self.owned,
        )
        if result.error == ErrorCode.NONE:
            self.epoch = result.epoch
            if result.assignment is not None:
                self.owned = result.assignment
        return result


def owners(clients: list[Client]) -> dict[tuple[str, int], list[str]]:
    found: dict[tuple[str, int], list[str]] = {}
    for client in clients:
        for topic, parts in client.owned.items():
            for part in parts:
                found.setdefault((topic, part), []).append(client.member_id)
    return found


def test_a_partition_moves_only_once_its_owner_let_it_go() -> None:
    groups, catalog = ConsumerGroups(), Catalog(orders=4)
    first, second = Client(groups, catalog, "a"), Client(groups, catalog, "b")
    assert first.beat(["orders"]).error == 0
    assert first.owned == {"orders": {0, 1, 2, 3}}
    second.beat(["orders"])
    assert second.owned == {}  # everything is still a's
    first.beat()  # told to give up half, at its old epoch
    assert first.owned == {"orders": {0, 2}}
    second.beat()  # a has not confirmed yet: nothing free
    assert second.owned == {}
    first.beat()  # confirms (owns only what it kept): moves to the new epoch
    second.beat()
    assert second.owned == {"orders": {1, 3}}
    assert first.epoch == second.epoch == groups.describe("g").assignment_epoch
    assert groups.describe("g").state == "Stable"


def test_stale_epochs_are_fenced_and_strangers_unknown() -> None:
    groups, catalog = ConsumerGroups(), Catalog(orders=2)
    member = Client(groups, catalog, "a")
    member.beat(["orders"])
    stale = groups.heartbeat("g", "a", member.epoch + 5, catalog=catalog)
    assert stale.error == ErrorCode.FENCED_MEMBER_EPOCH
    assert groups.heartbeat("g", "x", 3, catalog=catalog).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert groups.validate_commit("g", "a", member.epoch, 113) == ErrorCode.NONE
    assert groups.validate_commit("g", "a", member.epoch + 1, 113) == ErrorCode.FENCED_MEMBER_EPOCH
    assert groups.validate_commit("g", "x", 1, 113) == ErrorCode.UNKNOWN_MEMBER_ID
    first = groups.heartbeat("g", "b", 0, catalog=catalog)
    assert first.error == ErrorCode.INVALID_REQUEST  # a first heartbeat names a subscription


def test_leaving_and_silent_members_hand_their_partitions_over() -> None:
    clock = Clock()
    groups, catalog = ConsumerGroups(session_timeout_ms=10_000, clock=clock), Catalog(t=4)
    clients = [Client(groups, catalog, name) for name in ("a", "b", "c")]
    for _ in range(4):
        for client in clients:
            client.beat(["t"])
    assert sorted(owners(clients)) == [("t", p) for p in range(4)]
    groups.heartbeat("g", "a", -1, catalog=catalog)  # a leaves
    clock.now += 5
    for _ in range(3):
        for client in clients[1:]:
            client.beat()
    clock.now += 6
    clients[1].beat()  # from now on b alone heartbeats
    clock.now += 5
    groups.sweep()  # c has been silent 11 s, past its session; b 5 s
    clients[1].beat()
    clients[1].beat()
    assert clients[1].owned == {"t": {0, 1, 2, 3}}
    assert list(groups.describe("g").members) == ["b"]


def test_new_partitions_and_regex_subscriptions_are_assigned() -> None:
    groups, catalog = ConsumerGroups(), Catalog(events_a=1)
    member = Client(groups, catalog, "a")
    result = groups.heartbeat("g", "a", 0, catalog=catalog, regex="events_.*")
    member.epoch, member.owned = result.epoch, result.assignment or {}
    assert member.owned == {"events_a": {0}}
    catalog.topics["events_b"] = 2  # a new topic matches
    catalog.topics["other"] = 3
    member.beat()
    assert member.owned == {"events_a": {0}, "events_b": {0, 1}}
    bad = groups.heartbeat("g", "b", 0, catalog=catalog, regex="(unclosed")
    assert bad.error == ErrorCode.INVALID_REQUEST


@settings(max_examples=examples(150), deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["beat", "join", "leave"]), st.integers(0, 3)), max_size=60
    ),
    partitions=st.integers(1, 9),
)
def test_no_partition_ever_has_two_owners_and_the_group_converges(
    steps: list[tuple[str, int]], partitions: int
) -> None:
    groups, catalog = ConsumerGroups(), Catalog(t=partitions)
    clients: dict[int, Client] = {}
    for action, who in steps:
        if action == "join" and who not in clients:
            clients[who] = Client(groups, catalog, f"m{who}")
            clients[who].beat(["t"])
        elif action == "leave" and who in clients:
            groups.heartbeat("g", f"m{who}", -1, catalog=catalog)
            del clients[who]
        elif action == "beat" and who in clients:
            clients[who].beat()
        assert all(len(ids) == 1 for ids in owners(list(clients.values())).values())
    for _ in range(4):  # then everybody heartbeats a few rounds
        for client in clients.values():
            client.beat()
            assert all(len(ids) == 1 for ids in owners(list(clients.values())).values())
    if clients:
        assert sorted(owners(list(clients.values()))) == [("t", p) for p in range(partitions)]
        shares = [sum(len(p) for p in c.owned.values()) for c in clients.values()]
        assert max(shares) - min(shares) <= 1  # the uniform assignor's even share


def heartbeat_body(member_id: str, epoch: int, **fields: object) -> dict:
    return {
        "group_id": "g",
        "member_id": member_id,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30000,
        "subscribed_topic_names": fields.get("topics"),
        "subscribed_topic_regex": None,
        "server_assignor": fields.get("assignor"),
        "topic_partitions": fields.get("owned"),
    }


def test_the_apis_speak_topic_ids_and_check_commits_against_member_epochs() -> None:
    async def scenario() -> None:
        broker = Broker()
        broker.context.consumer_groups = ConsumerGroups(heartbeat_interval_ms=700)
        record = await broker.storage.topics.create(TOPIC, 3)
        joined = await broker.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat_body("m-1", 0, topics=[TOPIC])
        )
        assert joined["error_code"] == 0 and joined["heartbeat_interval_ms"] == 700
        (assigned,) = joined["assignment"]["topic_partitions"]
        assert str(assigned["topic_id"]) == str(record.topic_id)
        assert assigned["partitions"] == [0, 1, 2]
        epoch = joined["member_epoch"]
        odd = await broker.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            heartbeat_body("m-2", 0, topics=[TOPIC], assignor="sticky"),
        )
        assert odd["error_code"] == ErrorCode.UNSUPPORTED_ASSIGNOR
        assert odd["error_message"] == "Assignor sticky is not supported."

        def commit(epoch_sent: int) -> dict:
            return {
                "group_id": "g",
                "generation_id_or_member_epoch": epoch_sent,
                "member_id": "m-1",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 5,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            }

        done = await broker.call(ApiKey.OFFSET_COMMIT, 9, commit(epoch))
        assert done["topics"][0]["partitions"][0]["error_code"] == 0
        stale = await broker.call(ApiKey.OFFSET_COMMIT, 9, commit(epoch - 1))
        assert stale["topics"][0]["partitions"][0]["error_code"] == ErrorCode.STALE_MEMBER_EPOCH

        described = await broker.call(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": ["g", "nobody"], "include_authorized_operations": False},
        )
        group, missing = described["groups"]
        assert (group["group_state"], group["members"][0]["member_id"]) == ("Stable", "m-1")
        assert group["members"][0]["assignment"]["topic_partitions"][0]["topic_name"] == TOPIC
        assert missing["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        for kinds in (["consumer"], []):  # listed once, as a consumer group (it has commits)
            listed = await broker.call(
                ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": kinds}
            )
            found = [(g["group_id"], g["group_type"]) for g in listed["groups"]]
            assert found == [("g", "consumer")]
        classic = await broker.call(
            ApiKey.JOIN_GROUP,
            5,
            {
                "group_id": "g",
                "session_timeout_ms": 10000,
                "rebalance_timeout_ms": 10000,
                "member_id": "",
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
        assert classic["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        left = await broker.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat_body("m-1", -1))
        assert (left["error_code"], left["member_epoch"]) == (0, -1)

    run(scenario)


def test_range_gives_each_member_one_contiguous_run_per_topic() -> None:
    members = {name: ConsumerMember(name) for name in ("b", "a", "c")}
    subscriptions = {"a": ["t", "u"], "b": ["t", "u"], "c": ["t"]}
    target = range_assignment(members, subscriptions, {"t": 7, "u": 3})
    # t: 7 partitions over a, b, c (sorted by id): 3, 2, 2; u: 3 over a, b: 2, 1
    assert target == {
        "a": {"t": {0, 1, 2}, "u": {0, 1}},
        "b": {"t": {3, 4}, "u": {2}},
        "c": {"t": {5, 6}},
    }
    few = range_assignment(members, {"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 2})
    assert few == {"a": {"t": {0}}, "b": {"t": {1}}, "c": {}}


def test_the_group_uses_the_assignor_most_members_ask_for() -> None:
    def member(name: str, assignor: str | None) -> ConsumerMember:
        return ConsumerMember(name, server_assignor=assignor)

    assert preferred_assignor([]) == "uniform"
    assert preferred_assignor([member("a", None)]) == "uniform"
    assert preferred_assignor([member("a", "range"), member("b", None)]) == "range"
    assert preferred_assignor([member("a", "range"), member("b", "uniform")]) == "uniform"
    chosen = [member("a", "range"), member("b", "range"), member("c", "uniform")]
    assert preferred_assignor(chosen) == "range"


def test_a_member_asking_for_range_gets_ranges_and_describe_names_it() -> None:
    async def scenario() -> None:
        broker = Broker()
        broker.context.consumer_groups = ConsumerGroups()
        await broker.storage.topics.create(TOPIC, 4)
        answers = []
        for member_id in ("m-1", "m-2"):
            body = heartbeat_body(member_id, 0, topics=[TOPIC], assignor="range")
            answers.append(await broker.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body))
        assert all(answer["error_code"] == 0 for answer in answers)
        groups = broker.context.consumer_groups
        group = groups.describe("g")
        assert group is not None and group.assignor == "range"
        assert group.target == {"m-1": {TOPIC: {0, 1}}, "m-2": {TOPIC: {2, 3}}}
        described = await broker.call(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": ["g"], "include_authorized_operations": False},
        )
        assert described["groups"][0]["assignor_name"] == "range"

    run(scenario)
