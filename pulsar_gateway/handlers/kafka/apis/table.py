"""The one table of the Kafka APIs the gateway serves: the coroutine that answers each
request, and the versions it is served at (also what ApiVersions lists).

Versions are capped where a newer one needs something the gateway does not do yet.
OffsetCommit and OffsetFetch v9 are KIP-848's versions: for a classic group they carry
the generation and member id as v8 does, for a `consumer` group (ConsumerGroupHeartbeat)
the member epoch. Fetch v13+ names topics by
id. FindCoordinator v6's share-group key type is refused. Produce
below v3 and Fetch below v4 carry message format v0/v1, which the gateway does not write;
every client that reads RecordBatch v2 negotiates higher. AddPartitionsToTxn v4+ is the
brokers' batched form; EndTxn v5 is KIP-890's epoch bump per transaction, not done. The
codec's own range (`protocol.SUPPORTED`) bounds each entry from the other side.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pulsar_gateway.handlers.kafka.apis import (
    acls,
    alter_configs,
    client_quotas,
    cluster,
    configs,
    consumer_groups,
    delete_records,
    fetch,
    group_offsets,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
    producers,
    replicas,
    scram_credentials,
    share_fetch,
    share_groups,
    share_offsets,
    topic_admin,
    transactions,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

Handler = Callable[[KafkaContext, protocol.RequestHeader, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Api:
    """One served API: its handler, the versions served, and, where the highest served
    version stops below Kafka's, why (docs/compatibility.md shows it; a test requires it)."""

    handler: Handler
    lowest: int
    highest: int
    capped_because: str = ""


async def api_versions(
    context: KafkaContext, header: protocol.RequestHeader, request: dict[str, Any]
) -> dict[str, Any]:
    """ApiVersions, the first request of every client.

    The body carries no tagged fields: librdkafka 2.0.2 (kcat in Debian) fails with
    "Read underflow" on tagged fields it does not expect in a v3 response.
    """
    return {"error_code": ErrorCode.NONE, "api_keys": served_versions(), "throttle_time_ms": 0}


def api_versions_frame(api_version: int, correlation_id: int) -> bytes:
    """`api_versions`' answer as a frame, encoded once per version: it is the same for
    every client bar the correlation id (bytes 4-8, behind the size prefix; ApiVersions
    answers with header v0 at every version). Pipelined by a client that never reads,
    building and encoding it each time took more of the event loop than a 99,999-topic
    Metadata did (issue 33's hostile-clients test, profiled)."""
    frame = _api_versions_frame(api_version)
    return frame[:4] + _CORRELATION.pack(correlation_id) + frame[8:]


_CORRELATION = struct.Struct(">i")


@functools.cache  # one entry per served version of ApiVersions (decode checks the version)
def _api_versions_frame(api_version: int) -> bytes:
    body = {"error_code": ErrorCode.NONE, "api_keys": served_versions(), "throttle_time_ms": 0}
    return protocol.encode_response(ApiKey.API_VERSIONS, api_version, 0, body)


async def sasl_outside_connection(
    context: KafkaContext, header: protocol.RequestHeader, request: dict[str, Any]
) -> dict[str, Any]:
    """SaslHandshake and SaslAuthenticate are answered by the listener, which holds the
    connection's SASL state (handlers/kafka/sasl.py); listed here for their versions. A
    request reaching this (a tool calling `answer` directly) is refused."""
    if header.api_key == ApiKey.SASL_HANDSHAKE:
        return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": []}
    return {
        "error_code": ErrorCode.ILLEGAL_SASL_STATE,
        "error_message": "no SASL state outside a connection",
        "auth_bytes": b"",
        "session_lifetime_ms": 0,
    }


API_TABLE: dict[ApiKey, Api] = {
    ApiKey.PRODUCE: Api(produce.handle, 3, 11),
    ApiKey.FETCH: Api(fetch.handle, 4, 17),
    ApiKey.LIST_OFFSETS: Api(list_offsets.handle, 0, 10),
    ApiKey.METADATA: Api(metadata.handle, 0, 12),
    ApiKey.OFFSET_COMMIT: Api(group_offsets.offset_commit, 0, 9),
    ApiKey.OFFSET_FETCH: Api(group_offsets.offset_fetch, 0, 9),
    ApiKey.FIND_COORDINATOR: Api(groups.find_coordinator, 0, 6),
    ApiKey.JOIN_GROUP: Api(groups.join_group, 0, 9),
    ApiKey.HEARTBEAT: Api(groups.heartbeat, 0, 4),
    ApiKey.LEAVE_GROUP: Api(groups.leave_group, 0, 5),
    ApiKey.SYNC_GROUP: Api(groups.sync_group, 0, 5),
    ApiKey.DESCRIBE_GROUPS: Api(groups.describe_groups, 0, 5),
    ApiKey.LIST_GROUPS: Api(groups.list_groups, 0, 5),
    ApiKey.API_VERSIONS: Api(api_versions, 0, 4),
    ApiKey.CREATE_TOPICS: Api(topic_admin.create_topics, 0, 7),
    ApiKey.DELETE_TOPICS: Api(topic_admin.delete_topics, 0, 6),
    ApiKey.DELETE_RECORDS: Api(delete_records.handle, 0, 2),
    ApiKey.INIT_PRODUCER_ID: Api(init_producer_id.handle, 0, 5),
    ApiKey.ADD_PARTITIONS_TO_TXN: Api(
        transactions.add_partitions_to_txn,
        0,
        3,
        "v4+ is the batched form Kafka brokers send each other to verify transactions; "
        "Kafka's clients stop at v3",
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: Api(transactions.add_offsets_to_txn, 0, 4),
    ApiKey.END_TXN: Api(
        transactions.end_txn,
        0,
        4,
        "v5 (an epoch bump per transaction, KIP-890 part 2) is unstable in Kafka's "
        "definitions, so Kafka's brokers do not offer it either",
    ),
    ApiKey.TXN_OFFSET_COMMIT: Api(transactions.txn_offset_commit, 0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Api(replicas.offset_for_leader_epoch, 0, 4),
    ApiKey.DESCRIBE_ACLS: Api(acls.describe_acls, 0, 3),
    ApiKey.CREATE_ACLS: Api(acls.create_acls, 0, 3),
    ApiKey.DELETE_ACLS: Api(acls.delete_acls, 0, 3),
    ApiKey.DESCRIBE_CONFIGS: Api(configs.describe_configs, 0, 4),
    ApiKey.ALTER_CONFIGS: Api(alter_configs.alter_configs, 0, 2),
    ApiKey.ALTER_REPLICA_LOG_DIRS: Api(replicas.alter_replica_log_dirs, 0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: Api(replicas.describe_log_dirs, 0, 4),
    ApiKey.CREATE_PARTITIONS: Api(topic_admin.create_partitions, 0, 3),
    ApiKey.DELETE_GROUPS: Api(groups.delete_groups, 0, 2),
    ApiKey.ELECT_LEADERS: Api(replicas.elect_leaders, 0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Api(alter_configs.incremental_alter_configs, 0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Api(replicas.alter_partition_reassignments, 0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Api(replicas.list_partition_reassignments, 0, 0),
    ApiKey.OFFSET_DELETE: Api(group_offsets.offset_delete, 0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: Api(client_quotas.describe, 0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: Api(client_quotas.alter, 0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Api(scram_credentials.describe, 0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Api(scram_credentials.alter, 0, 0),
    ApiKey.DESCRIBE_QUORUM: Api(cluster.describe_quorum, 0, 2),
    ApiKey.DESCRIBE_CLUSTER: Api(cluster.describe_cluster, 0, 1),
    ApiKey.DESCRIBE_PRODUCERS: Api(producers.describe_producers, 0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: Api(producers.describe_transactions, 0, 0),
    ApiKey.LIST_TRANSACTIONS: Api(producers.list_transactions, 0, 1),
    ApiKey.SASL_HANDSHAKE: Api(sasl_outside_connection, 0, 1),
    ApiKey.SASL_AUTHENTICATE: Api(sasl_outside_connection, 0, 2),
    ApiKey.LIST_CLIENT_METRICS_RESOURCES: Api(cluster.list_client_metrics_resources, 0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: Api(metadata.describe_topic_partitions, 0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Api(consumer_groups.heartbeat, 0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Api(consumer_groups.describe, 0, 0),
    # KIP-932 share groups: v1 is Kafka 4.1's first stable version (v0 was 4.0's early
    # access, which Kafka 4.1 removed); kafka_codec/protocol/spec_amendments.py
    ApiKey.SHARE_GROUP_HEARTBEAT: Api(share_groups.heartbeat, 1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: Api(share_groups.describe, 1, 1),
    ApiKey.SHARE_FETCH: Api(share_fetch.share_fetch, 1, 1),
    ApiKey.SHARE_ACKNOWLEDGE: Api(share_fetch.share_acknowledge, 1, 1),
    # the share group offsets admin APIs: Kafka 4.1's v0, and Describe's v1 (4.2, the lag)
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: Api(share_offsets.describe_offsets, 0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: Api(share_offsets.alter_offsets, 0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: Api(share_offsets.delete_offsets, 0, 0),
}


def versions_of(api_key: int) -> tuple[int, int]:
    """(lowest, highest) served; (1, 0), an empty range, for an API not served."""
    return _served_ranges().get(api_key, (1, 0))


@functools.cache  # the table and the generated definitions do not change once loaded
def _served_ranges() -> dict[int, tuple[int, int]]:
    """Every API of the table the codec knows: (lowest, highest) served. Looked up for
    every request (its version checked before decoding)."""
    supported = protocol.SUPPORTED
    return {
        int(key): (max(supported[key][0], api.lowest), min(supported[key][1], api.highest))
        for key, api in API_TABLE.items()
        if key in supported
    }


def served_apis() -> dict[int, tuple[int, int, str]]:
    """Every API in the table: (lowest, highest served, why the range stops below Kafka's,
    or ""): the one table as the compatibility matrix reads it."""
    return {int(key): (*versions_of(key), api.capped_because) for key, api in API_TABLE.items()}


@functools.cache
def served_versions() -> list[dict[str, int]]:
    """ApiVersions' list: built once and shared by every answer (which only read it)."""
    return [
        {"api_key": key, "min_version": versions_of(key)[0], "max_version": versions_of(key)[1]}
        for key in sorted(API_TABLE)
    ]


def unsupported_api_versions(correlation_id: int) -> bytes:
    """Kafka answers an ApiVersions version it does not know with v0 and its own list."""
    return protocol.encode_response(
        ApiKey.API_VERSIONS,
        0,
        correlation_id,
        {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": served_versions()},
    )
