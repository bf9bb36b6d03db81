"""Client quotas (docs/quotas.md): which quota applies, the rate measured against it, the
throttle time, and what Produce and Fetch answer over it, on the in-memory storage."""

from __future__ import annotations

import asyncio
import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from harness.kafka_memory_store import MemoryClientQuotas
from pulsar_gateway.handlers.kafka.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    SAMPLES,
    ClientQuotas,
    ConnectionMute,
    entity,
)
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.kafka_codec.record_batch import Record, encode_batch
from tests.unit.test_kafka_apis import TOPIC, Broker, run


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def quotas_with(*settings: tuple[tuple, str, float]) -> tuple[ClientQuotas, Clock]:
    store = MemoryClientQuotas()
    for quota_entity, key, value in settings:
        store.quotas.setdefault(quota_entity, {})[key] = value
    clock = Clock()
    return ClientQuotas(store, clock), clock


def test_the_most_specific_quota_applies_in_kafkas_order() -> None:
    quotas, _ = quotas_with(
        (entity(client_id="app"), PRODUCER_BYTE_RATE, 1.0),
        (entity(default_user=True), PRODUCER_BYTE_RATE, 2.0),
        (entity("alice"), PRODUCER_BYTE_RATE, 3.0),
        (entity("alice", "app"), PRODUCER_BYTE_RATE, 4.0),
        (entity("alice", default_client=True), CONSUMER_BYTE_RATE, 5.0),
    )

    def applied(user: str, client_id: str, key: str = PRODUCER_BYTE_RATE) -> float | None:
        found = quotas.bound(key, user, client_id)
        return None if found is None else found[1]

    assert applied("alice", "app") == 4.0  # user and client id
    assert applied("alice", "other") == 3.0  # the user's own
    assert applied("bob", "app") == 2.0  # the default user beats a client id alone
    assert applied("alice", "x", CONSUMER_BYTE_RATE) == 5.0  # user with default client
    assert applied("bob", "x", CONSUMER_BYTE_RATE) is None


def test_throttle_time_is_what_brings_the_rate_back_to_the_quota() -> None:
    quotas, clock = quotas_with((entity(client_id="app"), PRODUCER_BYTE_RATE, 1000.0))
    # a first burst is measured over the whole span (10 windows): 5000 B -> 500 B/s
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "app", 5000) == 0
    # 15000 B over 10 s is 1500 B/s: (1500 - 1000) / 1000 of the 11 s span
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "app", 10000) == 5500
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "other", 10**6) == 0  # no quota
    clock.now += SAMPLES + 1  # every window of the burst has passed
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "app", 5000) == 0


def test_clients_sharing_a_quota_share_one_rate() -> None:
    quotas, _ = quotas_with(
        (entity("alice"), PRODUCER_BYTE_RATE, 1000.0),
        (entity(client_id="x", default_user=False), CONSUMER_BYTE_RATE, 1000.0),
        (entity(default_client=True), PRODUCER_BYTE_RATE, 1000.0),
    )
    # alice's quota covers her two clients together
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "a", 8000) == 0
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "b", 8000) > 0
    # the default client-id quota is each client id's own
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "bob", "a", 8000) == 0
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "bob", "b", 8000) == 0


@settings(max_examples=examples(200), deadline=None)
@given(
    limit=st.integers(1, 10**6),
    sends=st.lists(st.tuples(st.floats(0, 3), st.integers(0, 10**6)), max_size=40),
)
def test_throttle_is_bounded_and_zero_within_the_quota(limit: int, sends: list) -> None:
    quotas, clock = quotas_with((entity(client_id="c"), PRODUCER_BYTE_RATE, float(limit)))
    history: list[tuple[float, int]] = []
    for pause, amount in sends:
        clock.now += pause
        history.append((clock.now, amount))
        throttle = quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "c", amount)
        assert 0 <= throttle <= SAMPLES * 1000
        # every byte counted lies within the last SAMPLES windows, measured over >= 10 s
        recent = sum(a for t, a in history if t > clock.now - SAMPLES - 1)
        if recent <= limit * (SAMPLES - 1):
            assert throttle == 0


async def produce(broker: Broker, value: bytes) -> dict:
    """One Produce; the whole response (its throttle time is outside the partitions)."""
    batch = encode_batch(0, [Record(0, 1000, None, value, [])])
    partitions = [{"index": 0, "records": batch}]
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": TOPIC, "partition_data": partitions}],
    }
    return await broker.call(ApiKey.PRODUCE, 9, body)


def test_produce_and_fetch_over_quota_are_answered_throttled_and_mute_the_connection() -> None:
    async def scenario() -> None:
        broker = Broker()
        store = broker.storage.quotas
        assert isinstance(store, MemoryClientQuotas)
        mute = ConnectionMute()
        broker.context = dataclasses.replace(broker.context, quotas=ClientQuotas(store), mute=mute)
        await broker.storage.topics.create(TOPIC, 1)
        first = await produce(broker, b"x" * 2000)
        assert first["throttle_time_ms"] == 0  # no quota set: nothing measured
        await store.alter(entity(client_id="t"), {PRODUCER_BYTE_RATE: 100.0})
        answers = [await produce(broker, b"x" * 2000) for _ in range(3)]
        throttled = [a["throttle_time_ms"] for a in answers]
        assert throttled[0] > 0 and throttled == sorted(throttled), throttled
        stored = [a["responses"][0]["partition_responses"][0] for a in answers]
        assert [p["base_offset"] for p in stored] == [1, 2, 3]  # stored all the same
        loop = asyncio.get_running_loop()
        assert mute.until > loop.time() + throttled[-1] / 1000 - 1

        await store.alter(entity(client_id="t"), {CONSUMER_BYTE_RATE: 1000.0})
        fetch = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 10**6,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "log_start_offset": -1,
                            "partition_max_bytes": 10**6,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        answers = [await broker.call(ApiKey.FETCH, 11, fetch) for _ in range(2)]
        records = [a["responses"][0]["partitions"][0]["records"] for a in answers]
        assert len(records[0]) > 8000 and answers[0]["throttle_time_ms"] == 0
        # the second read passes the quota: sent without its records, to be fetched again
        assert answers[1]["throttle_time_ms"] > 0 and not records[1]

    run(scenario)
