"""Which Kafka APIs the gateway serves, and at which versions.

Versions are capped where a newer one would need something the gateway does not do
yet (Fetch v13+ and DeleteTopics v6+ address topics by id only). Produce below v3
and Fetch below v4 carry message format v0/v1, which the gateway does not write;
every client that reads RecordBatch v2 negotiates higher.
"""

from __future__ import annotations

from pulsar_gateway.kafka_codec import protocol

API_VERSIONS = 18

HIGHEST: dict[int, int] = {
    0: 9,  # Produce
    1: 12,  # Fetch
    2: 8,  # ListOffsets
    3: 12,  # Metadata
    8: 8,  # OffsetCommit (v9 is for KIP-848 member epochs)
    9: 8,  # OffsetFetch (v8: several groups at once; v9 is KIP-848)
    10: 4,  # FindCoordinator (v4: batched keys; v5+ add share groups)
    11: 9,  # JoinGroup
    12: 4,  # Heartbeat
    13: 5,  # LeaveGroup
    14: 5,  # SyncGroup
    15: 5,  # DescribeGroups
    16: 5,  # ListGroups
    18: 3,  # ApiVersions
    19: 7,  # CreateTopics
    20: 5,  # DeleteTopics
    22: 4,  # InitProducerId
    32: 4,  # DescribeConfigs
    37: 3,  # CreatePartitions
    42: 2,  # DeleteGroups
    47: 0,  # OffsetDelete
    60: 1,  # DescribeCluster
}
LOWEST: dict[int, int] = {0: 3, 1: 4}


def versions_of(api_key: int) -> tuple[int, int]:
    """(lowest, highest) served; (1, 0), an empty range, for an API not served."""
    if api_key not in HIGHEST or api_key not in protocol.SUPPORTED:
        return (1, 0)
    low, high = protocol.SUPPORTED[api_key]
    return max(low, LOWEST.get(api_key, low)), min(high, HIGHEST[api_key])


def served_versions() -> list[dict[str, int]]:
    return [
        {"api_key": key, "min_version": versions_of(key)[0], "max_version": versions_of(key)[1]}
        for key in sorted(HIGHEST)
    ]
