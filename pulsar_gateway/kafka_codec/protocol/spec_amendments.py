"""Versions newer than the spec set the generator reads: KIP-932's first stable versions.

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
"""

from __future__ import annotations

from typing import Any

SHARE_APIS = {76, 77, 78, 79}
SHARE_FETCH = 78
STABLE = 1


def _field(name: str, about: str) -> dict[str, Any]:
    return {"name": name, "type": "int32", "versions": "1+", "about": about}


def _insert_after(fields: list[dict[str, Any]], anchor: str, field: dict[str, Any]) -> None:
    if any(existing["name"] == field["name"] for existing in fields):
        return
    index = next(i for i, existing in enumerate(fields) if existing["name"] == anchor)
    fields.insert(index + 1, field)


def amend(request: dict[str, Any], response: dict[str, Any]) -> None:
    """Edit one API's (request, response) specs in place to add KIP-932's stable version."""
    key = request["apiKey"]
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
