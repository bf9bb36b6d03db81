"""Versions and APIs newer than the spec set the generator reads: KIP-932's first stable
versions, and its share group offsets admin APIs.

The specs beside the checkout are Kafka 4.0's, where the share group APIs exist only as
version 0, an early-access draft marked unstable. Kafka 4.1 made them stable as version 1,
and the clients that speak share groups (librdkafka 2.16 among them) ask for version 1
only. What changed from 0 to 1, as KIP-932 and Kafka 4.1 define it:

- ShareGroupHeartbeat, ShareGroupDescribe, ShareAcknowledge: the same fields;
- ShareFetch request: `MaxRecords` and `BatchSize` (int32) follow `MaxBytes`, and a
  partition's `PartitionMaxBytes` is version 0 only;
- ShareFetch response: `AcquisitionLockTimeoutMs` (int32) follows the top-level
  `ErrorMessage`.

The generator applies these edits to the loaded specs, so messages.py carries both
versions; version 0 stays decodable, and the API table serves version 1 (docs/share-groups.md).
Once the spec set is Kafka 4.1's, `amend` finds nothing to do and can go.

Kafka 4.1 also added three admin APIs for a share group's positions, absent from the 4.0
set altogether; `added` states them as KIP-932 and Kafka 4.1/4.2 define them, all flexible
from version 0 (docs/share-groups.md, "Share group offsets"):

- DescribeShareGroupOffsets (90): groups, each with its topics (null: all) and their
  partition indexes; the answer gives per group, topic (name and id) and partition the
  share-partition start offset, a leader epoch, an error code and message, and from
  version 1 (Kafka 4.2, KIP-1226) the lag (-1 when unknown); per group an error too.
- AlterShareGroupOffsets (91): one group, topics with partitions and each one's new start
  offset; the answer has a top-level error and per topic and partition an error.
- DeleteShareGroupOffsets (92): one group and topic names; the answer has a top-level
  error and per topic an error. A spec file of the same API in the spec set wins.

And ListClientMetricsResources (74), which Kafka 4.1 renamed ListConfigResources: its v1
(KIP-1142) adds `ResourceTypes` (int8 array) to the request and `ResourceType` (int8,
default 16, client metrics) to each listed resource.
"""

from __future__ import annotations

from typing import Any

SHARE_APIS = {76, 77, 78, 79}
SHARE_FETCH = 78
LIST_CONFIG_RESOURCES = 74
STABLE = 1


def _field(name: str, about: str) -> dict[str, Any]:
    return {"name": name, "type": "int32", "versions": "1+", "about": about}


def _insert_after(fields: list[dict[str, Any]], anchor: str, field: dict[str, Any]) -> None:
    if any(existing["name"] == field["name"] for existing in fields):
        return
    index = next(i for i, existing in enumerate(fields) if existing["name"] == anchor)
    fields.insert(index + 1, field)


def _spec(key: int, kind: str, name: str, versions: str, fields: list[Any]) -> dict[str, Any]:
    spec = {"apiKey": key, "type": kind, "name": name, "validVersions": versions}
    return {**spec, "flexibleVersions": "0+", "fields": fields}


def _f(name: str, kind: str, *members: dict[str, Any], **extra: str) -> dict[str, Any]:
    """One field, in every version unless `versions` says otherwise."""
    field: dict[str, Any] = {"name": name, "type": kind, "versions": "0+", **extra}
    if members:
        field["fields"] = list(members)
    return field


def _error(prefix: str = "") -> list[dict[str, Any]]:
    return [
        _f(prefix + "ErrorCode", "int16"),
        _f(prefix + "ErrorMessage", "string", nullableVersions="0+", default="null"),
    ]


def _topic_result(*members: dict[str, Any]) -> list[dict[str, Any]]:
    return [_f("TopicName", "string"), _f("TopicId", "uuid"), *members]


def added() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(request, response) specs of the share group offsets APIs (keys 90-92)."""
    throttle = _f("ThrottleTimeMs", "int32")
    describe = "DescribeShareGroupOffsets"
    alter = "AlterShareGroupOffsets"
    delete = "DeleteShareGroupOffsets"
    describe_request = [
        _f(
            "Groups",
            f"[]{describe}RequestGroup",
            _f("GroupId", "string"),
            _f(
                "Topics",
                f"[]{describe}RequestTopic",
                _f("TopicName", "string"),
                _f("Partitions", "[]int32"),
                nullableVersions="0+",
            ),
        )
    ]
    describe_response = [
        throttle,
        _f(
            "Groups",
            f"[]{describe}ResponseGroup",
            _f("GroupId", "string"),
            _f(
                "Topics",
                f"[]{describe}ResponseTopic",
                *_topic_result(
                    _f(
                        "Partitions",
                        f"[]{describe}ResponsePartition",
                        _f("PartitionIndex", "int32"),
                        _f("StartOffset", "int64"),
                        _f("LeaderEpoch", "int32"),
                        _f("Lag", "int64", versions="1+", default="-1"),
                        *_error(),
                    ),
                ),
            ),
            *_error(),
        ),
    ]
    alter_request = [
        _f("GroupId", "string"),
        _f(
            "Topics",
            f"[]{alter}RequestTopic",
            _f("TopicName", "string"),
            _f(
                "Partitions",
                f"[]{alter}RequestPartition",
                _f("PartitionIndex", "int32"),
                _f("StartOffset", "int64"),
            ),
        ),
    ]
    alter_response = [
        throttle,
        *_error(),
        _f(
            "Responses",
            f"[]{alter}ResponseTopic",
            *_topic_result(
                _f(
                    "Partitions",
                    f"[]{alter}ResponsePartition",
                    _f("PartitionIndex", "int32"),
                    *_error(),
                ),
            ),
        ),
    ]
    delete_request = [
        _f("GroupId", "string"),
        _f("Topics", f"[]{delete}RequestTopic", _f("TopicName", "string")),
    ]
    delete_response = [
        throttle,
        *_error(),
        _f("Responses", f"[]{delete}ResponseTopic", *_topic_result(*_error())),
    ]
    out = []
    for key, name, versions, request, response in (
        (90, describe, "0-1", describe_request, describe_response),
        (91, alter, "0", alter_request, alter_response),
        (92, delete, "0", delete_request, delete_response),
    ):
        out.append(
            (
                {
                    **_spec(key, "request", f"{name}Request", versions, request),
                    "listeners": ["broker"],
                },
                _spec(key, "response", f"{name}Response", versions, response),
            )
        )
    return out


def _list_config_resources(request: dict[str, Any], response: dict[str, Any]) -> None:
    """ListClientMetricsResources v0 became ListConfigResources in Kafka 4.1 (KIP-1142),
    whose v1 asks for resource types and answers each resource's type (the field names
    stay the 4.0 ones: the wire does not carry them)."""
    for spec in (request, response):
        spec["validVersions"] = "0-1"
    request["fields"].append(_f("ResourceTypes", "[]int8", versions="1+"))
    resources = next(f for f in response["fields"] if f["name"] == "ClientMetricsResources")
    resources["fields"].append(_f("ResourceType", "int8", versions="1+", default="16"))


def amend(request: dict[str, Any], response: dict[str, Any]) -> None:
    """Edit one API's (request, response) specs in place to add KIP-932's stable version,
    and ListConfigResources v1."""
    key = request["apiKey"]
    if key == LIST_CONFIG_RESOURCES and request["validVersions"] == "0":
        _list_config_resources(request, response)
        return
    if key not in SHARE_APIS or request["validVersions"] != "0":
        return
    for spec in (request, response):
        spec["validVersions"] = f"0-{STABLE}"
        spec.pop("latestVersionUnstable", None)
    if key != SHARE_FETCH:
        return
    fields = request["fields"]
    _insert_after(fields, "MaxBytes", _field("MaxRecords", "The most records to fetch."))
    _insert_after(fields, "MaxRecords", _field("BatchSize", "The preferred acquired batch."))
    topics = next(field for field in fields if field["name"] == "Topics")
    partitions = next(field for field in topics["fields"] if field["name"] == "Partitions")
    for field in partitions["fields"]:
        if field["name"] == "PartitionMaxBytes":
            field["versions"] = "0"
    _insert_after(
        response["fields"],
        "ErrorMessage",
        _field("AcquisitionLockTimeoutMs", "How long the acquired records stay locked."),
    )
