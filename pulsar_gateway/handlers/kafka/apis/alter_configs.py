"""AlterConfigs and IncrementalAlterConfigs: topic configs changed after creation.

Both end in the same place: the topic's whole config set, checked by the rules CreateTopics
uses (configs.py, Kafka's wording) and stored in the topic's record, so DescribeConfigs shows
it and Produce applies it from the next request on (max.message.bytes, the timestamp rules,
cleanup.policy=compact's key check). AlterConfigs replaces the set (what it does not name
goes back to the default, as on Kafka); IncrementalAlterConfigs applies SET, DELETE,
APPEND and SUBTRACT to it. `pulsar.entry.format` cannot change once a topic has records in
one format: the stored entries would no longer read back (docs/pulsar-mapping.md, 'Entry
formats'). Broker configs are the gateway's own settings (conf/gateway.toml) and are not
altered over the wire: POLICY_VIOLATION, which clients do not retry. Rights: `alter` on
the topic's namespace, or on the cluster for broker configs (docs/security.md).
"""

from __future__ import annotations

import logging
from typing import Any

from pulsar_gateway.handlers.kafka.apis.configs import (
    BROKER,
    TOPIC,
    TOPIC_CONFIGS,
    validate_configs,
)
from pulsar_gateway.handlers.kafka.apis.group_configs import (
    GROUP,
    GroupConfigRefused,
    alter_group,
)
from pulsar_gateway.handlers.kafka.authorization import cluster_allowed, topic_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import StorageError, UnknownTopic
from pulsar_gateway.handlers.kafka.topic_lookup import reserved_refusal
from pulsar_gateway.kafka_codec.entry_format import FORMAT_CONFIG, topic_format
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import ALTER_CONFIGS

log = logging.getLogger("gateway.kafka.admin")

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
BROKER_LOGGER = 8


class ConfigRefused(Exception):
    """One resource's change is refused: the error code and Kafka's message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def alter_configs(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    def replace(_current: dict[str, str], changes: list[dict[str, Any]]) -> dict[str, str]:
        return {change["name"]: change["value"] for change in changes}

    return await _alter(context, request, replace)


async def incremental_alter_configs(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    return await _alter(context, request, _apply_operations)


async def _alter(context: KafkaContext, request: dict[str, Any], change: Any) -> dict[str, Any]:
    responses = []
    for resource in request["resources"]:
        kind, name = resource["resource_type"], resource["resource_name"]
        response = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resource_type": kind,
            "resource_name": name,
        }
        try:
            await _alter_one(context, kind, name, resource["configs"], change, request)
        except ConfigRefused as refused:
            response.update(error_code=refused.code, error_message=refused.message)
        except StorageError as exc:
            log.warning("altering configs of %s failed: %s", name, exc)
            response.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc))
        responses.append(response)
    return {"throttle_time_ms": 0, "responses": responses}


async def _alter_one(
    context: KafkaContext,
    kind: int,
    name: str,
    changes: list[dict[str, Any]],
    change: Any,
    request: dict[str, Any],
) -> None:
    if kind in (BROKER, BROKER_LOGGER):
        if not cluster_allowed(context, ALTER_CONFIGS):
            raise ConfigRefused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        raise ConfigRefused(
            ErrorCode.POLICY_VIOLATION,
            "broker configs are the gateway's settings (conf/gateway.toml); "
            "they are not altered over the Kafka protocol",
        )
    if kind not in (TOPIC, GROUP):
        raise ConfigRefused(ErrorCode.INVALID_REQUEST, f"resource type {kind} is not supported")
    names = [item["name"] for item in changes]
    if len(names) != len(set(names)):
        raise ConfigRefused(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    if kind == GROUP:  # share groups' configs (group_configs.py)
        try:
            await alter_group(context, name, change, changes, bool(request.get("validate_only")))
        except GroupConfigRefused as refused:
            raise ConfigRefused(refused.code, refused.message) from None
        return
    refusal = reserved_refusal(context, name)
    if refusal is not None:
        raise ConfigRefused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, refusal)
    if not topic_allowed(context, name, ALTER_CONFIGS):
        raise ConfigRefused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
    pulsar_name = context.pulsar_name(name)
    record = context.topics.get(pulsar_name)
    if record is None:
        raise ConfigRefused(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"Topic {name} does not exist",
        )
    wanted = change(dict(record.configs), changes)
    problem = validate_configs(dict(wanted))
    if problem is not None:
        raise ConfigRefused(ErrorCode.INVALID_CONFIG, problem)
    default_format = context.settings.entry_format
    if topic_format(wanted, default_format) is not topic_format(record.configs, default_format):
        raise ConfigRefused(
            ErrorCode.INVALID_CONFIG,
            f"{FORMAT_CONFIG} cannot change after a topic is created: its stored entries "
            "would no longer read back",
        )
    if request.get("validate_only"):
        return
    try:
        await context.topics.replace_configs(pulsar_name, wanted)
    except UnknownTopic:
        raise ConfigRefused(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
        ) from None
    log.info("configs of %s are now %s", name, wanted)


def _apply_operations(current: dict[str, str], changes: list[dict[str, Any]]) -> dict[str, str]:
    """IncrementalAlterConfigs' operations on one topic's set, as Kafka applies them."""
    result = dict(current)
    for item in changes:
        key, operation, value = item["name"], item["config_operation"], item["value"]
        if operation == SET:
            if value is None:
                raise ConfigRefused(
                    ErrorCode.INVALID_CONFIG, f"Null value not supported for : {key}"
                )
            result[key] = value
        elif operation == DELETE:
            result.pop(key, None)
        elif operation in (APPEND, SUBTRACT):
            config = TOPIC_CONFIGS.get(key)
            if config is None or config.kind != "LIST":
                verb = "append" if operation == APPEND else "subtract"
                raise ConfigRefused(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {verb} is not allowed for config key: {key}",
                )
            items = [part for part in result.get(key, config.kafka_default).split(",") if part]
            given = [part for part in (value or "").split(",") if part]
            if operation == APPEND:
                items += [part for part in given if part not in items]
            else:
                items = [part for part in items if part not in given]
            result[key] = ",".join(items)
        else:
            raise ConfigRefused(ErrorCode.INVALID_REQUEST, f"unknown operation {operation}")
    return result
