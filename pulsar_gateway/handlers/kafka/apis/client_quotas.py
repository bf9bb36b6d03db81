"""DescribeClientQuotas and AlterClientQuotas over the stored client quotas (docs/quotas.md).

`kafka-configs --alter --entity-type users|clients --add-config producer_byte_rate=...` and
AdminClient's quota calls set what `handlers/kafka/quotas.py` enforces: the byte rates of
producers and consumers. Entities, keys and values are checked as Kafka checks them
(INVALID_REQUEST with Kafka's reason); a key Kafka knows that the gateway does not enforce
(request_percentage, controller_mutation_rate, connection_creation_rate) is refused with
POLICY_VIOLATION and nothing of its entry is stored, so nobody believes a limit is in force
that is not. Both APIs need the cluster right Kafka asks for (docs/security.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pulsar_gateway.handlers.kafka.authorization import cluster_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import QuotaEntity
from pulsar_gateway.handlers.kafka.quotas import ENFORCED_KEYS
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import ALTER, DESCRIBE

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
CLIENT_KEYS = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
)
IP_KEYS = ("connection_creation_rate",)
WHOLE_NUMBER_KEYS = ("producer_byte_rate", "consumer_byte_rate", "connection_creation_rate")
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> _Refused:
    return _Refused(ErrorCode.INVALID_REQUEST, message)


# ---- DescribeClientQuotas --------------------------------------------------------------------


async def describe(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    answer = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None}
    try:
        if not cluster_allowed(context, DESCRIBE):
            raise _Refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        components = request["components"]
        _check_filter(components)
    except _Refused as refused:
        return {
            **answer,
            "error_code": refused.code,
            "error_message": refused.message,
            "entries": None,
        }
    store = context.storage.quotas
    stored = [] if store is None else store.entries()
    entries = [
        {
            "entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity],
            "values": [{"key": key, "value": float(value)} for key, value in values.items()],
        }
        for entity, values in sorted(stored, key=lambda item: _sort_key(item[0]))
        if _matches(entity, components, request["strict"])
    ]
    return {**answer, "entries": entries}


def _check_filter(components: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    for component in components:
        kind, match_type = component["entity_type"], component["match_type"]
        if kind not in ENTITY_TYPES:
            raise _invalid(f"Unknown entity type {kind!r}")
        if kind in seen:
            raise _invalid(f"Duplicate {kind} filter component entity type")
        seen.add(kind)
        if match_type == MATCH_EXACT and component["match"] is None:
            raise _invalid(f"Unexpected null match for entity type {kind}")
        if match_type in (MATCH_DEFAULT, MATCH_ANY) and component["match"] is not None:
            raise _invalid(f"Unexpected match for entity type {kind} with this match type")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise _invalid(f"Unknown match type {match_type}")
    if IP in seen and len(seen) > 1:
        raise _invalid("Invalid entity filter component combination: ip with user or client-id")


def _matches(entity: QuotaEntity, components: list[dict[str, Any]], strict: bool) -> bool:
    names = dict(entity)
    for component in components:
        kind = component["entity_type"]
        if kind not in names:
            return False
        if component["match_type"] == MATCH_EXACT and names[kind] != component["match"]:
            return False
        if component["match_type"] == MATCH_DEFAULT and names[kind] is not None:
            return False
    return not strict or set(names) <= {c["entity_type"] for c in components}


def _sort_key(entity: QuotaEntity) -> list[tuple[str, str]]:
    return [(kind, "" if name is None else name) for kind, name in entity]


# ---- AlterClientQuotas -----------------------------------------------------------------------


async def alter(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    allowed = cluster_allowed(context, ALTER)
    store = context.storage.quotas
    entries = []
    for entry in request["entries"]:
        code, message = ErrorCode.NONE, None
        try:
            if not allowed:
                raise _Refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
            entity = _entity(entry["entity"])
            values = _values(entity, entry["ops"])
            if store is None:
                raise _Refused(ErrorCode.POLICY_VIOLATION, "this gateway stores no quotas")
            if not request["validate_only"]:
                await store.alter(entity, values)
        except _Refused as refused:
            code, message = refused.code, refused.message
        entries.append({"error_code": code, "error_message": message, "entity": entry["entity"]})
    return {"throttle_time_ms": 0, "entries": entries}


def _entity(parts: list[dict[str, Any]]) -> QuotaEntity:
    """The entity in its one spelling (user before client-id), checked as Kafka checks it."""
    names: dict[str, str | None] = {}
    for part in parts:
        kind = part["entity_type"]
        if kind not in ENTITY_TYPES:
            raise _invalid(f"Unknown entity type {kind!r}")
        if kind in names:
            raise _invalid(f"Duplicate {kind} entity type")
        names[kind] = part["entity_name"]
    if not names:
        raise _invalid("Invalid empty client quota entity")
    if IP in names and len(names) > 1:
        raise _invalid("Invalid quota entity combination: ip with user or client-id")
    return tuple((kind, names[kind]) for kind in ENTITY_TYPES if kind in names)


def _values(entity: QuotaEntity, ops: list[dict[str, Any]]) -> Mapping[str, float | None]:
    allowed = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
    values: dict[str, float | None] = {}
    for op in ops:
        key, value = op["key"], op["value"]
        if key in values:
            raise _invalid(f"Duplicate quota key {key}")
        if key not in allowed:
            raise _invalid(f"Unknown quota key {key!r} for this entity type")
        if not op["remove"]:
            if not math.isfinite(value):
                raise _invalid(f"Quota {key} must be a finite number")
            if key in WHOLE_NUMBER_KEYS and value != int(value):
                raise _invalid(f"Quota {key} must be a whole number, not {value}")
            if value <= 0:
                raise _invalid(f"Quota {key} must be positive, not {value}")
        if key not in ENFORCED_KEYS:
            raise _Refused(
                ErrorCode.POLICY_VIOLATION,
                f"quota {key} is not enforced by this gateway, so it is not stored; the"
                f" enforced ones are {', '.join(ENFORCED_KEYS)}",
            )
        values[key] = None if op["remove"] else float(value)
    return values
