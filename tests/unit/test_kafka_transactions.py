"""The transaction coordinator's state machine and the read_committed view of the log, on the
in-memory storage: real request bytes through the dispatcher, no broker."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.gateway.topic_names import partition_topic
from pulsar_gateway.handlers.kafka.transaction_coordinator import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    PREPARE_COMMIT,
    TransactionCoordinator,
)
from pulsar_gateway.kafka_codec.control_batch import (
    MARKER,
    TXN,
    ControlRecordError,
    ControlType,
    decode_control_key,
    encode_control_key,
    marker_message,
    parse_txn_value,
    txn_value,
)
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.kafka_codec.record_batch import decode_batches
from pulsar_gateway.storage.kafka.transaction_index import AbortedTransaction, TransactionIndex
from tests.unit.test_kafka_apis import TOPIC, Broker

TXN_ID = "orders-writer"
READ_COMMITTED = 1


class TxnBroker(Broker):
    """A Broker with a transaction coordinator over the same memory storage."""

    def __init__(self) -> None:
        super().__init__()
        storage = self.storage
        assert storage.transactions is not None
        self.coordinator = TransactionCoordinator(
            storage.transactions, storage.topics, storage.offsets, storage.producer_ids
        )
        self.context.transactions = self.coordinator

    async def init(self, version: int = 4, timeout_ms: int = 60000) -> dict[str, Any]:
        body = {
            "transactional_id": TXN_ID,
            "transaction_timeout_ms": timeout_ms,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        return await self.call(ApiKey.INIT_PRODUCER_ID, version, body)

    async def add(self, producer: dict[str, Any], partition: int = 0) -> int:
        body = {
            "v3_and_below_transactional_id": TXN_ID,
            "v3_and_below_producer_id": producer["producer_id"],
            "v3_and_below_producer_epoch": producer["producer_epoch"],
            "v3_and_below_topics": [{"name": "orders", "partitions": [partition]}],
        }
        response = await self.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, body)
        return response["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
            "partition_error_code"
        ]

    async def send(
        self, producer: dict[str, Any], values: list[bytes], sequence: int = 0
    ) -> dict[str, Any]:
        return await self.produce(
            "orders",
            values,
            producer_id=producer["producer_id"],
            producer_epoch=producer["producer_epoch"],
            base_sequence=sequence,
            is_transactional=True,
            version=11,
            transactional_id=TXN_ID,
        )

    async def end(self, producer: dict[str, Any], commit: bool, version: int = 3) -> int:
        body = {
            "transactional_id": TXN_ID,
            "producer_id": producer["producer_id"],
            "producer_epoch": producer["producer_epoch"],
            "committed": commit,
        }
        return (await self.call(ApiKey.END_TXN, version, body))["error_code"]

    async def add_offsets(self, producer: dict[str, Any], group: str) -> int:
        body = {
            "transactional_id": TXN_ID,
            "producer_id": producer["producer_id"],
            "producer_epoch": producer["producer_epoch"],
            "group_id": group,
        }
        return (await self.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, body))["error_code"]

    async def commit_offset(self, producer: dict[str, Any], group: str, offset: int) -> int:
        body = {
            "transactional_id": TXN_ID,
            "group_id": group,
            "producer_id": producer["producer_id"],
            "producer_epoch": producer["producer_epoch"],
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        response = await self.call(ApiKey.TXN_OFFSET_COMMIT, 3, body)
        return response["topics"][0]["partitions"][0]["error_code"]


async def _ready() -> tuple[TxnBroker, dict[str, Any]]:
    broker = TxnBroker()
    await broker.storage.topics.create(TOPIC, 1)
    producer = await broker.init()
    assert producer["error_code"] == ErrorCode.NONE
    assert await broker.add(producer) == ErrorCode.NONE
    return broker, producer


def _records(partition: dict[str, Any]) -> list[tuple[int, bytes | None]]:
    """The data records of a Fetch answer (markers left out), as a client reads them."""
    return [
        (batch.base_offset + record.offset_delta, record.value)
        for batch in decode_batches(bytes(partition["records"] or b""))
        if not batch.is_control
        for record in batch.records
    ]


def _controls(partition: dict[str, Any]) -> list[tuple[int, ControlType]]:
    return [
        (batch.base_offset, decode_control_key(batch.records[0].key))
        for batch in decode_batches(bytes(partition["records"] or b""))
        if batch.is_control
    ]


def test_commit_is_invisible_to_read_committed_until_its_marker() -> None:
    async def run() -> None:
        broker, producer = await _ready()
        assert (await broker.send(producer, [b"a", b"b", b"c"]))["error_code"] == 0
        open_view = await broker.fetch("orders", 0, isolation_level=READ_COMMITTED)
        assert _records(open_view) == []
        assert (open_view["last_stable_offset"], open_view["high_watermark"]) == (0, 3)
        assert len(_records(await broker.fetch("orders", 0))) == 3  # read_uncommitted
        assert await broker.end(producer, commit=True) == ErrorCode.NONE
        done = await broker.fetch("orders", 0, isolation_level=READ_COMMITTED)
        assert _records(done) == [(0, b"a"), (1, b"b"), (2, b"c")]
        assert _controls(done) == [(3, ControlType.COMMIT)]
        assert done["aborted_transactions"] == []
        assert (done["last_stable_offset"], done["high_watermark"]) == (4, 4)
        batch = decode_batches(bytes(done["records"]))[0]
        assert batch.is_transactional
        assert (batch.producer_id, batch.producer_epoch) == (
            producer["producer_id"],
            producer["producer_epoch"],
        )
        assert broker.coordinator.get(TXN_ID).state == COMPLETE_COMMIT  # type: ignore[union-attr]

    asyncio.run(run())


def test_abort_lists_the_aborted_transaction_for_read_committed() -> None:
    async def run() -> None:
        broker, producer = await _ready()
        await broker.send(producer, [b"x", b"y"])
        assert await broker.end(producer, commit=False) == ErrorCode.NONE
        view = await broker.fetch("orders", 0, isolation_level=READ_COMMITTED)
        assert view["aborted_transactions"] == [
            {"producer_id": producer["producer_id"], "first_offset": 0}
        ]
        assert _controls(view) == [(2, ControlType.ABORT)]
        assert view["last_stable_offset"] == 3

    asyncio.run(run())


def test_a_new_producer_with_the_id_aborts_the_open_transaction_and_fences_the_old() -> None:
    async def run() -> None:
        broker, zombie = await _ready()
        await broker.send(zombie, [b"z"])
        fresh = await broker.init()
        assert fresh["producer_id"] == zombie["producer_id"]
        assert fresh["producer_epoch"] == zombie["producer_epoch"] + 1
        view = await broker.fetch("orders", 0, isolation_level=READ_COMMITTED)
        assert view["aborted_transactions"] == [
            {"producer_id": zombie["producer_id"], "first_offset": 0}
        ]
        assert await broker.end(zombie, commit=True, version=3) == ErrorCode.PRODUCER_FENCED
        assert await broker.end(zombie, commit=True, version=1) == (
            ErrorCode.INVALID_PRODUCER_EPOCH
        )
        assert await broker.add(zombie) == ErrorCode.PRODUCER_FENCED
        assert await broker.add(fresh) == ErrorCode.NONE
        refused = await broker.send(zombie, [b"late"], sequence=1)
        assert refused["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH

    asyncio.run(run())


def test_a_batch_into_a_partition_not_added_is_refused() -> None:
    async def run() -> None:
        broker = TxnBroker()
        await broker.storage.topics.create(TOPIC, 1)
        producer = await broker.init()
        refused = await broker.send(producer, [b"a"])
        assert refused["error_code"] == ErrorCode.INVALID_TXN_STATE

    asyncio.run(run())


def test_offsets_sent_in_a_transaction_reach_the_group_only_on_commit() -> None:
    async def run() -> None:
        broker, producer = await _ready()
        offsets = broker.storage.offsets
        key = partition_topic(TOPIC, 0)
        assert await broker.add_offsets(producer, "etl") == ErrorCode.NONE
        assert await broker.commit_offset(producer, "etl", 10) == ErrorCode.NONE
        assert offsets.get("etl", key) is None
        assert await broker.end(producer, commit=False) == ErrorCode.NONE
        assert offsets.get("etl", key) is None
        assert await broker.add_offsets(producer, "etl") == ErrorCode.NONE
        assert await broker.commit_offset(producer, "etl", 20) == ErrorCode.NONE
        assert await broker.end(producer, commit=True) == ErrorCode.NONE
        committed = offsets.get("etl", key)
        assert committed is not None and committed.offset == 20

    asyncio.run(run())


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced() -> None:
    async def run() -> None:
        broker, producer = await _ready()
        await broker.send(producer, [b"slow"])
        state = broker.coordinator.get(TXN_ID)
        assert state is not None and state.state == ONGOING
        await broker.coordinator.expire(now_ms=state.start_ms + 1000)  # not yet
        assert broker.coordinator.get(TXN_ID).state == ONGOING  # type: ignore[union-attr]
        await broker.coordinator.expire(now_ms=state.start_ms + 60001)
        after = broker.coordinator.get(TXN_ID)
        assert after is not None and after.state == COMPLETE_ABORT
        assert after.epoch == producer["producer_epoch"] + 1
        view = await broker.fetch("orders", 0, isolation_level=READ_COMMITTED)
        assert view["last_stable_offset"] == 2
        assert _controls(view) == [(1, ControlType.ABORT)]
        assert await broker.end(producer, commit=True) == ErrorCode.PRODUCER_FENCED

    asyncio.run(run())


def test_a_prepared_commit_left_by_a_crash_is_finished_at_start() -> None:
    async def run() -> None:
        broker, producer = await _ready()
        await broker.send(producer, [b"a"])
        store = broker.storage.transactions
        assert store is not None
        state = store.get(TXN_ID)
        assert state is not None
        state.state = PREPARE_COMMIT  # saved, then the gateway died before any marker
        await store.save(state)
        assert (await broker.fetch("orders", 0, isolation_level=1))["last_stable_offset"] == 0
        restarted = TransactionCoordinator(
            store, broker.storage.topics, broker.storage.offsets, broker.storage.producer_ids
        )
        await restarted.expire(recover=True)
        assert restarted.get(TXN_ID).state == COMPLETE_COMMIT  # type: ignore[union-attr]
        view = await broker.fetch("orders", 0, isolation_level=READ_COMMITTED)
        assert _records(view) == [(0, b"a")]
        assert view["last_stable_offset"] == 2

    asyncio.run(run())


def test_a_store_failure_leaves_the_outcome_prepared_for_a_retry() -> None:
    async def run() -> None:
        broker, producer = await _ready()
        await broker.send(producer, [b"a"])
        log = await broker.storage.topics.partition_of(broker.storage.topics.get(TOPIC), 0)  # type: ignore[arg-type]
        log.broken = True  # type: ignore[attr-defined]
        assert await broker.end(producer, commit=True) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert broker.coordinator.get(TXN_ID).state == PREPARE_COMMIT  # type: ignore[union-attr]
        log.broken = False  # type: ignore[attr-defined]
        assert await broker.end(producer, commit=True) == ErrorCode.NONE  # the client's retry
        assert broker.coordinator.get(TXN_ID).state == COMPLETE_COMMIT  # type: ignore[union-attr]

    asyncio.run(run())


def test_requests_waiting_on_a_stalled_store_are_answered_busy_in_time() -> None:
    """EndTxn whose marker cannot be stored (a stalled broker) is answered with the retriable
    COORDINATOR_LOAD_IN_PROGRESS once answer_seconds pass, and so are the id's requests
    queued behind it; the completion goes on, and the client's retry sees its outcome."""

    async def run() -> None:
        broker, producer = await _ready()
        broker.coordinator.answer_seconds = 0.1
        await broker.send(producer, [b"a"])
        log = await broker.storage.topics.partition_of(broker.storage.topics.get(TOPIC), 0)  # type: ignore[arg-type]
        log.stall = asyncio.Event()  # type: ignore[attr-defined]
        assert await broker.end(producer, commit=True) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        again = await broker.init()  # behind the completion, which holds the id
        assert again["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        log.stall.set()  # type: ignore[attr-defined]
        log.stall = None  # type: ignore[attr-defined]
        for _ in range(100):  # the completion, then the InitProducerId behind it, go on
            state = broker.coordinator.get(TXN_ID)
            if state is not None and state.epoch > producer["producer_epoch"]:
                break
            await asyncio.sleep(0.01)
        assert state is not None and state.epoch == producer["producer_epoch"] + 1
        fetched = await broker.fetch("orders", 0)
        assert [kind for _, kind in _controls(fetched)] == [ControlType.COMMIT]
        await broker.coordinator.close()

    asyncio.run(run())


def test_timeouts_beyond_the_maximum_are_refused() -> None:
    async def run() -> None:
        broker = TxnBroker()
        response = await broker.init(timeout_ms=900_001)
        assert response["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT

    asyncio.run(run())


@given(st.binary(max_size=8))
def test_control_keys_decode_or_fail_with_their_own_error(key: bytes) -> None:
    try:
        kind = decode_control_key(key)
    except ControlRecordError:
        return
    assert key[:4] == encode_control_key(kind)


@given(st.integers(0, 2**63 - 1), st.integers(0, 32767), st.booleans(), st.integers(0, 2**40))
def test_markers_are_control_batches_of_their_producer(
    producer_id: int, epoch: int, commit: bool, timestamp: int
) -> None:
    message = marker_message(producer_id, epoch, commit, timestamp)
    (batch,) = decode_batches(message.payload or b"")
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.record_count) == (producer_id, epoch, 1)
    expected = ControlType.COMMIT if commit else ControlType.ABORT
    assert decode_control_key(batch.records[0].key) == expected


def test_describe_and_list_transactions_show_the_coordinator_state() -> None:
    async def run() -> None:
        broker, producer = await _ready()
        await broker.send(producer, [b"a"])
        described = await broker.call(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN_ID, "never-used"]}
        )
        known, unknown = described["transaction_states"]
        assert (known["error_code"], known["transaction_state"]) == (0, ONGOING)
        assert (known["producer_id"], known["producer_epoch"]) == (
            producer["producer_id"],
            producer["producer_epoch"],
        )
        assert known["topics"] == [{"topic": "orders", "partitions": [0]}]
        assert unknown["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        listing = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}
        listed = await broker.call(ApiKey.LIST_TRANSACTIONS, 1, listing)
        assert [
            (t["transactional_id"], t["transaction_state"]) for t in listed["transaction_states"]
        ] == [(TXN_ID, ONGOING)]
        listing["state_filters"] = ["CompleteCommit"]
        assert (await broker.call(ApiKey.LIST_TRANSACTIONS, 1, listing))["transaction_states"] == []
        producers = await broker.call(
            ApiKey.DESCRIBE_PRODUCERS,
            0,
            {"topics": [{"name": "orders", "partition_indexes": [0]}]},
        )
        (active,) = producers["topics"][0]["partitions"][0]["active_producers"]
        assert active["current_txn_start_offset"] == 0

    asyncio.run(run())


@given(st.text(max_size=30))
def test_any_txn_property_parses_or_is_ignored(value: str) -> None:
    parsed = parse_txn_value(value)
    if parsed is not None:
        assert txn_value(*parsed).split(":") == [str(n) for n in parsed]


_EVENTS = st.lists(
    st.tuples(st.integers(1, 3), st.sampled_from(["record", "commit", "abort"])), max_size=40
)


@given(_EVENTS)
def test_the_index_keeps_kafkas_lso_and_aborted_list(events: list[tuple[int, str]]) -> None:
    """Against a plain model: the LSO is the first offset of the oldest open transaction,
    and each abort lists its producer's first offset up to its marker."""
    index = TransactionIndex()
    open_at: dict[int, int] = {}
    aborted: list[AbortedTransaction] = []
    for offset, (producer_id, kind) in enumerate(events):
        properties = {TXN: txn_value(producer_id, 0)}
        if kind != "record":
            properties[MARKER] = kind
        index.observe(StoredMessage((0, offset, -1), b"", "", properties, 0, 0), offset)
        if kind == "record":
            open_at.setdefault(producer_id, offset)
        else:
            first = open_at.pop(producer_id, None)
            if kind == "abort" and first is not None:
                aborted.append(AbortedTransaction(producer_id, first, offset))
        end = offset + 1
        assert index.last_stable_offset(end) == min(open_at.values(), default=end)
    assert index.aborted_between(0, len(events) + 1) == aborted
    restored = TransactionIndex(index.snapshot())
    assert restored.last_stable_offset(len(events)) == index.last_stable_offset(len(events))


def test_an_id_another_cluster_member_coordinates_is_answered_not_coordinator() -> None:
    """docs/cluster.md: the owner of `kafka/txn/<id>` coordinates it; any other member answers
    NOT_COORDINATOR (clients ask FindCoordinator again) and its timer leaves the id alone."""

    async def run() -> None:
        broker, producer = await _ready()
        await broker.send(producer, [b"open"])
        state = broker.coordinator.get(TXN_ID)
        assert state is not None and state.state == ONGOING
        broker.coordinator.serves = lambda transactional_id: transactional_id != TXN_ID
        assert (await broker.init())["error_code"] == ErrorCode.NOT_COORDINATOR
        assert await broker.add(producer) == ErrorCode.NOT_COORDINATOR
        assert await broker.add_offsets(producer, "g") == ErrorCode.NOT_COORDINATOR
        assert await broker.end(producer, commit=True) == ErrorCode.NOT_COORDINATOR
        await broker.coordinator.expire(now_ms=state.start_ms + 60001)
        assert broker.coordinator.get(TXN_ID).state == ONGOING  # type: ignore[union-attr]
        # a partition this member leads still takes the producer's batches
        accepted = await broker.send(producer, [b"more"], sequence=1)
        assert accepted["error_code"] == ErrorCode.NONE
        broker.coordinator.serves = lambda _transactional_id: True
        assert await broker.end(producer, commit=True) == ErrorCode.NONE

    asyncio.run(run())


def test_a_compressed_transactional_batch_is_fetched_compressed_and_transactional() -> None:
    """A `pulsar`-format topic serves a record in its producer's codec (compression.type
    `producer`) and a transactional producer's records as a transactional batch: both at once."""

    async def run() -> None:
        broker, producer = await _ready()
        await broker.produce(
            "orders",
            [b"a", b"b"],
            producer_id=producer["producer_id"],
            producer_epoch=producer["producer_epoch"],
            base_sequence=0,
            is_transactional=True,
            compression_type=3,  # lz4
            transactional_id=TXN_ID,
        )
        assert await broker.end(producer, commit=True) == ErrorCode.NONE
        view = await broker.fetch("orders", 0)
        data = [b for b in decode_batches(bytes(view["records"])) if not b.is_control]
        assert [b.compression for b in data] == [3]
        assert data[0].is_transactional and data[0].producer_id == producer["producer_id"]
        assert [r.value for r in data[0].records] == [b"a", b"b"]

    asyncio.run(run())
