"""Group configs: Kafka's GROUP config resource (type 32), described with DescribeConfigs and
altered with IncrementalAlterConfigs or AlterConfigs, as `kafka-configs --entity-type
groups` and admin clients do. The keys served are share groups' (docs/share-groups.md,
"Group configs"); a key the gateway does not act on is refused with INVALID_CONFIG rather
than stored for nothing. Rights: DESCRIBE on the group to describe, ALTER to alter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.apis.broker_configs import CONFIG_TYPES, DEFAULT_CONFIG
from pulsar_gateway.handlers.kafka.authorization import group_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import ALTER, DESCRIBE

GROUP = 32
DYNAMIC_GROUP_CONFIG = 8  # Kafka's ConfigSource for a group's own config

AUTO_OFFSET_RESET = "share.auto.offset.reset"
LOCK_DURATION = "share.record.lock.duration.ms"
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
ISOLATION_LEVEL = "share.isolation.level"


class GroupConfigRefused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class GroupConfig:
    name: str
    kind: str  # Kafka's ConfigType name
    default: Callable[[KafkaSection], str]  # the broker-wide value a group falls back to
    check: Callable[[str], str | None]  # a problem with a value, or None
    documentation: str


def _choice(*allowed: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}"

    return check


def _between(low: int, high: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            number = int(value)
        except ValueError:
            return "must be an integer"
        return None if low <= number <= high else f"must be between {low} and {high}"

    return check


GROUP_CONFIGS: dict[str, GroupConfig] = {
    config.name: config
    for config in (
        GroupConfig(
            AUTO_OFFSET_RESET,
            "STRING",
            lambda s: s.share_auto_offset_reset,
            _choice("latest", "earliest"),
            "Where a share group starts on a partition it never read: latest or earliest.",
        ),
        GroupConfig(
            LOCK_DURATION,
            "INT",
            lambda s: str(s.share_record_lock_duration_ms),
            _between(1000, 3600000),
            "How long a share group member holds the records it fetched, in milliseconds.",
        ),
        GroupConfig(
            ISOLATION_LEVEL,
            "STRING",
            lambda _s: "read_uncommitted",
            _choice("read_uncommitted", "read_committed"),
            "read_committed: a share group gets records of committed transactions only.",
        ),
        GroupConfig(
            SESSION_TIMEOUT,
            "INT",
            lambda s: str(s.group_consumer_session_timeout_ms),
            _between(1000, 3600000),
            "A share group member silent this long is removed, in milliseconds.",
        ),
        GroupConfig(
            HEARTBEAT_INTERVAL,
            "INT",
            lambda s: str(s.group_consumer_heartbeat_interval_ms),
            _between(100, 3600000),
            "How often share group members are told to heartbeat, in milliseconds.",
        ),
    )
}


def describe_group(
    context: KafkaContext, name: str, keys: set[str] | None, documented: bool
) -> dict[str, Any]:
    """The fields of one DescribeConfigs result for a GROUP resource."""
    store = context.storage.group_configs
    if store is None:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": "no group configs"}
    if not group_allowed(context, name, DESCRIBE):
        return {
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "error_message": "Authorization failed.",
        }
    own = store.get(name)
    return {
        "configs": [
            {
                "name": config.name,
                "value": own.get(config.name, config.default(context.settings)),
                "read_only": False,
                "is_default": config.name not in own,
                "config_source": DYNAMIC_GROUP_CONFIG if config.name in own else DEFAULT_CONFIG,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": CONFIG_TYPES[config.kind],
                "documentation": config.documentation if documented else None,
            }
            for config in GROUP_CONFIGS.values()
            if keys is None or config.name in keys
        ]
    }


async def alter_group(
    context: KafkaContext,
    name: str,
    change: Callable[[dict[str, str], list[dict[str, Any]]], dict[str, str]],
    changes: list[dict[str, Any]],
    validate_only: bool,
) -> None:
    """Apply `change` (AlterConfigs' replace, or IncrementalAlterConfigs' operations) to the
    group's configs; GroupConfigRefused says why not."""
    store = context.storage.group_configs
    if store is None:
        raise GroupConfigRefused(ErrorCode.INVALID_REQUEST, "group configs are not kept here")
    if not group_allowed(context, name, ALTER):
        raise GroupConfigRefused(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed.")
    wanted = change(dict(store.get(name)), changes)
    for key, value in wanted.items():
        config = GROUP_CONFIGS.get(key)
        if config is None:
            raise GroupConfigRefused(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {key}")
        problem = config.check(value)
        if problem is not None:
            raise GroupConfigRefused(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {value} for configuration {key}: {problem}",
            )
    if not validate_only:
        await store.replace(name, wanted)
